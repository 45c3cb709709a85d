"""The digest lists the sessions a pause held (not run, not missed) and those `requires` held."""

from __future__ import annotations

from market_timers.alerts.digest import build
from market_timers.ledger import runrecord


def test_the_digest_lists_a_paused_session_as_paused_not_missed(make_ctx, tmp_path):
    state = tmp_path / "state"
    runrecord.update(state, "signal", "2025-11-28", refused="paused", scope="job signal",
                     note="broker down", started_utc="2025-11-28T20:45:00Z")
    runrecord.update(state, "orders", "2025-11-28", refused="requires-unmet", upstream="signal",
                     upstream_state="refused (paused)", started_utc="2025-11-28T20:50:00Z")
    body = build(make_ctx(), "2025-11-28")
    assert "  signal: paused;" in body
    assert "Paused (not run, not missed): signal" in body
    assert "Not run, a job they require did not succeed: orders" in body
    assert "misses: 0" in body


def test_the_digest_lists_a_halted_session_and_the_halt_in_force(make_ctx, tmp_path):
    state = tmp_path / "state"
    runrecord.update(state, "orders", "2025-11-28", refused="halted", scope="order jobs",
                     reason="runaway algo", started_utc="2025-11-28T20:50:00Z")
    (state / "controls").mkdir(mode=0o755)
    (state / "controls" / "halt-orders").write_text(
        "scope=orders\nby=alice\nsince=2025-11-28T20:49:00Z\nhost=ny4-a\nreason=runaway algo\n")
    body = build(make_ctx(), "2025-11-28")
    assert "  orders: halted;" in body
    assert "Halted (not run, not missed): orders" in body
    assert ("Halt in force: order jobs (orders = true) by alice on ny4-a since "
            "2025-11-28T20:49:00Z: runaway algo (to lift it: market-timers resume --orders)") in body
    assert "misses: 0" in body
