"""The local ledger: files under <state_dir>/ledger/, one directory per key.

    ledger/<job>/<session>[+<slot>]/attempt-1          the claim of attempt 1 (O_CREAT|O_EXCL)
    ledger/<job>/<session>[+<slot>]/attempt-1.result   how it ended (ExecStopPost=)
    ledger/<job>/<session>[+<slot>]/refused-<stamp>-<pid>[.result]   a start that did not run
    ledger/tickets/<nonce>                             a one-off `market-timers run` ticket

The claim is the exclusive creation of `attempt-N`: of any number of racing starts exactly one
creates it (O_CREAT|O_EXCL is atomic on a local file system). The file and its directory (and any
directory just made on the way) are fsync'd before `claim` returns, so a claim survives a power cut
that follows the job's start. Every path component below the state directory is opened with
O_NOFOLLOW relative to its parent's fd: a planted symlink is an error, never followed.

Imports nothing but `os` (and `errno`): the runner calls this before every job.
"""

import errno
import os
import stat

from market_timers.ledger import (
    LEDGER_DIR,
    TICKETS_DIR,
    Claim,
    Key,
    Ledger,
    format_fields,
    parse_fields,
)

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO planted in place of a record must not hang the runner or root's sync (the
# open of a FIFO with no writer blocks); what is not a regular file is refused (_read).
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
ROOT = LEDGER_DIR
TICKETS = TICKETS_DIR


def _empty(name: str, dir_fd: int) -> bool:
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_size == 0


