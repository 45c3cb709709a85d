"""The job's own user: the runner, as the package's user, supervises a job that runs as another.

Why. The run ledger, the lock groups, the retry markers, the tickets, the alert state and the
snapshot belong to the package's user (PACKAGE_USER). A job that ran as that user could cancel
another job's session, silence the alerts or hold a lock group (issue 29). So a job unit runs the
runner as the package's user with CAP_SETUID and CAP_SETGID (and CAP_SYS_NICE for the real-time
escort), and the runner, once it has checked, locked and claimed, forks: the child execs
setpriv(1) (util-linux, Essential on Debian: a well-kept tool for exactly this, rather than our
own setresuid/capset code) which becomes the job's user with its groups, clears the inheritable
and ambient capability sets, and execs the job, so the job holds no capability. The parent is the
supervisor: it keeps the lock fd and the cluster ledger's connection (the child closes every
descriptor but 0-2) and so holds the lock group for as long as it lives; the job dies with it
(setpriv --pdeathsig=SIGKILL, issue 23), and it with the job. A job that clears that signal, or
double-forks and exits, leaves processes in the unit after the supervisor: the next start finds
the group busy until they are gone (lockgroup.py, issue 41). It passes on the signals it gets (systemd
signals the job itself too: the unit's KillMode=control-group), waits, and exits with the job's
status, or dies of the job's signal, so that $SERVICE_RESULT, $EXIT_CODE and $EXIT_STATUS of
ExecStopPost= and OnFailure= say what they said when the job was the main process; but for the
signals systemd counts as a clean end (CLEAN_END: a job that SIGTERMs itself, a stop, a halt) it
exits 128 + the signal, so that the unit fails, and it notes how the job ended for the record step
(start.py note_ending: "killed TERM stop" when the unit was being stopped). The job's heartbeats reach
systemd through NotifyAccess=all (render.py); WATCHDOG_PID names the job.

The supplementary groups: the job user's own, plus the spool's group (SPOOL_GROUP), whose members
may spool events (jobnotify.event; the spool is 3770 market-timers:market-timers-spool), and never
the package's group (the runner's gid), which reads the scheduler's state (issue 41). Nothing the
scheduler decides on is group-writable (UMask=0027; the lock directory is 0700).

A unit written by an older version has no MARKET_JOB_USER: the job is exec'd in place, as then,
until the next sync re-renders it. So is a job whose user is the runner's own (a development
machine without privileges).

Hot path: os, pwd, signal and, for the escort, resource (all C modules).
"""

import os
import pwd
import signal

from market_timers.contracts import environment

CAP_SETGID, CAP_SETUID = 6, 7
# What the supervisor passes on to the job: systemd's stop and reload signals, a terminal's.
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
             signal.SIGUSR2, signal.SIGABRT, signal.SIGCONT)
# The signals systemd counts as a clean end of a service (SIGHUP, SIGINT, SIGTERM, SIGPIPE): a
# job killed by one must not end the unit as a success.
CLEAN_END = (signal.SIGHUP, signal.SIGINT, signal.SIGTERM, signal.SIGPIPE)
# RLIMIT_RTTIME of a job lent SCHED_FIFO for its instant: real-time CPU time without a blocking
# call, in microseconds. The escort's window is 150 ms; a job that keeps the policy past it (it
# cannot stop the escort: another uid) is killed by the kernel after this much spinning.
RTTIME_USEC = 1_000_000


class JobUserError(Exception):
    pass


class JobUser:
    def __init__(self, name: str, uid: int, gid: int, home: str, groups: list[int]):
        self.name, self.uid, self.gid, self.home, self.groups = name, uid, gid, home, groups


def resolve(env: dict) -> JobUser | None:
    """The job's user, checked before the claim (a run that cannot switch takes none); None: the
    job is exec'd in place (an older unit, or the job's user is ours). JobUserError says why the
    job cannot be started as its user, or cannot be handed its credentials."""
    if env.get(environment.JOB_CREDENTIALS):  # before the claim too (jobcredentials.py)
        from market_timers.runner import jobcredentials

        try:
            jobcredentials.read(env)
        except jobcredentials.CredentialError as e:
            raise JobUserError(str(e)) from None
    name = env.get(environment.JOB_USER)
    if not name:
        return None
    try:
        pw = pwd.getpwnam(name)
    except KeyError:
        raise JobUserError(f"the job's user {name!r} does not exist (`user` in the config; "
                           "a job's own user is made by `market-timers sync` run as root, "
                           f"{environment.DEFAULT_JOB_USER} by the package)") from None
    if pw.pw_uid == 0 or name == environment.PACKAGE_USER:
        raise JobUserError(f"the job's user {name!r} owns the scheduler's state; a job never "
                           "runs as root or as the package's user")
    if pw.pw_uid == os.geteuid():
        return None
    if os.geteuid() != 0 and not _can_switch():
        raise JobUserError(f"cannot switch to the job's user {name!r}: no CAP_SETUID/CAP_SETGID "
                           "(a unit written by an older version: run `market-timers sync`)")
    try:
        own = set(os.getgrouplist(name, pw.pw_gid))
    except OSError as e:
        raise JobUserError(f"cannot read the groups of {name!r}: {e.strerror}") from None
    _not_an_operator(name, pw.pw_gid, own, env.get(environment.OPERATOR_GROUP))
    return JobUser(name, pw.pw_uid, pw.pw_gid, pw.pw_dir, sorted(own | _spool_group()))


