"""A job's own credentials (`credentials` in its [[job]]), readable by the job's user only.

systemd loads the unit's credentials (LoadCredential=, render.py) into $CREDENTIALS_DIRECTORY,
readable by the unit's User= alone: the package's user, the runner's, which the job's is not
(jobuser.py). That directory also holds the runner's own (the cluster DSN, a run's ticket). So
the supervisor reads the job's credentials (MARKET_JOB_CREDENTIALS) and forks a keeper: it becomes
the job's user, writes them into a new directory of its own (in /dev/shm, memory: never on disk;
else the unit's private /tmp; the directory 0500, each file 0400), says so, then waits until the
supervisor lets go (the job has ended, or the supervisor died: the pipe closes either way; a stop
signal too) and removes the directory. The job gets CREDENTIALS_DIRECTORY naming it, and sees
nothing of the runner's.

Hot path: os and signal only.
"""

import os
import signal

from market_timers.contracts import environment

BASES = ("/dev/shm", "/tmp")  # noqa: S108 - a 0500 directory of the job's user, random name


class CredentialError(Exception):
    pass


def names(env: dict) -> list[str]:
    return [n for n in env.get(environment.JOB_CREDENTIALS, "").split(",") if n]


def read(env: dict) -> dict[str, bytes]:
    """The job's credentials from the unit's $CREDENTIALS_DIRECTORY (the runner's user reads)."""
    wanted = names(env)
    directory = env.get("CREDENTIALS_DIRECTORY")
    if not directory:
        raise CredentialError(f"no $CREDENTIALS_DIRECTORY for the job's credentials "
                              f"{', '.join(wanted)} (a unit without their LoadCredential= lines:"
                              " run `market-timers sync`)")
    out = {}
    for name in wanted:
        try:
            with open(os.path.join(directory, name), "rb") as f:
                out[name] = f.read()
        except OSError as e:
            raise CredentialError(f"cannot read the job's credential {name} in {directory}: "
                                  f"{e.strerror} (LoadCredential={name}: put it in "
                                  f"/etc/credstore/{name}; systemd 252 starts the unit "
                                  "without it)") from None
    return out


class Keeper:
    """The keeper process: `directory` is the job's CREDENTIALS_DIRECTORY until release()."""

    def __init__(self, pid: int, directory: str, hold: int):
        self.pid, self.directory, self._hold = pid, directory, hold

    def release(self) -> None:
        """The job has ended: the keeper removes the directory and exits."""
        if self._hold >= 0:
            os.close(self._hold)
            self._hold = -1
            try:
                os.waitpid(self.pid, 0)
            except ChildProcessError:
                pass


def hand_over(env: dict, user) -> Keeper:
    """Start the keeper for `user` (jobuser.JobUser); CredentialError says why it cannot."""
    values = read(env)
    base = next((b for b in BASES if os.path.isdir(b)), "/tmp")  # noqa: S108
    directory = os.path.join(base, f"market-credentials-{os.urandom(16).hex()}")
    ready_r, ready_w = os.pipe()
    hold_r, hold_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the keeper
        os.close(ready_r)
        os.close(hold_w)
        _keep(values, directory, user, ready_w, hold_r)  # never returns
    os.close(ready_w)
    os.close(hold_r)
    with os.fdopen(ready_r, "rb") as ready:
        said = ready.read().decode(errors="replace")
    keeper = Keeper(pid, directory, hold_w)
    if said != "ok":
        keeper.release()
        raise CredentialError(said or "the keeper of the job's credentials died")
    return keeper


def _keep(values: dict[str, bytes], directory: str, user, ready: int, hold: int) -> None:
    written = []
    try:
        signal.signal(signal.SIGTERM, _stop)  # a unit's stop: remove them, then exit
        signal.signal(signal.SIGINT, _stop)
        low = 3  # none of the supervisor's descriptors (the lock, the ledger) but the pipes
        for fd in sorted((ready, hold)):
            os.closerange(low, fd)
            low = fd + 1
        os.closerange(low, os.sysconf("SC_OPEN_MAX"))
        os.setgroups([])
        os.setresgid(user.gid, user.gid, user.gid)
        os.setresuid(user.uid, user.uid, user.uid)
        os.umask(0o077)
        os.mkdir(directory, 0o700)
        for name, value in values.items():
            path = os.path.join(directory, name)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o400)
            written.append(path)
            with os.fdopen(fd, "wb") as f:
                f.write(value)
        os.chmod(directory, 0o500)
        os.write(ready, b"ok")
        os.close(ready)
        ready = -1
        os.read(hold, 1)  # until the supervisor closes it, or dies
    except _Stop:
        pass
    except BaseException as e:  # noqa: BLE001 - a forked child never returns into the runner
        if ready >= 0:
            os.write(ready, f"cannot hand the job its credentials as {user.name}: {e}".encode())
    finally:
        try:
            if os.path.isdir(directory):
                os.chmod(directory, 0o700)
            for path in written:
                os.unlink(path)
            if os.path.isdir(directory):
                os.rmdir(directory)
        except OSError:
            pass
        os._exit(0)


class _Stop(BaseException):
    pass


def _stop(signum, frame):
    raise _Stop
