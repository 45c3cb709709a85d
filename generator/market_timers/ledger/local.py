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

Imports nothing but `os` (its file primitives: localfiles.py): the runner calls this before every
job.
"""

import os

from market_timers.ledger import TICKETS_DIR, Claim, Key, Ledger, format_fields
from market_timers.ledger.localfiles import (
    DIR_FLAGS,
    create_entry,
    open_under,
    read_entry,
    replace_entry,
)

TICKETS = TICKETS_DIR


class LocalLedger(Ledger):
    def __init__(self, state_dir: str):
        self.state_dir = os.fspath(state_dir)

    def _key_dir(self, key: Key, create: bool) -> int | None:
        try:
            return open_under(self.state_dir, (key.job, key.name), create)
        except FileNotFoundError:
            if create:
                raise
            return None

    @classmethod
    def _read_claim(cls, name: str, dir_fd: int) -> dict | None:
        """A claim file, or None. A claim is complete when it appears (_create); an empty one,
        left by an older version whose write failed before the exec, is no start."""
        return read_entry(name, dir_fd) or None

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
                last = read_entry(f"attempt-{numbers[-1]}", fd) if numbers else None
                result = read_entry(f"attempt-{numbers[-1]}.result", fd) if numbers else None
                if last is None or result is None or result.get("result") == "success":
                    return Claim(False, holder=last or read_entry("attempt-1", fd))
            attempt = numbers[-1] + 1 if numbers else 1
            while True:
                text = format_fields({"job": key.job, "session": key.session,
                                      "slot": key.slot or None, "attempt": attempt, "how": how,
                                      **fields})
                if create_entry(f"attempt-{attempt}", fd, text):
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
            while not create_entry(name, fd, text, durable=False):
                n += 1
                name = f"{base}.{n}"
        finally:
            os.close(fd)

    def take_ticket(self, nonce: str, key: Key) -> dict | None:
        if not nonce or "/" in nonce or nonce.startswith("."):
            return None
        try:
            fd = open_under(self.state_dir, (TICKETS,), create=False)
        except FileNotFoundError:
            return None
        try:
            ticket = read_entry(nonce, fd)
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
            records = {n: read_entry(n, fd) or {} for n in entries}
            mine = [n for n in entries if records[n].get("invocation") == invocation]
            target = max(mine, key=lambda n: (records[n].get("started_utc", ""), n)) \
                if mine else None
            if target is None:  # the runner stopped before it could write anything
                status = str(fields.get("exit_status") or "")
                target = f"refused-{str(fields.get('finished_utc', '')).replace(':', '')}-" \
                         f"{os.getpid()}"
                create_entry(target, fd, format_fields({
                    "job": key.job, "session": key.session, "slot": key.slot or None,
                    "refused": "runner-error" if status == "172" else "unrecorded",
                    "invocation": invocation}), durable=False)
                started = None
            else:
                started = records[target].get("started_mono")
            if isinstance(started, float) and "duration_sec" not in fields:
                import time  # only the record step's duration: the claim path never needs it

                fields = {**fields, "duration_sec": round(time.monotonic() - started, 3)}
            replace_entry(f"{target}.result", fd, format_fields(fields))
        finally:
            os.close(fd)

    # -- readers -----------------------------------------------------------------------------

    def _entries(self, key: Key, *prefixes: str) -> list[list[dict]]:
        """The records of each prefix (attempt-, refused-), the key's directory opened once."""
        out: list[list[dict]] = [[] for _ in prefixes]
        fd = self._key_dir(key, create=False)
        if fd is None:
            return out
        try:
            for name in os.listdir(fd):
                if not _is_entry(name):
                    continue
                kind = next((i for i, p in enumerate(prefixes) if name.startswith(p)), None)
                record = read_entry(name, fd) if kind is not None else None
                if record is None:
                    continue
                result = read_entry(f"{name}.result", fd)
                if result:
                    record.update(result)
                out[kind].append(record)
            return out
        finally:
            os.close(fd)

    def attempts(self, key: Key) -> list[dict]:
        return _by_attempt(self._entries(key, "attempt-")[0])

    def refusals(self, key: Key) -> list[dict]:
        return _by_start(self._entries(key, "refused-")[0])

    def attempts_and_refusals(self, key: Key) -> tuple[list[dict], list[dict]]:
        """Both, the key's directory opened once (status reads thousands of keys)."""
        attempts, refusals = self._entries(key, "attempt-", "refused-")
        return _by_attempt(attempts), _by_start(refusals)

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
            root = open_under(self.state_dir, (), create=False)
        except FileNotFoundError:
            return []
        if stamps:
            import stat  # only the readers that ask for stamps: the runner never does
        try:
            jobs = [job] if job else sorted(n for n in os.listdir(root) if n != TICKETS)
            out = []
            for name in jobs:
                try:
                    jfd = os.open(name, DIR_FLAGS, dir_fd=root)
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
        fd = open_under(self.state_dir, (TICKETS,), create=True)
        try:
            os.fchmod(fd, 0o700)  # its nonces are the owner's only (the jobs share the group)
            if owner is not None:  # ledger/ and ledger/tickets/ may have just been made by root
                os.fchown(fd, *owner)
                root = open_under(self.state_dir, (), create=False)
                try:
                    os.fchown(root, *owner)
                finally:
                    os.close(root)
            if not create_entry(nonce, fd, format_fields(fields)):
                raise FileExistsError(f"ticket {nonce} exists")
            if owner is not None:
                os.chown(nonce, *owner, dir_fd=fd, follow_symlinks=False)
        finally:
            os.close(fd)


def _by_attempt(records: list[dict]) -> list[dict]:
    return sorted(records, key=lambda r: r.get("attempt", 0))


def _by_start(records: list[dict]) -> list[dict]:
    return sorted(records, key=lambda r: r.get("started_utc", ""))


def _is_entry(name: str) -> bool:
    return not name.endswith(".result") and not name.startswith(".") and (
        name.startswith("attempt-") or name.startswith("refused-"))


def _attempt_numbers(names: list[str]) -> list[int]:
    return sorted(int(n[8:]) for n in names if n.startswith("attempt-") and n[8:].isdigit())