def _spool_group() -> set[int]:
    """The spool's group, the only one the runner adds; none where it does not exist (a
    machine without the package's sysusers.d): the job then spools through its fallback or
    not at all, never through the package's group."""
    import grp

    try:
        return {grp.getgrnam(environment.SPOOL_GROUP).gr_gid}
    except KeyError:
        return set()


def _not_an_operator(name: str, gid: int, groups: set[int], operators: str | None) -> None:
    """A job among the operators could lift its own halt (issue 41): refused."""
    import grp

    try:
        op = grp.getgrnam(operators).gr_gid if operators else None
    except KeyError:  # no such group here: nobody is in it
        return
    if op is not None and (gid == op or op in groups):
        raise JobUserError(f"the job's user {name!r} is in the operator_group {operators}, whose "
                           "members may halt, pause and resume: a job could lift its own halt; "
                           "take it out of the group")


def has_capabilities(*caps: int, status: str = "/proc/self/status") -> bool:
    """Every one of `caps` in this process's effective set (the unit's AmbientCapabilities=);
    the escort's CAP_SYS_NICE is asked here too (realtime.py)."""
    try:
        with open(status) as f:
            for line in f:
                if line.startswith("CapEff:"):
                    eff = int(line.split()[1], 16)
                    return all(eff >> cap & 1 for cap in caps)
    except (OSError, ValueError):
        pass
    return False


def _can_switch() -> bool:
    return has_capabilities(CAP_SETUID, CAP_SETGID)


def setpriv_argv(user: JobUser, argv: list[str]) -> list[str]:
    return [environment.SETPRIV, f"--reuid={user.uid}", f"--regid={user.gid}",
            "--groups=" + ",".join(str(g) for g in user.groups),
            "--inh-caps=-all", "--ambient-caps=-all", "--pdeathsig=SIGKILL", "--", *argv]


FENCE_FD = 3  # the job's end of the fence socket (`serve`), the first descriptor after stderr


def supervise(argv: list[str], env: dict, user: JobUser, *, realtime: bool = False,
              after_fork=None, serve=None) -> int:
    """Fork the job as `user` and wait for it: its exit status, or this process dies of its
    signal (128 + a CLEAN_END signal: see _ended). after_fork(pid) runs in the supervisor once the child exists (the escort).
    serve(request) -> reply: answers the job's requests on a socket (fd FENCE_FD in the job,
    $MARKET_FENCE_FD) from a thread of the supervisor while the job lives: `market-timers
    fence check` asks it, over the supervisor's own ledger connection."""
    child_env = dict(env, HOME=user.home, USER=user.name, LOGNAME=user.name)
    keeper = None
    if env.get(environment.JOB_CREDENTIALS):  # the job's own secrets: a copy of its user's
        from market_timers.runner import jobcredentials

        try:
            keeper = jobcredentials.hand_over(env, user)
        except jobcredentials.CredentialError as e:
            _say(f"{e}; the job did not run")
            return 172  # exitcodes.RUNNER_ERROR
        child_env["CREDENTIALS_DIRECTORY"] = keeper.directory
    try:
        return _supervise(argv, child_env, user, realtime, after_fork, keeper, serve)
    finally:
        if keeper is not None:
            keeper.release()


def _say(text: str) -> None:
    import sys

    prefix = "<3>" if os.environ.get("JOURNAL_STREAM") else ""
    print(f"{prefix}market-timers-run: {text}", file=sys.stderr, flush=True)


