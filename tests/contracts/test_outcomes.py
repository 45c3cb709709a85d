"""The outcome table (contracts/outcomes.py): its rows hold together, and a new outcome is one
row: with a throwaway row added to the table's source and nothing else, classify, the titles,
`status`'s text and page, the digest, the metrics, the alert kinds pick it up, and the man
pages' docs test (tests/test_docs.py) names what they lack."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from market_timers.contracts import exitcodes, outcomes, severities

ROOT = Path(__file__).resolve().parents[2]
STATES = {name for name, _, _ in outcomes.PAGE_STATES}


def test_names_and_exit_statuses_are_unique():
    names = [o.name for o in outcomes.OUTCOMES]
    exits = [o.exit for o in outcomes.OUTCOMES if o.exit is not None]
    assert len(set(names)) == len(names)
    assert len(set(exits)) == len(exits)
    assert all(150 <= e <= 199 for e in exits)  # LSB's range for applications: no job's, no systemd's


def test_every_row_is_well_formed():
    for o in outcomes.OUTCOMES:
        assert o.page in STATES, o.name
        assert o.counts in (outcomes.RAN, outcomes.REFUSED, outcomes.MISSED), o.name
        assert o.severity in (None, "job", *severities.SEVERITIES), o.name
        assert o.brief, o.name
        assert o.exit is None or o.explain, f"{o.name}: the man page needs its line"
        assert o.reported_as is None or o.reported_as in outcomes.BY_NAME, o.name
        assert not o.claims or o.counts == outcomes.RAN, o.name  # a claim is a run
        assert not o.said or o.said.split("{", 1)[1].split("}", 1)[0] in o.fields, o.name
        assert not (o.failure and not o.metric and not o.reported_as), o.name


def test_the_exit_codes_are_the_tables():
    for o in outcomes.OUTCOMES:
        if o.exit is not None:
            assert getattr(exitcodes, o.name.upper().replace("-", "_")) == o.exit


_ROW = '''\
    Outcome("demo-refused", exit=169, severity="warning", page="refused", metric=True,
            title="{job} demo-refused for session {session}", brief="demo refused",
            tally="demo refusals", held="Demo-refused (not run)", fields=("why",),
            said="demo refused ({why})", explain="a throwaway row of the test."),
'''

# Runs in a fresh interpreter whose outcome table has _ROW: what each consumer makes of it.
_PROBE = textwrap.dedent('''
    import json, sys, types
    from datetime import UTC, datetime
    from pathlib import Path
    import market_timers.contracts as contracts
    name = "market_timers.contracts.outcomes"
    path = Path(contracts.__file__).with_name("outcomes.py")
    source = path.read_text()
    anchor = "\\n)\\n\\n# Alert kinds that are no outcome"
    assert anchor in source
    table = types.ModuleType(name)
    table.__file__ = str(path)
    sys.modules[name] = contracts.outcomes = table
    exec(compile(source.replace(anchor, "\\n" + sys.argv[1].rstrip() + anchor), str(path), "exec"),
         table.__dict__)

    from market_timers.alerts.context import AlertContext
    from market_timers.alerts.digest import build
    from market_timers.config import alerts
    from market_timers.contracts.outcomes import classify, result_text, title
    from market_timers.ledger import runrecord
    from market_timers.metrics.families import FAMILIES
    from market_timers.metrics.records import result_kinds, run_kind
    from market_timers.schema.problems import Problems
    from market_timers.watch import statuspage, statustable

    state = Path(sys.argv[2])
    runrecord.update(state, "orders", "2026-12-04", refused="demo-refused", why="a test",
                     started_utc="2026-12-04T20:50:00Z", finished_utc="2026-12-04T20:50:00Z")
    row = {"job": "orders", "fire_utc": "2026-12-04T20:50:00Z", "timer": "elapsed",
           "result": "demo-refused", "exit_status": None, "duration_sec": None, "attempts": 1,
           "refused_starts": [], "alerts": [], "why": "a test"}
    doc = {"sessions": [{"session": "2026-12-04", "jobs": [row]}]}
    ctx = AlertContext(alerts.parse_alerts(None, Problems()), state, state / "spool",
                       now=lambda: datetime(2026, 12, 5, tzinfo=UTC))
    print(json.dumps({
        "classify": classify("exit-code", "exited", "169"),
        "result_text": result_text("exit-code", "169"),
        "title": title("demo-refused", "orders", "2026-12-04"),
        "status": statustable.table(doc),
        "cell": statuspage.cell_state(row),
        "legend": dict(statuspage.STATES)["refused"],
        "digest": build(ctx, "2026-12-04", halts=[]),
        "metric_labels": list(result_kinds()[0]),
        "metric_help": dict((n, h) for n, _, h in FAMILIES)["job_last_result"],
        "run_kind": run_kind(runrecord.read(state, "orders", "2026-12-04")),
        "alert_kinds": list(alerts.KINDS),
        "severity": alerts.DEFAULT_KIND_SEVERITY.get("demo-refused"),
    }))
''')


def test_a_new_outcome_is_one_row(tmp_path):
    done = subprocess.run([sys.executable, "-c", _PROBE, _ROW, str(tmp_path / "state")],
                          capture_output=True, text=True, check=False, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["classify"] == "demo-refused"
    assert seen["result_text"] == "demo refused (exit 169)"
    assert seen["title"] == "orders demo-refused for session 2026-12-04"
    assert "demo refused (a test)" in seen["status"]
    assert seen["cell"] == "refused"
    assert "demo refused" in seen["legend"]
    assert "  orders: demo-refused;" in seen["digest"]
    assert "demo refusals: 1" in seen["digest"]
    assert "Demo-refused (not run): orders" in seen["digest"]
    assert "demo-refused" in seen["metric_labels"]
    assert "demo-refused" in seen["metric_help"]
    assert seen["run_kind"] == "demo-refused"
    assert "demo-refused" in seen["alert_kinds"]
    assert seen["severity"] == "warning"

