"""The lock group on this host: a flock on a file of the package's user's own lock directory,
held by the runner (or its job) while the run lasts, and the note its holder leaves there. On
the hot path: standard library only.
"""

import errno
import fcntl
import os
import stat
from datetime import UTC, datetime

from market_timers.runner.start import WARNING, log


class LockError(Exception):
    pass


# Where the last holder's unit's processes are looked for (faked by tests/runner)
CGROUP_ROOT, PROC, SELF_CGROUP = "/sys/fs/cgroup", "/proc", "/proc/self/cgroup"
LOCKS = "locks"  # <lock dir>/locks/<group>.lock: 0700, only the package's user enters


def take_lock(lock_dir: str, group: str, job: str, session: str) -> int | None:
    """The locked fd (inheritable), or None when another run holds the group's lock.

    The lock files are 0600 in <lock dir>/locks/, a 0700 directory of the package's user (made
    here if missing; tmpfiles.d makes it at boot): no other user can open a lock file, and so
    none can take, hold or probe a lock group (flock needs only a read-only descriptor). A lock
    directory that another user owns or may enter, a lock file that is not this user's regular
    file, or a symlink planted in place of either, is a LockError: never followed, never used.

    "Busy" names the holder from the kernel's lock table (/proc/locks: the pid that holds the
    flock on that inode), not from the note the holder wrote into the file, which could be a
    previous holder's. The group is busy too while the unit of its last holder (the note's
    cgroup) still has a process of another user than this one: its job's, left behind by a
    double fork or a supervisor killed -9 (issue 41); systemd stops them within that unit's
    TimeoutStopSec=, and the group is free from then on.

    Every other flock goes through atomicfile.flock; this one is the runner's own import-light
    copy, on purpose: the fd outlives any `with` block (the supervisor holds it while the job
    runs, or the job inherits it), and the start path imports nothing more."""
    path = os.path.join(lock_dir, LOCKS, f"{group}.lock")
    fd = _open_lock_file(os.path.join(lock_dir, LOCKS), group)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
        os.close(fd)
        raise LockError(f"the lock file {path} is not this user's own 0600 file: not used")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = lock_holder(st) or "a process this user cannot see"
        note = os.pread(fd, 512, 0).decode(errors="replace").strip()
        os.close(fd)
        log(WARNING, f"lock group '{group}' is busy (held by {holder}"
                     f"{f'; its note: {note}' if note else ''}); this run of {job} for session "
                     f"{session} is dropped, not queued")
        return None
    except OSError as e:
        os.close(fd)
        raise LockError(f"cannot lock {path}: {e.strerror}") from None
    unit = own_unit_cgroup()
    if _left_behind(fd, group, unit, f"this run of {job} for session {session}"):
        os.close(fd)
        return None
    _write_note(fd, path, f"pid {os.getpid()} job {job} session {session}", unit)
    os.set_inheritable(fd, True)
    return fd


def _write_note(fd: int, path: str, holder: str, cgroup: str | None) -> None:
    """The holder, its start and its unit's cgroup (for the next holder: _left_behind)."""
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    note = f"{holder} since {stamp}" + (f" cgroup {cgroup}" if cgroup else "")
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{note}\n".encode(), 0)
    except OSError as e:  # the lock is held; only its note for the next one is missing
        log(WARNING, f"cannot write the holder's note into {path}: {e.strerror}")


def _left_behind(fd: int, group: str, unit: str | None, what: str) -> bool:
    """True (and said) when the last holder's unit still has its job's processes, though the
    flock is free: its supervisor has ended (or was killed), its job's children have not. The
    unit this process runs in is never probed: systemd starts a unit again only once it has
    stopped, and its cgroup (`unit`) holds this runner."""
    note = os.pread(fd, 512, 0).decode(errors="replace").strip()
    head, marker, cgroup = note.rpartition(" cgroup ")
    if (not marker or cgroup == unit or not cgroup.endswith(".service")
            or not cgroup.startswith(CGROUP_ROOT + "/") or "/../" in cgroup):
        return False
    alive = unit_processes(cgroup)
    if not alive:
        return False
    last = head.partition(" since ")[0].split(" ", 2)[-1]  # "job J session S"
    log(WARNING, f"lock group '{group}' is busy: its last run ({last}) has ended, but its unit "
                 f"{os.path.basename(cgroup)} still has processes ({', '.join(alive[:5])}"
                 f"{' ...' if len(alive) > 5 else ''}) until systemd has stopped them "
                 f"(TimeoutStopSec=, then SIGKILL); {what} is dropped, not queued")
    return True


