"""Open files under a directory the service user can write, without following symlinks.

`state_dir` and `spool_dir` belong to the package user, and every job runs as that user: a job can
plant `state_dir/sync.lock -> /etc/nologin` (or `state_dir/alerts -> /etc`). Root-run commands
(sync, refresh, status, an operator's `deadman`) must never follow such a link. Every path here is
given with its `base`, the configured directory (created by root or the package, and trusted); each
component below it is opened relative to its parent's fd with O_NOFOLLOW, so a symlink anywhere
below the base fails with ELOOP (or ENOTDIR) instead of being followed.

Hand-written (no library offers dir_fd walks with O_NOFOLLOW); standard library only, because the
runner may use it on the hot path.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
from pathlib import Path

from market_timers.files import atomicfile

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class SymlinkRefused(OSError):
    """A symlink (or a non-directory) sits where a directory or file of ours should be."""


def _parts(path: Path, base: Path) -> tuple[str, ...]:
    # OSError, not ValueError: callers treat it like any other file they cannot open.
    try:
        rel = Path(path).relative_to(base)
    except ValueError:
        raise OSError(errno.EINVAL, f"{path} is not under {base}") from None
    parts = rel.parts
    if any(p in ("..", ".") for p in parts):
        raise OSError(errno.EINVAL, f"{path}: '..' or '.' below {base}")
    return parts


def _refused(path, e: OSError) -> OSError:
    if e.errno in (errno.ELOOP, errno.ENOTDIR):
        return SymlinkRefused(e.errno, f"refusing to follow a symlink at or below {path}")
    return e


def open_dir(path: os.PathLike | str, *, base: os.PathLike | str, create: bool = False,
             mode: int = 0o750) -> int:
    """An fd of directory `path` (at or under `base`), walked without following symlinks."""
    base, path = Path(base), Path(path)
    parts = _parts(path, base)
    if create:
        base.mkdir(parents=True, exist_ok=True)
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    walked = base
    try:
        for part in parts:
            walked = walked / part
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, mode, dir_fd=fd)
            try:
                nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as e:
                raise _refused(walked, e) from None
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_file(path: os.PathLike | str, flags: int, mode: int = 0o640, *,
              base: os.PathLike | str, create_dirs: bool = False) -> int:
    """os.open(path, flags | O_NOFOLLOW) with every directory below `base` walked safely."""
    path = Path(path)
    dfd = open_dir(path.parent, base=base, create=create_dirs)
    try:
        return os.open(path.name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dfd)
    except OSError as e:
        raise _refused(path, e) from None
    finally:
        os.close(dfd)


def read_bytes(path: os.PathLike | str, *, base: os.PathLike | str, limit: int = 16 << 20
               ) -> bytes:
    fd = open_file(path, os.O_RDONLY | os.O_NONBLOCK, base=base)  # a planted FIFO: no hang
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, f"{path} is not a regular file")
        chunks, size = [], 0
        while size < limit:
            chunk = os.read(fd, min(1 << 20, limit - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_json(path: os.PathLike | str, *, base: os.PathLike | str, default=None):
    """The parsed JSON document, or `default` when missing, unreadable, a symlink or not JSON."""
    try:
        return json.loads(read_bytes(path, base=base))
    except (OSError, ValueError):
        return default


def write_atomic(path: os.PathLike | str, data: bytes | str, *, base: os.PathLike | str,
                 mode: int = 0o640, sync: str = atomicfile.DURABLE) -> None:
    """atomicfile.write_at in `path`'s directory, walked (and made) without following symlinks.

    rename() replaces a planted symlink itself, never its target. On any failure (ENOSPC...) the
    temp file is removed: no partial file is ever left behind. `sync`: atomicfile's rules.
    """
    path = Path(path)
    dfd = open_dir(path.parent, base=base, create=True)
    try:
        atomicfile.write_at(dfd, path.name, data, sync=sync, mode=mode)
    finally:
        os.close(dfd)


def write_json(path: os.PathLike | str, doc, *, base: os.PathLike | str, mode: int = 0o640,
               sync: str = atomicfile.DURABLE) -> None:
    write_atomic(path, json.dumps(doc, indent=1, sort_keys=True, default=str) + "\n",
                 base=base, mode=mode, sync=sync)


def append(path: os.PathLike | str, data: bytes, *, base: os.PathLike | str,
           mode: int = 0o640, durable: bool = False) -> int:
    """Append `data` (one write: whole lines stay whole); `durable`: fsync before returning.
    Returns the file's size after the write."""
    fd = open_file(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, mode, base=base,
                   create_dirs=True)
    try:
        os.write(fd, data)
        if durable:
            os.fsync(fd)
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def unlink(path: os.PathLike | str, *, base: os.PathLike | str) -> bool:
    """Remove the entry (a symlink itself, never its target). False when it did not exist."""
    path = Path(path)
    try:
        dfd = open_dir(path.parent, base=base)
    except FileNotFoundError:
        return False
    try:
        os.unlink(path.name, dir_fd=dfd)
        os.fsync(dfd)
        return True
    except FileNotFoundError:
        return False
    finally:
        os.close(dfd)


def rename(src: os.PathLike | str, dst: os.PathLike | str, *, base: os.PathLike | str) -> None:
    src, dst = Path(src), Path(dst)
    sfd = open_dir(src.parent, base=base)
    try:
        dfd = open_dir(dst.parent, base=base, create=True)
        try:
            os.replace(src.name, dst.name, src_dir_fd=sfd, dst_dir_fd=dfd)
            os.fsync(dfd)
        finally:
            os.close(dfd)
    finally:
        os.close(sfd)


def listdir(path: os.PathLike | str, *, base: os.PathLike | str) -> list[str]:
    """Names in directory `path` ([] when it does not exist); the walk follows no symlink."""
    try:
        dfd = open_dir(path, base=base)
    except FileNotFoundError:
        return []
    try:
        return sorted(os.listdir(dfd))
    finally:
        os.close(dfd)


def open_lock(path: os.PathLike | str, *, base: os.PathLike | str) -> int:
    """A lock file's fd, created if needed; read-only when another user created it."""
    try:
        return open_file(path, os.O_RDWR | os.O_CREAT, 0o640, base=base, create_dirs=True)
    except PermissionError:
        return open_file(path, os.O_RDONLY, base=base)


def lock(path: os.PathLike | str, *, base: os.PathLike | str, exclusive: bool = True,
         wait: bool = True) -> atomicfile.flock:
    """`with safefs.lock(path, base=...) as held:` atomicfile.flock on open_lock(path)."""
    return atomicfile.flock(open_lock(path, base=base), exclusive=exclusive, wait=wait)


def own_directory(directory: os.PathLike | str, mode: int) -> None:
    """`directory` as this process's own directory of `mode`, writable by no one else: made if
    missing; one that is not (another owner, group- or world-writable, a symlink or not a
    directory: planted before root first made it) is moved aside to `<name>.untrusted-<time>`,
    never written into, and made anew. Its parent must exist or is made (0755)."""
    import logging
    import time

    directory = Path(directory)
    try:
        st = os.lstat(directory)
    except FileNotFoundError:
        st = None
    if st is not None and not (stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid()
                               and not st.st_mode & 0o022):
        aside = directory.with_name(f"{directory.name}.untrusted-{int(time.time())}")
        os.rename(directory, aside)
        logging.getLogger("market_timers").warning(
            "%s was not this user's own directory: moved to %s", directory, aside)
        st = None
    if st is None:
        directory.parent.mkdir(parents=True, exist_ok=True)
        os.mkdir(directory, mode)
    os.chmod(directory, mode, follow_symlinks=False)
