"""The fault campaign's counts (tests/e2e/campaign.py) and its proxy's holds, without booting
anything (runs everywhere, fast): a halt's window (issue 44) counts the fires it held as told
and any start inside it as a halted job run."""

from __future__ import annotations

import random
import socket
import threading

import pytest
from tests.fakes.stallproxy import HoldingProxy

from .campaign import FAULTS, plan_faults
from .campaigncounts import Fault, Fire, Outcome, alert_messages, alerted_fires

# `halt` asked, it returned, `resume` asked, it returned
HALT_ASKED, HALT, ASKED, RESUMED = 98.0, 100.0, 130.0, 133.0


def _outcome(runs: dict) -> Outcome:
    fires = [Fire("single000", 95.0, 10), Fire("orders001", 110.0, 10),
             Fire("books002", 134.0, 10), Fire("single003", 140.0, 10)]
    halt = Fault(HALT, "halt-unreachable", "pg", 12.0, halted=(HALT_ASKED, HALT, ASKED, RESUMED))
    return Outcome(23, fires, [halt], runs=runs)


def test_a_fire_the_halt_held_is_told_by_the_halt_and_not_counted_as_neither():
    out = _outcome({0: [("ny4-a", 95.1)], 3: [("ny4-a", 140.1)]})
    assert [f.job for f in out.held()] == ["orders001", "books002"]
    assert out.neither() == []
    assert out.halted_runs() == []


def test_a_fire_the_halt_refused_before_the_halt_command_returned_is_held_not_neither():
    # run 2 of a8d9860: `halt --all` waited on a held connection and returned 2 s after a fire it
    # had already refused; that fire was counted "neither run nor alerted"
    out = Outcome(23, [Fire("books008", 98.5, 10)],
                  [Fault(HALT_ASKED, "hold-watch", "ny4-b", 11.0,
                         halted=(HALT_ASKED, HALT + 2, ASKED, RESUMED))])
    assert [f.job for f in out.held()] == ["books008"]
    assert out.neither() == []


def test_a_start_while_the_halt_is_in_force_is_a_halted_job_run():
    out = _outcome({1: [("ny4-b", 112.0)], 2: [("ny4-a", 134.1)]})
    assert [f.job for f in out.halted_runs()] == ["orders001"]
    assert "halted jobs run 1" in out.summary()


def test_a_fire_after_the_resume_returned_that_did_not_run_is_still_neither():
    out = _outcome({})
    assert [f.job for f in out.neither()] == ["single000", "single003"]


def test_the_fault_table_has_a_primary_failover_of_the_database_among_the_others():
    assert "primary-failover" in FAULTS
    faults = plan_faults(random.Random(23), 0.0, 900.0, FAULTS, 30, None, 15)
    assert {f.kind for f in faults} == set(FAULTS)
    assert {f.node for f in faults if f.kind == "primary-failover"} == {"pg"}


def test_each_kind_of_fault_counts_the_fires_it_covered_until_a_grace_after_its_end():
    fires = [Fire("single000", 100.0, 10), Fire("orders001", 105.0, 10),
             Fire("books002", 125.0, 10), Fire("single003", 200.0, 10)]
    faults = [Fault(104.0, "primary-failover", "pg", 14.0), Fault(190.0, "kill9", "ny4-b", 0.0)]
    runs = {0: [("ny4-a", 100.1)], 1: [("ny4-a", 105.1), ("ny4-b", 107.2)],
            3: [("ny4-b", 230.0)]}
    counts = Outcome(23, fires, faults, runs=runs, alerted={2}).by_fault_kind(after=10)
    assert list(counts) == ["primary-failover", "kill9", "no fault"]
    assert counts["primary-failover"] == {
        "faults": 1, "fires": 2, "ran": 1, "ran twice": 1, "ran later than grace": 0,
        "neither ran nor alerted": 0, "refused and alerted": 1, "held by a halt": 0,
        "halted jobs run": 0}
    assert (counts["kill9"]["fires"], counts["kill9"]["ran later than grace"]) == (1, 1)
    assert (counts["no fault"]["faults"], counts["no fault"]["fires"]) == (0, 1)


class _Api:
    """The fake alert API's received(service), as the campaign reads it."""

    def __init__(self, **texts):
        self.texts = texts

    def received(self, service):
        return [{"text": t, "received": 0.0} for t in self.texts.get(service, [])]


def test_a_fire_told_by_a_warning_on_slack_is_alerted_not_neither():
    """A start dropped because the previous run of its lock group still ran is a warning, and
    warnings go to Slack by default (criticals to Telegram): the bench run of 5843c6b counted
    books077, told on Slack, as neither run nor alerted."""
    fires = [Fire("books077", 100.0, 10), Fire("single078", 102.0, 10)]
    api = _Api(slack=["books077 skipped: the previous run still holds its lock"],
               telegram=["single078 did not run for session 2026-12-05"])
    assert alerted_fires(fires, alert_messages(api), periodic="tick", settle=65) == {0, 1}


def test_a_unit_that_failed_after_its_job_ran_tells_no_one_of_a_refused_fire():
    fires = [Fire("single000", 100.0, 10)]
    api = _Api(telegram=["single000 failed with exit status 0"])
    assert alerted_fires(fires, alert_messages(api), periodic="tick", settle=65) == set()


@pytest.fixture
def echo_port():
    server = socket.create_server(("127.0.0.1", 0))

    def serve():
        while True:
            try:
                conn = server.accept()[0]
            except OSError:
                return
            threading.Thread(target=lambda c=conn: [c.sendall(d) for d in iter(
                lambda: c.recv(100), b"")], daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1]
    server.close()


def _echoes(sock: socket.socket, data: bytes) -> bool:
    sock.sendall(data)
    try:
        return sock.recv(100) == data
    except TimeoutError:
        return False


def test_hold_open_holds_the_connections_open_now_and_lets_new_ones_through(echo_port):
    proxy = HoldingProxy(echo_port)
    try:
        old = socket.create_connection(("127.0.0.1", proxy.port), timeout=0.5)
        assert _echoes(old, b"listen")
        proxy.hold_open()
        new = socket.create_connection(("127.0.0.1", proxy.port), timeout=0.5)
        assert _echoes(new, b"claim")
        assert not _echoes(old, b"look")
        proxy.release()
        old.settimeout(2)
        assert old.recv(100) == b"look"
    finally:
        proxy.close()
