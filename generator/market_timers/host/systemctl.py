"""The few systemctl calls market-timers makes, in one place (so tests can substitute a recorder)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterable


class SystemctlError(RuntimeError):
    pass


class Systemctl:
    def __init__(self, command: tuple[str, ...] = ("systemctl",)):
        self.command = command

    def _run(self, *args: str, check: bool = True) -> str:
        proc = subprocess.run([*self.command, *args], capture_output=True, text=True)
        if check and proc.returncode != 0:
            raise SystemctlError(f"systemctl {' '.join(args)}: {proc.stderr.strip()}")
        return proc.stdout

    def show(self, units: Iterable[str], props: Iterable[str]) -> dict[str, dict[str, str]]:
        """Properties of each unit, by unit name (one systemctl call)."""
        units = list(units)
        if not units:
            return {}
        out = self._run("show", "--property=Id," + ",".join(props), "--", *units, check=False)
        result: dict[str, dict[str, str]] = {}
        for block, unit in zip(out.split("\n\n"), units, strict=False):
            fields = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
            result[unit] = fields
        return result

    def start(self, units: list[str]) -> None:
        if units:
            self._run("start", "--no-block", "--", *units)

    def stop(self, units: list[str]) -> None:
        if units:
            self._run("stop", "--", *units, check=False)

    def running(self, patterns: list[str]) -> list[str]:
        """The services matching the glob patterns that are active or activating (starting)."""
        if not patterns:
            return []
        out = self._run("list-units", "--type=service", "--state=active,activating", "--plain",
                        "--no-legend", "--full", "--", *patterns, check=False)
        return [line.split()[0] for line in out.splitlines() if line.strip()]

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
        if units:
            self._run("reset-failed", "--", *units, check=False)

    def daemon_reload(self) -> None:
        self._run("daemon-reload")
