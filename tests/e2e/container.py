"""A Debian system (12 or 13) booted with systemd-nspawn, driven from the host.

The container shares the host's network (a fake server on the host's
127.0.0.1 is reachable from inside) unless `network_namespace` names one of
the test's own (tests/e2e/netlink.py); commands enter its namespaces with
nsenter. It can be powered off and booted again on the same rootfs.

Each container boots from a cgroup of its own (CGROUP_ROOT/<name>): systemd-nspawn --keep-unit
puts the container's systemd in "<its own cgroup>/payload", and on a host whose init is not
systemd every nspawn started from the same process is in the same cgroup, so two containers
booted at once shared one payload: both systemds created, killed and removed the same
system.slice/<unit> cgroups. Two cluster nodes run units of the same names at the same
instants: one node's systemd removed the cgroup of the other's unit between its main process
and its ExecStopPost= ("Failed to attach to cgroup ...: No such file or directory",
status=219/CGROUP), and the unit failed after a job that exited 0.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

CGROUP_FS = Path("/sys/fs/cgroup")
CGROUP_ROOT = "market-timers-e2e"  # each container's own cgroup: CGROUP_ROOT/<name>

# A clean environment for commands inside: nothing from the host (pyenv
# shims, pip settings, virtualenvs) leaks in.
INSIDE_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG": "C.UTF-8",
    "TERM": "dumb",
    "SYSTEMD_PAGER": "",
    "DEBIAN_FRONTEND": "noninteractive",
}


# How long a boot may take before it counts as failed: generous, and longer on a loaded host
# (two releases' e2e tests and the unit tier share two cores; a cluster boots three at once).
BOOT_TIMEOUT = 180.0


def patience(seconds: float) -> float:
    """seconds, stretched by how far the host's load exceeds its cores (never shortened)."""
    load = os.getloadavg()[0] / (os.cpu_count() or 1)
    return seconds * min(3.0, max(1.0, load))


class ContainerError(RuntimeError):
    pass


@contextmanager
def fresh_container(prefix: str, keep: bool = False, suite: str = "bookworm",
                    remove: Callable[[Path], object] | None = None,
                    source: Callable[..., Path] | None = None) -> Iterator[Container]:
    """A booted copy of the cached rootfs of suite (built first if missing); powered off and
    deleted afterwards unless keep. `box.boot_seconds` says how long the boot took. `remove`
    deletes the copy's directory instead of an rmtree at once (the benchmarks defer it).
    `source(suite=...)` gives another cached rootfs to copy (rootfs.ensure_pg_rootfs)."""
    from .rootfs import cache_dir, copy_rootfs, ensure_rootfs

    root = copy_rootfs((source or ensure_rootfs)(suite=suite), cache_dir() / "runs")
    box = Container(root, f"{prefix}-{suite}-{os.getpid()}", root.parent / "console.log", suite)
    try:
        box.boot_seconds = box.boot()
        yield box
    finally:
        box.poweroff()
        box.kill()
        if not keep:
            (remove or _rmtree)(root.parent)


def _rmtree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def missing_prerequisite() -> str | None:
    """Why a container cannot be booted here, or None (shared by the e2e tests and bench/)."""
    if os.geteuid() != 0:
        return "needs root (systemd-nspawn)"
    for tool in ("systemd-nspawn", "nsenter", "debootstrap", "git", "apt-ftparchive"):
        if shutil.which(tool) is None:
            return f"needs {tool} on PATH"
    return None


# boots of any container in this process: a sync after one is cold (scenario.sync_allowance)
boots = 0


class Container:
    def __init__(self, root: Path, name: str, console_log: Path, suite: str = "bookworm") -> None:
        self.root = root
        self.name = name
        self.console_log = console_log
        self.suite = suite  # the Debian release of the rootfs: bookworm, trixie
        self._nspawn: subprocess.Popen[bytes] | None = None
        self.pid: int | None = None  # PID (host view) of the container's systemd
        self.boot_seconds: float | None = None  # of the last boot by fresh_container()
        # None: the host's network (the default); else the path of a network namespace the
        # next boot joins (systemd-nspawn --network-namespace-path, tests/e2e/netlink.py)
        self.network_namespace: Path | None = None

    # -- lifecycle ---------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._nspawn is not None and self._nspawn.poll() is None

    def boot(self, timeout: float | None = None, attempts: int = 2) -> float:
        """Boot the rootfs and wait until systemd is up; return the boot time in seconds. A boot
        that does not come up in time is killed and tried again (a crowded host, not the
        package); the last failure is raised."""
        for attempt in range(1, attempts + 1):
            try:
                return self._boot_once(timeout or patience(BOOT_TIMEOUT))
            except ContainerError as exc:
                self.kill()
                self.pid = None
                if attempt == attempts:
                    raise
                print(f"[e2e] {self.name}: boot attempt {attempt} failed, booting again: "
                      f"{str(exc).splitlines()[0]}")
        raise AssertionError("unreachable")

    def _boot_once(self, timeout: float) -> float:
        if self.running:
            raise ContainerError(f"{self.name} is already running")
        from .rootfs import nspawn_env

        started = time.monotonic()
        with open(self.console_log, "ab") as log:
            log.write(f"\n==== boot {time.strftime('%H:%M:%S')} ====\n".encode())
            log.flush()
            network = ([f"--network-namespace-path={self.network_namespace}"]
                       if self.network_namespace else [])
            # the shell moves itself into the container's own cgroups, then execs nspawn
            # (not preexec_fn: the tests' fake servers run threads)
            cgroups = self._own_cgroups()
            enter = " && ".join(f"echo $$ > {shlex.quote(str(c / 'cgroup.procs'))}"
                                for c in cgroups)
            self._nspawn = subprocess.Popen(
                [
                    "/bin/sh", "-c", f"{enter} && exec \"$@\"" if cgroups else 'exec "$@"',
                    "sh",
                    "systemd-nspawn", "--keep-unit", "--register=no", "--quiet",
                    f"--machine={self.name}", "-D", str(self.root), *network, "--boot",
                ],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, env=nspawn_env(self.suite),
            )
        try:
            self.pid = self.wait_for(self._init_pid, timeout, "container init to start")
            self.wait_for(self._systemd_settled, timeout - (time.monotonic() - started),
                          "systemctl is-system-running --wait")
        except TimeoutError as exc:
            raise ContainerError(f"{self.name} did not boot: {exc}\n{self.diagnostics()}") from exc
        failed = self.failed_units()
        if failed:
            print(f"[e2e] {self.name} booted degraded; failed units:\n{failed}")
        global boots
        boots += 1
        return time.monotonic() - started

    def _cgroups(self) -> list[Path]:
        """This container's own cgroup in each hierarchy nspawn places its payload in: the
        unified one (cgroup2: at the root, or at unified/ beside v1's name=systemd)."""
        if (CGROUP_FS / "cgroup.procs").exists():
            return [CGROUP_FS / CGROUP_ROOT / self.name]
        return [CGROUP_FS / h / CGROUP_ROOT / self.name for h in ("systemd", "unified")
                if (CGROUP_FS / h / "cgroup.procs").exists()]

    def _own_cgroups(self) -> list[Path]:
        """This container's own cgroups, made (empty) for the next boot."""
        paths = self._cgroups()
        for path in paths:
            path.mkdir(parents=True, exist_ok=True)
        return paths

    def _remove_cgroups(self) -> None:
        """After nspawn exited: remove the container's (now empty) cgroups, deepest first."""
        for top in self._cgroups():
            if top.is_dir():
                for path in sorted((p for p in top.rglob("*") if p.is_dir()),
                                   key=lambda p: len(p.parts), reverse=True) + [top]:
                    try:
                        path.rmdir()
                    except OSError:
                        pass

    def _init_pid(self) -> int | None:
        if not self.running:
            raise ContainerError(f"systemd-nspawn exited early:\n{self._console_tail()}")
        assert self._nspawn is not None
        children = Path(f"/proc/{self._nspawn.pid}/task/{self._nspawn.pid}/children")
        try:
            pids = children.read_text().split()
        except OSError:
            return None
        # The container's init is the child in a PID namespace of its own: nspawn forks helpers
        # first, and one taken for init (then gone) made every nsenter fail ("cannot open
        # /proc/N/ns/ipc") until the boot timed out.
        ours = os.readlink("/proc/self/ns/pid")
        for pid in pids:
            try:
                if os.readlink(f"/proc/{pid}/ns/pid") != ours:
                    return int(pid)
            except OSError:
                continue
        return None

    def _systemd_settled(self) -> bool:
        if self.pid is None or not Path(f"/proc/{self.pid}").exists():
            self.pid = self._init_pid()  # raises if nspawn is gone
            if self.pid is None:
                return False
        try:
            result = self.run(["systemctl", "is-system-running", "--wait"], check=False,
                              timeout=60)
        except subprocess.TimeoutExpired:
            return False  # still starting: wait_for asks again until its deadline
        return result.stdout.strip() in ("running", "degraded")

    def healthy(self) -> bool:
        """Running, its namespaces can be entered and its systemd is up (running or degraded):
        what a fixture checks before it hands the container out."""
        if not self.running or self.pid is None or not Path(f"/proc/{self.pid}").exists():
            return False
        try:
            return self._systemd_settled()
        except (ContainerError, OSError):
            return False

    def ensure_healthy(self) -> bool:
        """Boot again if it is not healthy (killed first if half up); True if it was booted."""
        if self.healthy():
            return False
        print(f"[e2e] {self.name} is not healthy (running: {self.running}): booting it again")
        self.kill()
        self.pid = None
        self.boot()
        return True

    def poweroff(self, timeout: float = 60) -> None:
        """Shut the container down cleanly and wait for systemd-nspawn to exit."""
        if not self.running:
            self.pid = None
            return
        try:
            self.run(["systemctl", "poweroff"], check=False, timeout=30)
        except (subprocess.TimeoutExpired, ContainerError):
            pass  # not answering: the wait below ends in a kill
        try:
            assert self._nspawn is not None
            self._nspawn.wait(timeout)
        except subprocess.TimeoutExpired:
            print(f"[e2e] {self.name}: no clean poweroff within {timeout}s, killing nspawn")
            self.kill()
        self.pid = None
        self._remove_cgroups()

    def kill(self) -> None:
        """SIGKILL systemd-nspawn and every process of the container. nspawn's own process
        group does not hold them (the container is a session of its own): killed alone, it left
        the container's systemd running on the rootfs, and a boot again ran two of them."""
        if self._nspawn is None:
            return
        if self._nspawn.poll() is None:
            os.killpg(self._nspawn.pid, signal.SIGKILL)
            self._nspawn.wait(10)
        self._kill_cgroups()
        self._remove_cgroups()

    def _kill_cgroups(self, timeout: float = 10) -> None:
        """SIGKILL whatever is left in the container's own cgroups; wait until they are empty."""
        deadline = time.monotonic() + timeout
        while True:
            pids = set()
            for top in self._cgroups():
                for procs in (top.rglob("cgroup.procs") if top.is_dir() else ()):
                    try:
                        pids |= {int(p) for p in procs.read_text().split()}
                    except OSError:
                        pass
            if not pids or time.monotonic() > deadline:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.1)

    # -- commands ----------------------------------------------------------

    def run(
        self,
        cmd: str | Sequence[str],
        check: bool = True,
        timeout: float = 120,
        input: str | None = None,  # noqa: A002 - mirrors subprocess.run
    ) -> subprocess.CompletedProcess[str]:
        """Run cmd inside (a string goes through /bin/sh -c); return the completed process."""
        if self.pid is None:
            raise ContainerError(f"{self.name} is not running")
        argv = ["/bin/sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        full = [
            "nsenter", f"--target={self.pid}", "--mount", "--uts", "--ipc", "--net", "--pid",
            "--", *argv,
        ]
        result = subprocess.run(
            full, capture_output=True, text=True, timeout=timeout, input=input,
            env=INSIDE_ENV, check=False,
        )
        if check and result.returncode != 0:
            raise ContainerError(
                f"command failed inside {self.name} (exit {result.returncode}): "
                f"{shlex.join(argv)}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
            )
        return result

    def systemctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run(["systemctl", "--no-pager", *args], check=check)

    def journal(self, *args: str) -> str:
        return self.run(["journalctl", "--no-pager", "--quiet", *args], check=False).stdout

    def show(self, unit: str, prop: str) -> str:
        return self.systemctl("show", "--value", "-p", prop, unit).stdout.strip()

    def write_file(self, path: str, text: str, mode: int = 0o644) -> None:
        script = 'mkdir -p "$(dirname "$1")" && cat > "$1" && chmod "$2" "$1"'
        self.run(["/bin/sh", "-c", script, "sh", path, f"{mode:o}"], input=text)

    def read_file(self, path: str) -> str:
        return self.run(["cat", path]).stdout

    def exists(self, path: str) -> bool:
        return self.run(["test", "-e", path], check=False).returncode == 0

    def apt_install(self, deb_inside: str, *extra: str) -> None:
        """apt-get install a .deb inside; fetch package lists only if dependencies are missing."""
        cmd = ["apt-get", "install", "-y", "-q", *extra, deb_inside]
        if self.run(cmd, check=False, timeout=300).returncode != 0:
            self.run(["apt-get", "update", "-q"], timeout=300)
            self.run(cmd, timeout=300)

    def copy_in(self, host_path: Path, inside_dir: str = "/var/tmp") -> str:
        """Copy a host file into the rootfs (not a tmpfs); return its path inside."""
        target = self.root / inside_dir.lstrip("/") / host_path.name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(host_path.read_bytes())
        return f"{inside_dir.rstrip('/')}/{host_path.name}"

    # -- waiting and diagnostics -------------------------------------------

    def wait_for(
        self, predicate: Callable[[], T], timeout: float, what: str = "condition",
        interval: float = 0.05, detail: Callable[[], str] | None = None,
    ) -> T:
        """Poll predicate until it returns a truthy value; return that value. `detail`: what
        the timeout's error adds (what was seen instead)."""
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() >= deadline:
                seen = f"\n{detail()}" if detail is not None else ""
                raise TimeoutError(f"timed out after {timeout:.1f}s waiting for {what}{seen}")
            time.sleep(interval)

    def daemon_reloads(self) -> int:
        """daemon-reloads PID 1 has done since boot: its "Reloading." journal lines (257 says
        "Reloading..."; 252 has no NReloads property)."""
        said = ("Reloading.", "Reloading...")
        out = self.run(["journalctl", "--no-pager", "-q", "-o", "cat", "_PID=1",
                        *(f"MESSAGE={m}" for m in said)], check=False).stdout
        return sum(1 for line in out.splitlines() if line.strip() in said)

    def failed_units(self) -> str:
        return self.systemctl("list-units", "--failed", "--plain", "--no-legend",
                              check=False).stdout.strip()

    def diagnostics(self, lines: int = 80) -> str:
        if not self.running or self.pid is None:
            return f"container {self.name} is not running; console:\n{self._console_tail()}"
        return (
            f"--- failed units in {self.name}\n{self.failed_units() or '(none)'}\n"
            f"--- market-* units\n"
            + self.systemctl("list-units", "--all", "--plain", "--no-legend", "market-*",
                             check=False).stdout
            + f"--- journal (last {lines} lines)\n{self.journal('-n', str(lines))}"
        )

    def _console_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.console_log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no console log)"


def boot_refresh_over(box: Container) -> None:
    """Wait until the package's refresh of this boot is over: market-refresh.timer runs it 1 min
    after every boot (OnBootSec=), and one that lands between a test's config and its sync does
    the sync itself ("nothing to do": the test's check of what sync started fails; v1 of 483477d,
    the first tests of a fresh Debian 13 container)."""
    box.wait_for(lambda: box.show("market-refresh.timer", "NextElapseUSecMonotonic")
                 in ("infinity", "", "0")
                 and box.show("market-refresh.service", "ActiveState") != "activating",
                 patience(120), "the boot-time refresh to be over", interval=0.5)
