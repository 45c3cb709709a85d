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
signals systemd counts as a clean end (supervisor.CLEAN_END: a job that SIGTERMs itself, a stop,
a halt) it exits 128 + the signal, so that the unit fails, and it notes how the job ended for the
record step (start.py note_ending: "killed TERM stop" when the unit was being stopped). The job's
heartbeats reach systemd through NotifyAccess=all (render.py); WATCHDOG_PID names the job. The
supervising itself is supervisor.py's (on_halt's unit has it too); this module is the job's user.

The supplementary groups: the job user's own, plus the spool's group (SPOOL_GROUP), whose members
may spool events (jobnotify.event; the spool is 3770 market-timers:market-timers-spool), and never
the package's group (the runner's gid), which reads the scheduler's state (issue 41). Nothing the
scheduler decides on is group-writable (UMask=0027; the lock directory is 0700).

A unit written by an older version has no MARKET_JOB_USER: the job is exec'd in place, as then,
until the next sync re-renders it. So is a job whose user is the runner's own (a development
machine without privileges).

Hot path: os, pwd and, for the supervisor and the escort, signal and resource (all C modules).
"""

import os
import pwd

from market_timers.contracts import environment

CAP_SETGID, CAP_SETUID = 6, 7
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


def supervise(argv: list[str], env: dict, user: JobUser, *, realtime: bool = False,
              after_fork=None, serve=None) -> int:
    """Fork the job as `user` and wait for it (supervisor.run): its exit status, or this process
    dies of its signal (128 + a CLEAN_END signal). after_fork(pid) runs in the supervisor once
    the child exists (the escort). serve(request) -> reply: answers the job's requests on a
    socket (fd supervisor.FENCE_FD in the job, $MARKET_FENCE_FD) from a thread of the
    supervisor while the job lives: `market-timers fence check` asks it, over the supervisor's own ledger connection."""
    from market_timers.runner import supervisor  # a job of its own user's only
    from market_timers.runner.start import note_ending

    child_env = dict(env, HOME=user.home, USER=user.name, LOGNAME=user.name)
    keeper = None
    if env.get(environment.JOB_CREDENTIALS):  # the job's own secrets: a copy of its user's
        from market_timers.runner import jobcredentials

        try:
            keeper = jobcredentials.hand_over(env, user)
        except jobcredentials.CredentialError as e:
            supervisor.say(f"{e}; the job did not run")
            return 172  # exitcodes.RUNNER_ERROR
        child_env["CREDENTIALS_DIRECTORY"] = keeper.directory
    try:
        return supervisor.run(
            setpriv_argv(user, argv), child_env, 172, who=f"the job as {user.name}",
            note=lambda text: note_ending(child_env, text),
            realtime_usec=RTTIME_USEC if realtime else 0, after_fork=after_fork, serve=serve,
            before_death=keeper.release if keeper is not None else None)
    finally:
        if keeper is not None:
            keeper.release()
