"""The supervisor: a process that runs a command as its child, passes on the signals it gets,
waits, and ends as the command ended, except that a death by a signal systemd counts as a clean
end (CLEAN_END) becomes the exit status 128 + the signal, so that the unit fails (Result=
exit-code, OnFailure=) instead of passing for a success.

Two users of it: a job's supervisor (jobuser.py: the command is setpriv(1) becoming the job's
user; the runner's account of the end goes to the record step), and `market-timers-run
--supervise -- COMMAND`, the main process of the config's `on_halt` unit (controls/on_halt.py),
which runs as the jobs' user already: its command is run in place, so that an on_halt killed by
SIGTERM (after `halt`'s wait, `systemctl stop`, `systemctl kill`) is a failure its OnFailure=
handler alerts.

Hot path: os, signal (C modules).
"""

import os
import signal

# What the supervisor passes on to the job: systemd's stop and reload signals, a terminal's.
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
             signal.SIGUSR2, signal.SIGABRT, signal.SIGCONT)
# The signals systemd counts as a clean end of a service (SIGHUP, SIGINT, SIGTERM, SIGPIPE): a
# job killed by one must not end the unit as a success.
CLEAN_END = (signal.SIGHUP, signal.SIGINT, signal.SIGTERM, signal.SIGPIPE)
# `--supervise`'s status for a command that cannot be exec'd: systemd's own EXIT_EXEC, what the
# unit ended with when the command was its main process (halt and the handler say "exit 203").
EXEC_FAILED = 203


def say(text: str) -> None:
    import sys

    prefix = "<3>" if os.environ.get("JOURNAL_STREAM") else ""
    print(f"{prefix}market-timers-run: {text}", file=sys.stderr, flush=True)


def main(argv: list[str]) -> int:
    """`market-timers-run --supervise -- COMMAND [ARG...]`: COMMAND in place, supervised."""
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        say("--supervise needs a command: market-timers-run --supervise -- COMMAND [ARG...]")
        return 2
    return run(argv, dict(os.environ), EXEC_FAILED, who=argv[0])


def run(command: list[str], child_env: dict, exec_failed: int, *, who: str = "", note=None,
        realtime_usec=0, after_fork=None, before_death=None, serve=None) -> int:
    """Fork `command` and wait for it: its exit status, 128 + a CLEAN_END signal, or this process
    dies of the child's other signal. `note(text)`: the runner's account of the end ("exited N",
    "killed SIG [stop]", "refused runner-error" when the exec failed, then `exec_failed` is the
    status; `who`: the command in that message). after_fork(pid) runs once the child exists
    (the escort); before_death() before this process dies of the child's signal;
    serve(request) -> reply answers the child's requests on fd FENCE_FD (jobuser.py) from a
    thread while the child lives."""
    from market_timers.contracts import environment

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
    if pid == 0:
        _child(command, child_env, theirs, realtime_usec, exec_failed, note, who)
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
    return _ended(status, note, before_death, stopped=received)


FENCE_FD = 3  # the job's end of the fence socket (`serve`), the first descriptor after stderr


def _child(command, child_env, theirs, realtime_usec, exec_failed, note, who) -> None:
    """The child: nothing of the supervisor's but stdin/out/err, then the command."""
    code = exec_failed
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)  # the job's mask is its own
        if theirs is not None:  # dup2 leaves the copy inheritable
            os.dup2(theirs.fileno(), FENCE_FD)
        os.closerange(FENCE_FD + 1 if theirs is not None else 3, os.sysconf("SC_OPEN_MAX"))
        if "WATCHDOG_PID" in child_env:
            child_env["WATCHDOG_PID"] = str(os.getpid())
        if realtime_usec:
            import resource

            resource.setrlimit(resource.RLIMIT_RTTIME, (realtime_usec, realtime_usec))
        os.execve(command[0], command, child_env)
    except BaseException as e:  # noqa: BLE001 - a forked child never returns into the runner
        say(f"cannot start {who}: {e}")
        if note is not None:
            note("refused runner-error")  # not the job's own exit status
    os._exit(code)


def _ended(status: int, note, before_death, stopped: list) -> int:
    """The account of the child's end, and this process's end: the child's exit status; for a
    signal systemd counts as a clean end, 128 + its number (so that the unit fails: Result=
    exit-code, OnFailure=); for any other, death by it, as the child died (so that Result=
    signal, core-dump or watchdog say what they said of the child)."""
    if os.WIFEXITED(status):
        if note is not None:
            note(f"exited {os.WEXITSTATUS(status)}")
        return os.WEXITSTATUS(status)
    sig = os.WTERMSIG(status)
    name = signal.Signals(sig).name.removeprefix("SIG")
    by_stop = sig in stopped  # this process got it too: the unit was stopped (stop, halt...)
    if note is not None:
        note(f"killed {name}" + (" stop" if by_stop else ""))
    if sig in CLEAN_END:
        say(f"the job was killed by signal {name}"
            f"{' (the unit was stopped)' if by_stop else ''}; the runner exits {128 + sig}, "
            f"since systemd counts a death by {name} as a clean end")
        return 128 + sig
    if before_death is not None:
        before_death()
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