def own_unit_cgroup() -> str | None:
    """The directory of this process's cgroup when it is a service unit's: cgroup v2's (at
    CGROUP_ROOT, or at its unified/ on a hybrid host), else v1's name=systemd (a legacy host);
    None by hand, in a scope or in the root cgroup: no unit whose end a next holder could wait
    for."""
    try:
        with open(SELF_CGROUP) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    v2 = next((line[3:] for line in lines if line.startswith("0::")), "")
    v1 = next((line.split(":", 2)[2] for line in lines if ":name=systemd:" in line), "")
    for root, path in ((CGROUP_ROOT, v2), (CGROUP_ROOT + "/unified", v2),
                       (CGROUP_ROOT + "/systemd", v1)):
        if path.endswith(".service") and os.path.isfile(f"{root}{path}/cgroup.procs"):
            return root + path
    return None


def unit_processes(cgroup: str) -> list[str]:
    """The processes in the cgroup directory `cgroup` and below that are not all this user's
    ("pid N of USER"): this user's are the runner's own (the last run's record step,
    ExecStopPost=), never a job's (jobuser.resolve refuses the package's user). A process whose
    /proc entry cannot be read counts; one whose entry is gone does not (job units do not hide
    /proc)."""
    found = []
    for root, _dirs, _files in os.walk(cgroup):  # none once the unit is gone
        try:
            with open(os.path.join(root, "cgroup.procs")) as f:
                pids = f.read().split()
        except OSError:
            continue
        for pid in pids:
            uids = _uids(pid)
            if uids is not None and uids != {os.geteuid()}:
                found.append(f"pid {pid} of {_user(uids)}")
    return found


def _user(uids: set[int]) -> str:
    import pwd  # a C module, and only once a process was left behind

    if len(uids) == 1 and -1 not in uids:
        try:
            return pwd.getpwuid(next(iter(uids))).pw_name
        except KeyError:
            pass
    return "uid " + "/".join(str(u) for u in sorted(uids))


def _uids(pid: str) -> set[int] | None:
    """The real, effective, saved and file-system uids of `pid`; None: it has ended."""
    try:
        with open(f"{PROC}/{pid}/status") as f:
            line = next((x for x in f if x.startswith("Uid:")), "Uid:")
    except (FileNotFoundError, ProcessLookupError):
        return None
    except OSError:
        return {-1}
    return {int(u) for u in line.split()[1:]} or {-1}


def _open_lock_file(directory: str, group: str) -> int:
    """The group's lock file, opened in the lock directory (made if missing) that must be this
    user's own 0700 one; neither followed through a symbolic link (LockError)."""
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as e:
        why = "it is a symbolic link, not followed" if e.errno == errno.ELOOP else e.strerror
        raise LockError(f"cannot open the lock directory {directory}: {why}") from None
    try:
        st = os.fstat(dfd)
        if st.st_uid != os.geteuid() or st.st_mode & 0o077:
            raise LockError(f"the lock directory {directory} is not this user's own 0700 "
                            f"directory (owner uid {st.st_uid}, mode "
                            f"{st.st_mode & 0o7777:04o}): another user could take the locks")
        return os.open(f"{group}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK,
                       0o600, dir_fd=dfd)
    except OSError as e:
        why = "it is a symbolic link, not followed" if e.errno == errno.ELOOP else e.strerror
        raise LockError(f"cannot open the lock file {os.path.join(directory, group)}.lock: "
                        f"{why}") from None
    finally:
        os.close(dfd)


def lock_holder(st, locks: str = "/proc/locks") -> str | None:
    """Who holds the flock on the file of `st` (os.stat_result), from the kernel's lock table:
    "pid N (job J session S)" with what /proc/N/environ tells, or "pid N"; None if not found."""
    device = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        with open(locks) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 00:1a:5678 0 EOF" (a waiter's line has "->")
        if len(fields) >= 6 and fields[1] == "FLOCK" and "->" not in fields[1:3] \
                and fields[5] == device:
            pid = fields[4]
            try:
                with open(f"/proc/{pid}/environ", "rb") as e:
                    env = dict(v.split(b"=", 1) for v in e.read().split(b"\0") if b"=" in v)
            except OSError:
                return f"pid {pid}"
            what = " ".join(f"{k.lower()} {env[f'MARKET_{k}'.encode()].decode(errors='replace')}"
                            for k in ("JOB", "SESSION") if f"MARKET_{k}".encode() in env)
            return f"pid {pid}" + (f" ({what})" if what else "")
    return None
