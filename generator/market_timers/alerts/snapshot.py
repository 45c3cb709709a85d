"""Alerting that survives a broken config: the last-good snapshot and the degraded load.

One typo (`grace = 60`) used to make `alert-handler`, `outbox flush` and `deadman` exit 2: no job
failure was even spooled while the installed timers kept running jobs. Now:

* every successful `sync` writes `<state_dir>/sync/alerts-snapshot.json` (atomically, no symlink
  followed): the raw `[alerts]` and `[watch]` tables, the paths and the job names;
* `load(path)` is what the alert-path commands use instead of `config.load`: with a valid config
  it is the config; with a broken one it is a degraded Config built from the broken file's own
  `[alerts]`/`[watch]` tables when its `[alerts]` is valid on its own (the file is the admin's
  latest word), else from the snapshot (found in the state_dir the broken file names, read
  leniently, else the default), else from those tables parsed leniently. Every alert raised with it
  says so (`alert_note`).

Who may write the snapshot decides where every alert and secret goes, so only root's sync does:
`sync/` is a root-owned 0755 directory (ledger/__init__.py names it) inside the package's state
directory, which jobs cannot write and where the package's own user cannot replace the file. The
reader uses a snapshot only when the file and its directory belong to root (or, on a development
machine, to whoever reads it), are writable by no one else, are not symlinks, and the snapshot
names the config file being loaded and its state directory. The `user` it once held is gone: the
alert path's user is always PACKAGE_USER (privileges.py). A snapshot at the old place
(`<state_dir>/alerts-snapshot.json`, writable by the package's user) is never read.
* `announce(config)` (brokenconfig.py; called by those commands once they run as the service user) raises one
  critical "config-broken" alert per content of the file: keyed on the file's sha256, remembered in
  `<state_dir>/alerts/config-broken.json`, forgotten (and its repeats stopped) once the file loads.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
import tomllib
from dataclasses import dataclass
from pathlib import Path

from market_timers import ledger
from market_timers.alerts.brokenconfig import MARKER, announce  # noqa: F401  (snapshot.announce)
from market_timers.config import loader as config_mod
from market_timers.config.alerts import parse_alerts
from market_timers.config.events import parse_events
from market_timers.config.watch import parse_watch
from market_timers.contracts.instants import iso
from market_timers.files import atomicfile, safefs
from market_timers.schema.problems import ConfigError, Problems

log = logging.getLogger("market_timers.alerts")

SNAPSHOT = "alerts-snapshot.json"
VERSION = 1


@dataclass(frozen=True)
class SnapshotJob:
    name: str
    is_session_job: bool


@dataclass(frozen=True)
class Broken:
    source: str
    sha256: str
    problems: tuple[str, ...]
    how: str  # "the last good snapshot written by sync at ..." | "its [alerts] table alone" ...


# writing (sync) ---------------------------------------------------------------------------------

def write(config, now) -> Path:
    """Write the snapshot of a config that loaded and synced fine (root: readable by the user)."""
    raw = getattr(config, "raw", None) or {}
    doc = {"version": VERSION, "written_utc": iso(now), "source": str(config.source),
           "config_sha256": _sha256(config.source),
           "state_dir": str(config.state_dir), "spool_dir": str(config.spool_dir),
           "alerts": raw.get("alerts"), "watch": raw.get("watch"), "events": raw.get("events"),
           "jobs": [{"name": j.name, "session": bool(j.is_session_job)} for j in config.jobs]}
    directory = Path(ledger.sync_dir(config.state_dir))
    safefs.own_directory(directory, 0o755)  # root's: planted ones are moved aside
    path = directory / SNAPSHOT
    if not (_as_written(path) and _same_but_time(safefs.read_json(path, base=config.state_dir),
                                                 doc)):
        # a sync with nothing to do writes no file (issue 46): written_utc is then when the
        # snapshot last changed, the same good config as every sync's since
        safefs.write_json(path, doc, base=config.state_dir, mode=0o644,
                          sync=atomicfile.DURABLE)
    safefs.unlink(Path(config.state_dir) / SNAPSHOT, base=config.state_dir)  # 0.1's place
    return path


def _as_written(path: Path) -> bool:
    """Trusted as its readers judge it, and 0644 as write_json leaves it (else rewritten)."""
    return untrusted(path) is None and stat.S_IMODE(os.lstat(path).st_mode) == 0o644


def _same_but_time(old, new: dict) -> bool:
    """Whether the snapshot on disk says what `new` says, its time aside (as written: JSON)."""
    if not isinstance(old, dict):
        return False
    fresh = json.loads(json.dumps(new, sort_keys=True, default=str))
    return {k: v for k, v in old.items() if k != "written_utc"} == \
        {k: v for k, v in fresh.items() if k != "written_utc"}


def snapshot_path(state_dir) -> Path:
    return Path(ledger.sync_dir(state_dir)) / SNAPSHOT


# loading ---------------------------------------------------------------------------------------

def load(path: str | os.PathLike):
    """The config for the alert path: the real one if it loads, else a degraded one (never raises
    ConfigError: alerting must not depend on the whole config being valid)."""
    try:
        return config_mod.load(path)
    except ConfigError as e:
        problems = tuple(e.problems.lines())
    return degraded(path, problems)


def degraded(path: str | os.PathLike, problems: tuple[str, ...] = ()):
    raw = _lenient_raw(path)
    try:
        lenient = config_mod.parse(raw, Problems(str(path)))  # every valid piece kept
    except Exception:  # the validator itself tripped on this input: the defaults, then
        log.exception("alerts: cannot read even part of %s", path)
        lenient = config_mod.Config(source=str(path))
    alerts_ok = _valid_alone(raw, "alerts")
    snap = None if alerts_ok and isinstance(raw.get("alerts"), dict) else \
        _read_snapshot(Path(lenient.state_dir), path)
    if snap is not None:
        cfg, how = snap, (f"the last good snapshot written by sync at {snap.snapshot_utc} "
                          f"({snapshot_path(lenient.state_dir)})")
    elif alerts_ok and isinstance(raw.get("alerts"), dict):
        cfg = lenient
        how = ("the file's own [alerts] and [watch] tables, which are valid on their own (the "
               "file's latest word, over the last good snapshot)")
    else:
        cfg = lenient
        how = ("no usable snapshot (sync has not succeeded yet, or it was refused): the file's "
               "own [alerts] and [watch] tables, read on their own" + (
                   "" if alerts_ok else "; [alerts] itself has problems, so only its valid "
                                        "parts are used"))
    cfg.source = str(path)
    broken = Broken(str(path), _sha256(path), problems, how)
    cfg.broken = broken
    cfg.alert_note = (f"NOTE: the config {path} is broken ({len(problems)} problem(s), first: "
                      f"{problems[0] if problems else 'unreadable'}); until it is fixed, alerts "
                      f"are routed with {how}.")
    return cfg


def _sha256(path) -> str:
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError as e:
        return f"unreadable-{e.errno}"


def _lenient_raw(path) -> dict:
    """The TOML document; if it does not parse, what does of its top-level keys (so `state_dir`
    is still found) and of its [alerts...] and [watch] tables, each section on its own; else {}."""
    try:
        with open(path, "rb") as f:
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return {}
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        pass
    sections: list[tuple[str, list[str]]] = [("", [])]
    for line in text.splitlines():
        head = line.strip()
        if head.startswith("["):
            sections.append((head.strip("[] \t").split("#")[0].strip(), [line]))
        else:
            sections[-1][1].append(line)
    wanted = [lines for name, lines in sections
              if name == "" or name.split(".")[0].strip('"') in ("alerts", "watch")]
    try:
        return tomllib.loads("\n".join(line for lines in wanted for line in lines))
    except tomllib.TOMLDecodeError:
        pass
    raw: dict = {}
    for lines in wanted:  # one by one: a broken section costs only itself
        try:
            _merge(raw, tomllib.loads("\n".join(lines)))
        except tomllib.TOMLDecodeError:
            continue
    return raw


def _merge(into: dict, doc: dict) -> None:
    for key, value in doc.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        elif key not in into:
            into[key] = value


def _valid_alone(raw: dict, table: str) -> bool:
    problems = Problems()
    if table == "alerts":
        parse_alerts(raw.get("alerts"), problems)
    return not problems


def untrusted(path: Path) -> str | None:
    """Why the snapshot at path must not be used (None: it may): its file and directory must be
    root's or this reader's own, writable by no one else, and neither a symlink."""
    trusted = {0, os.geteuid()}
    for what, p in (("directory", path.parent), ("file", path)):
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            return "absent"
        except OSError as e:
            return f"unreadable: {e.strerror}"
        kind = stat.S_ISDIR if what == "directory" else stat.S_ISREG
        if not kind(st.st_mode):
            return f"its {what} {p} is not a plain {what} (a symlink or another kind)"
        if st.st_uid not in trusted:
            return f"its {what} {p} belongs to uid {st.st_uid}, not root's sync"
        if st.st_mode & 0o022:
            return f"its {what} {p} is writable by others (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def _read_snapshot(state_dir: Path, source=None):
    path = snapshot_path(state_dir)
    why = untrusted(path)
    if why is not None:
        if why != "absent":
            log.error("alerts: the snapshot %s is not used: %s", path, why)
        return None
    doc = safefs.read_json(path, base=state_dir)
    if not isinstance(doc, dict) or doc.get("version") != VERSION:
        return None
    if source is not None and os.path.abspath(str(doc.get("source", ""))) != \
            os.path.abspath(str(source)):
        log.error("alerts: the snapshot %s is of %s, not of %s: not used", path,
                  doc.get("source"), source)
        return None
    problems = Problems(str(state_dir / SNAPSHOT))
    try:
        cfg = config_mod.Config(source=str(doc.get("source", "")),
                                state_dir=Path(doc["state_dir"]),
                                spool_dir=Path(doc["spool_dir"]))
        cfg.alerts = parse_alerts(doc.get("alerts"), problems)
        cfg.watch = parse_watch(doc.get("watch"), problems)
        cfg.jobs = [SnapshotJob(str(j["name"]), bool(j["session"])) for j in doc.get("jobs", [])]
        cfg.events = parse_events(doc.get("events"), problems, {j.name for j in cfg.jobs})
    except (KeyError, TypeError, ValueError):
        return None
    if problems or not cfg.state_dir.is_absolute() or not cfg.spool_dir.is_absolute():
        log.error("alerts: the snapshot %s is not valid; not used", path)
        return None
    if os.path.abspath(cfg.state_dir) != os.path.abspath(state_dir):
        log.error("alerts: the snapshot %s names another state directory (%s): not used", path,
                  cfg.state_dir)
        return None
    cfg.snapshot_utc = str(doc.get("written_utc", "?"))
    return cfg
