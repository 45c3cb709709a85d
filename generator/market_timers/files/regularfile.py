"""Read a small file that someone else may have planted: a regular file only, never through a
link, never blocking on a FIFO, never more than a bound. The end records' and the events' reader
(contracts/endrecord.py, events/intake.py). Stdlib only: the runner's record step imports it.
"""

from __future__ import annotations

import os
import stat


def read(path: str | os.PathLike, limit: int) -> tuple[bytes, os.stat_result]:
    """(its bytes, its stat) of the regular file at path; ValueError when it is not a regular
    file or holds more than `limit` bytes; OSError when it cannot be opened (a link, gone...)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("not a regular file")
        if st.st_size > limit:
            raise ValueError(f"{st.st_size} bytes, more than {limit}")
        return os.read(fd, limit + 1), st
    finally:
        os.close(fd)
