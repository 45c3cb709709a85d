"""Medium 1: a malformed outbox file neither breaks nor hides the outbox.

A valid-JSON file missing `title` made `flush` die (nothing sent) and `outbox list` crash; a
truncated file was skipped forever while `list` said "outbox empty". Now each is moved to
<spool_dir>/quarantine/, alerted once, the rest is sent, and `outbox list` shows them.
"""

from __future__ import annotations

import json

import pytest

from market_timers.alerts import delivery
from market_timers.alerts.api import raise_alert
from market_timers.alerts.commands import outbox_list

BAD = {
    "no-title": lambda good: json.dumps({k: v for k, v in good.items() if k != "title"}),
    "truncated": lambda good: json.dumps(good)[:40],
    "not-an-object": lambda good: "[1, 2]",
    "wrong-type": lambda good: json.dumps({**good, "attempts": "three"}),
    "empty": lambda good: "",
}


@pytest.mark.parametrize("how", sorted(BAD))
def test_flush_quarantines_a_bad_file_alerts_once_and_sends_the_rest(make_ctx, api, tmp_path,
                                                                      capsys, how):
    ctx = make_ctx()
    good = raise_alert(ctx, kind="failed", job="signal", text="boom", deliver=False)
    doc = json.loads((ctx.outbox.path(good)).read_text())
    bad_path = ctx.outbox.dir / "1130-deadbeef.json"
    bad_path.write_text(BAD[how](doc))

    assert outbox_list(ctx) == 0  # does not crash, does not say "empty"
    out = capsys.readouterr().out
    assert "1130-deadbeef.json" in out and "malformed" in out and "outbox empty" not in out

    counts = delivery.flush(ctx)
    assert counts["quarantined"] == 1
    assert not bad_path.exists()
    assert (tmp_path / "spool" / "quarantine" / "1130-deadbeef.json").exists()
    texts = [m["text"] for m in api.received()]
    assert any("signal failed" in t for t in texts)  # the rest is still sent
    [note] = [t for t in texts if "malformed and set aside" in t]
    assert "1130-deadbeef.json" in note and "[CRITICAL]" in note
    assert ctx.outbox.load_all() == []

    delivery.flush(ctx)  # alerted once: the file is out of the outbox now
    assert len([m for m in api.received() if "malformed and set aside" in m["text"]]) == 1
    assert outbox_list(ctx) == 0
    out = capsys.readouterr().out
    assert "quarantined" in out and "1130-deadbeef.json" in out


def test_a_symlink_in_the_outbox_is_quarantined_not_followed(make_ctx, api, tmp_path):
    ctx = make_ctx()
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"id": "x"}))
    ctx.outbox.dir.mkdir(parents=True)
    (ctx.outbox.dir / "1130-0000beef.json").symlink_to(secret)
    counts = delivery.flush(ctx)
    assert counts["quarantined"] == 1 and secret.exists()
    assert (tmp_path / "spool" / "quarantine" / "1130-0000beef.json").is_symlink()


def test_list_json_shows_the_quarantine(make_ctx, capsys):
    ctx = make_ctx()
    ctx.outbox.dir.mkdir(parents=True)
    (ctx.outbox.dir / "1130-deadbeef.json").write_text("{")
    delivery.flush(ctx)
    capsys.readouterr()
    outbox_list(ctx, as_json=True)
    rows = json.loads(capsys.readouterr().out)
    assert {"spool": "1130-deadbeef.json", "state": "quarantined"}.items() <= next(
        r for r in rows if r["state"] == "quarantined").items()


@pytest.mark.parametrize("rel,text", [
    ("alerts/dedup.json", "[1, 2]"),
    ("alerts/dedup.json", '{"failed:signal": "not a dict"}'),
    ("alerts/channels.json", '{"telegram": 5}'),
    ("alerts/channels.json", '"x"'),
    ("alerts/active/1130-0123abcd.json", '{"alert": {"id": 5}, "next": 3}'),
    ("alerts/active/1130-0123abcd.json", "{"),
])
def test_a_corrupted_state_file_neither_drops_an_alert_nor_stops_the_flush(make_ctx, api,
                                                                            tmp_path, rel, text):
    """The same class as a malformed outbox file: state files are as writable by the jobs."""
    ctx = make_ctx(repeat_minutes=1)
    path = tmp_path / "state" / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    raise_alert(ctx, kind="failed", job="signal", text="boom")
    assert [m for m in api.received("telegram") if "signal failed" in m["text"]]
    delivery.flush(ctx)  # does not raise
