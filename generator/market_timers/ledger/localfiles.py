"""The local ledger's file primitives: every path component below the state directory opened
with O_NOFOLLOW relative to its parent's fd, entries created complete or not at all (a temp file
link(2)ed to its name), records read only when they are regular files.

Imports nothing but `os`, `errno` and `stat`: the runner calls this before every job.
"""

import errno
import os
import stat

from market_timers.ledger.fields import parse_fields
from market_timers.ledger.paths import LEDGER_DIR

ROOT = LEDGER_DIR
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO planted in place of a record must not hang the runner or root's sync (the
# open of a FIFO with no writer blocks); what is not a regular file is refused (read_entry).
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def _empty(name: str, dir_fd: int) -> bool:
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_size == 0


def open_under(state_dir: str, parts: tuple[str, ...], create: bool) -> int:
    """An fd on <state_dir>/ledger/<parts...>, made (and made durable) when `create`."""
    if create:
        os.makedirs(state_dir, exist_ok=True)
    fd = os.open(state_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name in (ROOT, *parts):
            try:
                child = os.open(name, DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                try:
                    os.mkdir(name, 0o750, dir_fd=fd)
                except FileExistsError:
                    pass
                child = os.open(name, DIR_FLAGS, dir_fd=fd)
                os.fsync(fd)  # the new directory's entry
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_entry(name: str, dir_fd: int) -> dict | None:
    try:
        fd = os.open(name, _READ, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno == errno.ELOOP:  # a symlink planted in place of an entry: not ours
            return None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, f"{name} in the run ledger is not a regular file")
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return parse_fields(b"".join(chunks).decode("utf-8", "replace"))

def create_entry(name: str, dir_fd: int, text: str, durable: bool = True) -> bool:
    """Exclusive creation of a complete file; False when the name exists. Durable (file and
    entry) if asked.

    The name appears complete or not at all: the text goes into a temp file first (written
    and fsync'd), which is then link(2)ed to the name, and link fails when the name exists:
    of racing starts one creates it. A write that fails (ENOSPC, EIO) leaves no name behind,
    so a claim that could not be written never reads as a start. An empty file of that name
    (left by a version that created the name first and wrote it after, and crashed or hit a
    full disk in between: its job was never exec'd) is replaced; claims of one (job,
    session) are made under its lock group's flock, so no other start races that."""
    tmp = f".{name}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    fd = os.open(tmp, _CREATE, 0o640, dir_fd=dir_fd)
    try:
        try:
            data = text.encode()
            if os.write(fd, data) != len(data):
                raise OSError(errno.ENOSPC, "short write")
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
        except FileExistsError:
            if not _empty(name, dir_fd):
                return False
            os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    finally:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except FileNotFoundError:
            pass
    if durable:
        os.fsync(dir_fd)
    return True

def replace_entry(name: str, dir_fd: int, text: str) -> None:
    # Imported here: only finish() (ExecStopPost=) replaces; the runner's claim path creates.
    from market_timers.files import atomicfile

    atomicfile.write_at(dir_fd, name, text, mode=0o640, sync=atomicfile.DURABLE)