class LocalLedger(Ledger):
    def __init__(self, state_dir: str):
        self.state_dir = os.fspath(state_dir)

    # -- directories -------------------------------------------------------------------------

    def _open(self, parts: tuple[str, ...], create: bool) -> int:
        """An fd on <state_dir>/ledger/<parts...>, made (and made durable) when `create`."""
        if create:
            os.makedirs(self.state_dir, exist_ok=True)
        fd = os.open(self.state_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for name in (ROOT, *parts):
                try:
                    child = os.open(name, _DIR, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    try:
                        os.mkdir(name, 0o750, dir_fd=fd)
                    except FileExistsError:
                        pass
                    child = os.open(name, _DIR, dir_fd=fd)
                    os.fsync(fd)  # the new directory's entry
                os.close(fd)
                fd = child
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _key_dir(self, key: Key, create: bool) -> int | None:
        try:
            return self._open((key.job, key.name), create)
        except FileNotFoundError:
            if create:
                raise
            return None

    @staticmethod
    def _read(name: str, dir_fd: int) -> dict | None:
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

    @staticmethod
    def _create(name: str, dir_fd: int, text: str, durable: bool = True) -> bool:
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

    @staticmethod
    def _replace(name: str, dir_fd: int, text: str) -> None:
        # Imported here: only finish() (ExecStopPost=) replaces; the runner's claim path creates.
        from market_timers.files import atomicfile

        atomicfile.write_at(dir_fd, name, text, mode=0o640, sync=atomicfile.DURABLE)

    @classmethod
    def _read_claim(cls, name: str, dir_fd: int) -> dict | None:
        """A claim file, or None. A claim is complete when it appears (_create); an empty one,
        left by an older version whose write failed before the exec, is no start."""
        return cls._read(name, dir_fd) or None

    # -- the runner's calls ------------------------------------------------------------------

    def holder(self, key: Key) -> dict | None:
        fd = self._key_dir(key, create=False)
        if fd is None:
            return None
        try:
            record = self._read_claim("attempt-1", fd)
        finally:
            os.close(fd)
        if record is not None:
            record.setdefault("attempt", 1)
        return record

    def claim(self, key: Key, how: str, fields: dict) -> Claim:
        fd = self._key_dir(key, create=True)
        try:
            numbers = _attempt_numbers(os.listdir(fd)) if how in ("forced", "retry") else []
            if how == "retry":
                last = self._read(f"attempt-{numbers[-1]}", fd) if numbers else None
                result = self._read(f"attempt-{numbers[-1]}.result", fd) if numbers else None
                if last is None or result is None or result.get("result") == "success":
                    return Claim(False, holder=last or self._read("attempt-1", fd))
            attempt = numbers[-1] + 1 if numbers else 1
            while True:
                text = format_fields({"job": key.job, "session": key.session,
                                      "slot": key.slot or None, "attempt": attempt, "how": how,
                                      **fields})
                if self._create(f"attempt-{attempt}", fd, text):
                    return Claim(True, attempt)
                if how not in ("forced", "retry"):
                    held = self._read_claim(f"attempt-{attempt}", fd) or {}
                    held.setdefault("attempt", attempt)
                    return Claim(False, holder=held)
                attempt += 1  # a forced run raced another one: take the next number
        finally:
            os.close(fd)

    def refuse(self, key: Key, fields: dict) -> None:
        fd = self._key_dir(key, create=True)
        try:
            stamp = str(fields.get("started_utc", "")).replace(":", "").replace("-", "")
            base = f"refused-{stamp}-{os.getpid()}"
            name, n = base, 0
            text = format_fields({"job": key.job, "session": key.session,
                                  "slot": key.slot or None, **fields})
            # Not fsync'd: a refusal is a note for people and the deadman, not a claim.
            while not self._create(name, fd, text, durable=False):
                n += 1
                name = f"{base}.{n}"
        finally:
            os.close(fd)

    def take_ticket(self, nonce: str, key: Key) -> dict | None:
        if not nonce or "/" in nonce or nonce.startswith("."):
            return None
        try:
            fd = self._open((TICKETS,), create=False)
        except FileNotFoundError:
            return None
        try:
            ticket = self._read(nonce, fd)
            if ticket is None or (ticket.get("job"), ticket.get("session")) != (key.job,
                                                                                key.session):
                return None
            try:
                os.unlink(nonce, dir_fd=fd)  # of two starts with one ticket, one unlinks it
            except FileNotFoundError:
                return None
            os.fsync(fd)
            return ticket
        finally:
            os.close(fd)

    def finish(self, key: Key, invocation: str | None, fields: dict) -> None:
        fd = self._key_dir(key, create=True)
        try:
            names = set(os.listdir(fd))
            entries = [n for n in names if _is_entry(n) and f"{n}.result" not in names]
            records = {n: self._read(n, fd) or {} for n in entries}
            mine = [n for n in entries if records[n].get("invocation") == invocation]
            target = max(mine, key=lambda n: (records[n].get("started_utc", ""), n)) \
                if mine else None
            if target is None:  # the runner stopped before it could write anything
                status = str(fields.get("exit_status") or "")
                target = f"refused-{str(fields.get('finished_utc', '')).replace(':', '')}-" \
                         f"{os.getpid()}"
                self._create(target, fd, format_fields({
                    "job": key.job, "session": key.session, "slot": key.slot or None,
                    "refused": "runner-error" if status == "172" else "unrecorded",
                    "invocation": invocation}), durable=False)
                started = None
            else:
                started = records[target].get("started_mono")
            if isinstance(started, float) and "duration_sec" not in fields:
                import time  # only the record step's duration: the claim path never needs it

                fields = {**fields, "duration_sec": round(time.monotonic() - started, 3)}
            self._replace(f"{target}.result", fd, format_fields(fields))
        finally:
            os.close(fd)

    # -- readers -----------------------------------------------------------------------------

    def _entries(self, key: Key, prefix: str) -> list[dict]:
        fd = self._key_dir(key, create=False)
        if fd is None:
            return []
        try:
            out = []
            for name in os.listdir(fd):
                if not (name.startswith(prefix) and _is_entry(name)):
                    continue
                record = self._read(name, fd)
                if record is None:
                    continue
                result = self._read(f"{name}.result", fd)
                if result:
                    record.update(result)
                out.append(record)
            return out
        finally:
            os.close(fd)

    def attempts(self, key: Key) -> list[dict]:
        return sorted(self._entries(key, "attempt-"), key=lambda r: r.get("attempt", 0))

    def refusals(self, key: Key) -> list[dict]:
        return sorted(self._entries(key, "refused-"), key=lambda r: r.get("started_utc", ""))

    def keys(self, job: str | None = None) -> list[Key]:
        return [key for key, _ in self._listed(job, stamps=False)]

    def key_times(self, job: str | None = None) -> list[tuple[Key, int]]:
        """Every key whose directory is a directory, with that directory's mtime (ns). The ledger
        changes a key's directory only by creating a name in it (a claim or a refusal, O_EXCL; a
        result, renamed into place), and each sets the mtime: a reader that kept what it read
        re-reads only what changed since (metrics/scan.py)."""
        return self._listed(job, stamps=True)

    def _listed(self, job: str | None, stamps: bool) -> list[tuple[Key, int]]:
        try:
            root = self._open((), create=False)
        except FileNotFoundError:
            return []
        if stamps:
            import stat  # only the readers that ask for stamps: the runner never does
        try:
            jobs = [job] if job else sorted(n for n in os.listdir(root) if n != TICKETS)
            out = []
            for name in jobs:
                try:
                    jfd = os.open(name, _DIR, dir_fd=root)
                except OSError:
                    continue
                try:
                    for entry in sorted(os.listdir(jfd)):
                        session, _, slot = entry.partition("+")
                        try:
                            key = Key(name, session, slot)
                        except ValueError:
                            continue
                        mtime = 0
                        if stamps:
                            try:
                                st = os.stat(entry, dir_fd=jfd, follow_symlinks=False)
                            except OSError:
                                continue
                            if not stat.S_ISDIR(st.st_mode):
                                continue
                            mtime = st.st_mtime_ns
                        out.append((key, mtime))
                finally:
                    os.close(jfd)
            return out
        finally:
            os.close(root)

    def write_ticket(self, nonce: str, fields: dict, owner: tuple[int, int] | None = None) -> None:
        """`market-timers run` (as root): the ticket its one start consumes; owned by the
        service user (`owner`), who must be able to delete it."""
        fd = self._open((TICKETS,), create=True)
        try:
            os.fchmod(fd, 0o700)  # its nonces are the owner's only (the jobs share the group)
            if owner is not None:  # ledger/ and ledger/tickets/ may have just been made by root
                os.fchown(fd, *owner)
                root = self._open((), create=False)
                try:
                    os.fchown(root, *owner)
                finally:
                    os.close(root)
            if not self._create(nonce, fd, format_fields(fields)):
                raise FileExistsError(f"ticket {nonce} exists")
            if owner is not None:
                os.chown(nonce, *owner, dir_fd=fd, follow_symlinks=False)
        finally:
            os.close(fd)


def _is_entry(name: str) -> bool:
    return not name.endswith(".result") and not name.startswith(".") and (
        name.startswith("attempt-") or name.startswith("refused-"))


def _attempt_numbers(names: list[str]) -> list[int]:
    return sorted(int(n[8:]) for n in names if n.startswith("attempt-") and n[8:].isdigit())