def _supervise(argv, child_env, user, realtime, after_fork, keeper, serve) -> int:
    command = setpriv_argv(user, argv)
    ours = theirs = None
    if serve is not None:
        import socket

        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        child_env[environment.FENCE_FD] = str(FENCE_FD)
    # The signals to pass on are blocked across the fork: one that comes before the supervisor's
    # handlers exist (the child may already run the job by then) is held, not taken with its
    # default action, which would end the supervisor and leave the job behind it.
    signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
    try:
        pid = os.fork()
    except OSError:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)
        raise
    if pid == 0:  # the child: nothing of the supervisor's but stdin/out/err, then the job
        from market_timers.runner.start import note_ending

        code = 172  # exitcodes.RUNNER_ERROR, without importing it here
        try:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)  # the job's mask is its own
            if theirs is not None:  # dup2 leaves the copy inheritable
                os.dup2(theirs.fileno(), FENCE_FD)
            os.closerange(FENCE_FD + 1 if theirs is not None else 3, os.sysconf("SC_OPEN_MAX"))
            if "WATCHDOG_PID" in child_env:
                child_env["WATCHDOG_PID"] = str(os.getpid())
            if realtime:
                import resource

                resource.setrlimit(resource.RLIMIT_RTTIME, (RTTIME_USEC, RTTIME_USEC))
            os.execve(command[0], command, child_env)
        except BaseException as e:  # noqa: BLE001 - a forked child never returns into the runner
            _say(f"cannot start the job as {user.name}: {e}")
            note_ending(child_env, "refused runner-error")  # not the job's own 172
        os._exit(code)
    import faulthandler  # the job's PYTHONFAULTHANDLER is not the supervisor's

    faulthandler.disable()
    received = []  # the signals this process got: systemd's stop (or halt's) signals us too
    for sig in FORWARDED:
        signal.signal(sig, lambda signum, frame: (received.append(signum), _forward(pid, signum)))
    signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)  # a held one is forwarded now
    server = _serve(ours, theirs, serve) if serve is not None else None
    if after_fork is not None:
        after_fork(pid)
    _, status = os.waitpid(pid, 0)  # PEP 475: retried after each forwarded signal
    if server is not None:
        _stop_serving(ours, server)
    return _ended(status, child_env, keeper, stopped=received)


def _ended(status: int, child_env: dict, keeper, stopped: list) -> int:
    """The runner's account of the job's end (start.py note_ending), and this process's end: the
    job's exit status; for a signal systemd counts as a clean end, 128 + its number (so that the
    unit fails: Result=exit-code, OnFailure=); for any other, death by it, as the job died (so
    that Result=signal, core-dump or watchdog say what they said of the job)."""
    from market_timers.runner.start import note_ending

    if os.WIFEXITED(status):
        note_ending(child_env, f"exited {os.WEXITSTATUS(status)}")
        return os.WEXITSTATUS(status)
    sig = os.WTERMSIG(status)
    name = signal.Signals(sig).name.removeprefix("SIG")
    by_stop = sig in stopped  # this process got it too: the unit was stopped (stop, halt...)
    note_ending(child_env, f"killed {name}" + (" stop" if by_stop else ""))
    if sig in CLEAN_END:
        _say(f"the job was killed by signal {name}"
             f"{' (the unit was stopped)' if by_stop else ''}; the runner exits {128 + sig}, "
             f"since systemd counts a death by {name} as a clean end")
        return 128 + sig
    if keeper is not None:  # before this process dies of the job's signal
        keeper.release()
    if sig != signal.SIGKILL:  # its action cannot be set (OSError): it is the default anyway
        signal.signal(sig, signal.SIG_DFL)
    os.kill(os.getpid(), sig)  # die as the job died: systemd sees the same result
    return 128 + sig  # a signal that does not end a process (not reached for the others)


def _serve(ours, theirs, serve):
    """The thread answering the job's requests, one datagram each (requests are tiny)."""
    import threading

    theirs.close()  # the job's copy is in the child: its end closes when the job's tree ends

    def loop() -> None:
        while True:
            try:
                request = ours.recv(256)
            except OSError:
                return
            if not request:
                return
            try:
                reply = serve(request)
            except Exception as e:  # noqa: BLE001 - the job gets an answer, never silence
                reply = f"error {type(e).__name__}: {e}".encode()
            try:
                ours.send(reply[:4096])
            except OSError:
                return

    thread = threading.Thread(target=loop, name="fence", daemon=True)
    thread.start()
    return thread


def _stop_serving(ours, thread, wait: float = 10.0) -> None:
    """The job has ended: end the thread, waiting for an answer in progress (bounded by the
    ledger's own deadline) before the supervisor uses its connection again or exits."""
    import socket

    try:
        ours.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    thread.join(wait)
    ours.close()


def _forward(pid: int, signum: int) -> None:
    """Pass a signal on, best effort. Under systemd the job gets the stop and watchdog signals
    from systemd itself (KillMode=control-group signals every process of the unit); the
    package's user may not signal the job's (no CAP_KILL, on purpose), so EPERM is expected
    there. A root supervisor (a development run) does pass them on."""
    try:
        os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass
