"""The few systemctl calls market-timers makes, in one place (so tests can substitute a recorder).

Sized for a thousand jobs (10,000 timers): starts and stops go in chunks of CHUNK units (one
`systemctl start` of ~7,900 units overflows the D-Bus client's queue of PID 1's signals: "No
buffer space available"), a failed chunk does not keep the others from being sent, and an error
names the first few units and a count, never every unit. Unit states are read with one
`list-units` (PID 1 lists what it holds) rather than `show` (which makes it load each unit).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable

CHUNK = 500  # units per start/stop call
NAMED_MAX = 32  # up to this many units are asked by name; more by their glob (market-*.timer)
STATE_PROPS = frozenset({"ActiveState", "LoadState", "SubState"})  # what list-units tells
SHOWN_ERRORS = 3  # error lines kept in a message


class SystemctlError(RuntimeError):
    def __init__(self, message: str, failed: list[str] | None = None):
        super().__init__(message)
        self.failed = failed or []  # the units a chunked call could not act on


def summary(lines: list[str], limit: int = SHOWN_ERRORS) -> str:
    """The first few error lines on one line, and how many more: never a 400 KB message."""
    lines = [x.strip() for x in lines if x.strip()]
    text = "; ".join(x[:200] for x in lines[:limit])
    return text + (f" ({len(lines) - limit} more)" if len(lines) > limit else "")


class Systemctl:
    def __init__(self, command: tuple[str, ...] = ("systemctl",)):
        self.command = command
        self.on_chunk = None  # (verb, units done, total) after each chunk: cli/progress.py

    def _proc(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*self.command, *args], capture_output=True, text=True)

    def _run(self, *args: str, check: bool = True) -> str:
        proc = self._proc(*args)
        if check and proc.returncode != 0:
            verb = " ".join(a for a in args if a.startswith("-") or a == args[0])
            raise SystemctlError(f"systemctl {verb}: {summary(proc.stderr.splitlines())}")
        return proc.stdout

    def show(self, units: Iterable[str], props: Iterable[str]) -> dict[str, dict[str, str]]:
        """Properties of each unit, by unit name (one systemctl call; the states: states())."""
        units, props = list(units), list(props)
        if not units:
            return {}
        if set(props) <= STATE_PROPS:
            return self.states(units)
        return self._shown(units, props)

    def _shown(self, units: list[str], props: list[str]) -> dict[str, dict[str, str]]:
        out = self._run("show", "--property=Id," + ",".join(props), "--", *units, check=False)
        result: dict[str, dict[str, str]] = {}
        for block, unit in zip(out.split("\n\n"), units, strict=False):
            fields = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
            result[unit] = fields
        return result

    def states(self, units: list[str]) -> dict[str, dict[str, str]]:
        """LoadState, ActiveState, SubState of each unit from one `list-units --all`. A unit PID 1
        does not hold is asked with `show` when there are few (a missing file is "not-found");
        of many (a first sync), each is "not-loaded", inactive: its timer was never started."""
        patterns = units if len(units) <= NAMED_MAX else _globs(units)
        out = self._run("list-units", "--all", "--plain", "--no-legend", "--full", "--",
                        *patterns, check=False)
        wanted = set(units)
        listed = {}
        for line in out.splitlines():
            words = line.split()
            if words and words[0] in ("●", "*"):  # the failed marker, were --plain ignored
                words = words[1:]
            if len(words) >= 4 and words[0] in wanted:
                listed[words[0]] = {"Id": words[0], "LoadState": words[1],
                                    "ActiveState": words[2], "SubState": words[3]}
        absent = [u for u in units if u not in listed]
        if absent and len(absent) <= NAMED_MAX:
            listed.update(self._shown(absent, sorted(STATE_PROPS)))
        return {u: listed.get(u) or {"Id": u, "LoadState": "not-loaded",
                                     "ActiveState": "inactive", "SubState": "dead"}
                for u in units}

    def start(self, units: list[str]) -> None:
        self._chunked("start", ("--no-block",), units)

    def stop(self, units: list[str]) -> None:
        try:
            self._chunked("stop", (), units)
        except SystemctlError:  # as before: a unit already gone is not an error to report
            pass

    def _chunked(self, verb: str, options: tuple[str, ...], units: list[str]) -> None:
        """`systemctl <verb>` of the units, CHUNK at a time; every chunk is sent, then one
        error tells the failures (their units: those named in "Failed to ..." lines, else the
        whole chunk)."""
        failed: list[str] = []
        errors: list[str] = []
        for i in range(0, len(units), CHUNK):
            chunk = units[i:i + CHUNK]
            proc = self._proc(verb, *options, "--", *chunk)
            if self.on_chunk is not None:
                self.on_chunk(verb, i + len(chunk), len(units))
            if proc.returncode == 0:
                continue
            lines = proc.stderr.splitlines()
            named = [u for u in chunk if any(u in line for line in lines)]
            failed += named or chunk
            errors += lines or [f"exit status {proc.returncode}"]
        if failed:
            raise SystemctlError(f"systemctl {verb}: {len(failed)} of {len(units)} units did "
                                 f"not {verb}: {summary(errors)}", failed)

    def running(self, patterns: list[str]) -> list[str]:
        """The services matching the glob patterns that are active or activating (starting)."""
        return self._services(patterns, "active,activating")

    def failed_units(self, patterns: list[str]) -> list[str]:
        """The services matching the glob patterns that are failed (one list-units)."""
        return self._services(patterns, "failed")

    def _services(self, patterns: list[str], states: str) -> list[str]:
        """One `list-units` of the services in `states`; a failed one's line starts with a
        mark (● or *) even under --plain."""
        if not patterns:
            return []
        out = self._run("list-units", "--type=service", f"--state={states}", "--plain",
                        "--no-legend", "--full", "--", *patterns, check=False)
        names = [line.split() for line in out.splitlines() if line.strip()]
        return [w[1] if w[0] in ("●", "*") and len(w) > 1 else w[0] for w in names]

    def run_transient(self, unit: str, argv: list[str], user: str, env: dict[str, str],
                      properties: Iterable[str] = ()) -> None:
        """systemd-run: `argv` as the transient service `unit`, as `user`, with `env` and the
        unit's `properties` ("Key=value"); queued (--no-block). Not collected: a failed unit
        stays until reset-failed, so its handler and `systemctl --failed` can read it."""
        proc = subprocess.run(["systemd-run", f"--unit={unit}", "--no-block", f"--uid={user}",
                               *(f"--property={p}" for p in properties),
                               *(f"--setenv={k}={v}" for k, v in env.items()), "--", *argv],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemctlError(f"systemd-run --unit={unit}: {proc.stderr.strip()}")

    def reset_failed(self, units: list[str]) -> None:
        try:
            self._chunked("reset-failed", (), units)
        except SystemctlError:
            pass

    def daemon_reload(self) -> None:
        self._run("daemon-reload")


def _globs(units: list[str]) -> list[str]:
    """market-*.<type> for each unit type asked; any other unit by its name."""
    out = {f"market-*.{u.rsplit('.', 1)[-1]}" if u.startswith("market-") else u for u in units}
    return sorted(out)
