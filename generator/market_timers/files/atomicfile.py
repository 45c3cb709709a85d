"""Write a file atomically, and take a flock: the one place for both (every writer uses it).

write(path, data) / write_at(dir_fd, name, data): a temp file beside the target
(`.<name>.<pid>.<random>.tmp`, created O_EXCL|O_NOFOLLOW: a name planted there is never
followed), all of `data`, chmod to `mode` (exactly: the umask does not apply), then rename(2)
over the name. On any failure before the rename (ENOSPC, EIO, a crash of the writer) the temp
file is removed and the old file is left as it was: a reader sees the old file or the new one,
never a part. rename(2) replaces a symlink at the name itself, never its target. Walking the
directories below a trusted base without following symlinks is safefs.py's job (it passes its
directory fd to write_at).

The fsync rules (`sync=`), named at every call site:

* DURABLE (the default): fsync the file before the rename and the directory after it: once the
  call returns, the new content survives a power cut. A failed directory flush (the file is
  already renamed into place) raises DirSyncError, so that a writer that must not write twice
  (the event spool) can tell it from a failed write.
* BATCH: no fsync here. The caller writes many files, then makes them all durable with one
  sync_directory() before it reports success (render: one flush for thousands of units).
* NONE: no fsync at all: atomic for readers, but a power cut may bring the old content back.
  Only where the call site says why that is fine.

flock(fd, exclusive=, wait=): the one flock(2) context manager (blocking or not, shared or
exclusive) for every lock but the runner's: runner.take_lock keeps its own import-light copy,
because its fd is inherited by the exec'd job (the lock must die with the job, not with a
`with` block).

Hand-written: the standard library's tempfile has no fsync of the directory nor a dir_fd, and
the libraries that write atomically (atomicwrites, unmaintained) have neither dir_fd nor
O_NOFOLLOW. Import-light (`os` only; fcntl and ctypes when used): the event spool runs it inside
jobs, the retries marker and the ledger from the runner's --record.
"""

from __future__ import annotations

import os

DURABLE = "durable"
BATCH = "batch"
NONE = "none"
_RULES = (DURABLE, BATCH, NONE)
_TEMP = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


class DirSyncError(OSError):
    """The file was renamed into place; only the fsync of its directory failed."""


def temp_name(name: str) -> str:
    """A dot name (skipped by every reader of *.json) ending in .tmp (the spool's sweep)."""
    return f".{name}.{os.getpid()}.{os.urandom(4).hex()}.tmp"


def write(path: str | os.PathLike, data: bytes | str, *, sync: str = DURABLE,
          mode: int = 0o640, make_dirs: bool = False) -> None:
    """Replace the file at `path` with `data` (str: UTF-8). `make_dirs`: create its parent."""
    directory, name = os.path.split(os.fspath(path))
    _write(None, directory or ".", name, data, sync, mode, make_dirs)


def create(path: str | os.PathLike, data: bytes | str, *, mode: int = 0o640) -> bool:
    """Write `data` at `path` only if nothing is there, whole and durable: True when this call
    made it, False when the name was taken (by another writer, however close in time). The temp
    file is link(2)ed to the name (which fails when it exists; a symlink there is never
    followed), then removed: of two creators, exactly one gets True (a halt runs on_halt once)."""
    directory, name = os.path.split(os.fspath(path))
    directory = directory or "."
    if isinstance(data, str):
        data = data.encode("utf-8")
    tmp = os.path.join(directory, temp_name(name))
    fd = os.open(tmp, _TEMP, mode)
    try:
        try:
            _write_all(fd, data)
            os.fchmod(fd, mode)
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, os.path.join(directory, name), follow_symlinks=False)
        except FileExistsError:
            return False
    finally:
        os.unlink(tmp)
    _fsync_path(directory)
    return True


def write_at(dir_fd: int, name: str, data: bytes | str, *, sync: str = DURABLE,
             mode: int = 0o640) -> None:
    """Replace the file `name` in the directory open as `dir_fd` (safefs, the ledger)."""
    _write(dir_fd, "", name, data, sync, mode, False)


def _write(dir_fd: int | None, directory: str, name: str, data: bytes | str, sync: str,
           mode: int, make_dirs: bool) -> None:
    if sync not in _RULES:
        raise ValueError(f"sync must be one of {', '.join(_RULES)} (got {sync!r})")
    if isinstance(data, str):
        data = data.encode("utf-8")
    tmp, target = temp_name(name), name
    if dir_fd is None:
        tmp, target = os.path.join(directory, tmp), os.path.join(directory, name)
    try:
        fd = os.open(tmp, _TEMP, mode, dir_fd=dir_fd)
    except FileNotFoundError:
        if not make_dirs:
            raise
        os.makedirs(directory, exist_ok=True)  # only when missing: render writes 50,000 files
        fd = os.open(tmp, _TEMP, mode, dir_fd=dir_fd)
    try:
        try:
            _write_all(fd, data)
            os.fchmod(fd, mode)
            if sync == DURABLE:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except OSError:
            pass
        raise
    if sync == DURABLE:
        try:
            if dir_fd is None:
                _fsync_path(directory)
            else:
                os.fsync(dir_fd)
        except OSError as e:
            raise DirSyncError(e.errno, f"{name} is in place but its directory was not "
                                        f"flushed: {e.strerror}") from e


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _fsync_path(directory: str | os.PathLike) -> None:
    fd = os.open(directory, _DIR)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_directory(directory: str | os.PathLike) -> None:
    """The flush of a BATCH: make every file written (and renamed) into `directory` durable:
    syncfs(2) of its file system, then fsync of the directory itself. OSError when the flush
    fails (EIO...).

    Hand-written: Python's os module has sync() (every file system) and fsync() (one file) but no
    syncfs(); libc's is called through ctypes, and os.sync() is the fallback without it.
    """
    fd = os.open(directory, _DIR)
    try:
        if not _syncfs(fd):
            os.sync()
        os.fsync(fd)
    finally:
        os.close(fd)


def _syncfs(fd: int) -> bool:
    """syncfs(fd) through libc; False when libc has none. OSError when it fails."""
    import ctypes  # only where syncfs is asked for (render's batch)

    try:
        fn = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return False
    if fn(fd) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return True


class flock:  # noqa: N801 - used like a function: `with flock(fd) as held:`
    """`with flock(fd, exclusive=True, wait=True) as held:` flock(2) on `fd`, which it owns: the
    fd is closed on exit (that releases the lock, as the end of the process does).

    `held` is True; with wait=False it is False when another open file description holds a
    conflicting lock (busy: nothing waited for). Any other error closes the fd and raises.
    A class, not contextlib: this module stays import-light.
    """

    def __init__(self, fd: int, *, exclusive: bool = True, wait: bool = True):
        self.fd, self.exclusive, self.wait = fd, exclusive, wait

    def __enter__(self) -> bool:
        import fcntl

        op = (fcntl.LOCK_EX if self.exclusive else fcntl.LOCK_SH) | \
            (0 if self.wait else fcntl.LOCK_NB)
        try:
            fcntl.flock(self.fd, op)
        except BlockingIOError:
            return False
        except BaseException:
            os.close(self.fd)
            raise
        return True

    def __exit__(self, *exc) -> None:
        os.close(self.fd)
