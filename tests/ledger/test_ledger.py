"""The run ledger's local backend: one claim per key under any race, attempts, results, tickets."""

from __future__ import annotations

import multiprocessing
import os

import pytest

from market_timers import ledger
from market_timers.ledger import runrecord
from market_timers.ledger.local import LocalLedger

KEY = ledger.Key("closing-orders", "2025-11-26")


def _race(state_dir: str, barrier, results) -> None:
    barrier.wait()
    claim = LocalLedger(state_dir).claim(KEY, "timer", {"pid": os.getpid()})
    results.put((os.getpid(), claim.ok, claim.attempt, (claim.holder or {}).get("pid")))


def test_many_processes_racing_for_one_claim_exactly_one_wins(tmp_path):
    ctx = multiprocessing.get_context("fork")
    n = 24
    barrier, results = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=_race, args=(str(tmp_path), barrier, results)) for _ in range(n)]
    for p in procs:
        p.start()
    got = [results.get(timeout=60) for _ in range(n)]
    for p in procs:
        p.join(timeout=60)
    winners = [g for g in got if g[1]]
    assert len(winners) == 1 and winners[0][2] == 1
    # every loser was told who holds it
    assert {g[3] for g in got if not g[1]} == {winners[0][0]}
    assert [a["pid"] for a in LocalLedger(str(tmp_path)).attempts(KEY)] == [winners[0][0]]


def test_racing_forced_runs_each_get_their_own_attempt(tmp_path):
    book = LocalLedger(str(tmp_path))
    assert book.claim(KEY, "timer", {}).attempt == 1
    assert [book.claim(KEY, "forced", {}).attempt for _ in range(3)] == [2, 3, 4]
    assert [a["how"] for a in book.attempts(KEY)] == ["timer", "forced", "forced", "forced"]


def test_a_retry_is_the_next_attempt_only_after_a_failed_one(tmp_path):
    """Issue 13's retries: the ledger counts attempts, so a retry is never 'already ran'."""
    book = LocalLedger(str(tmp_path))
    assert not book.claim(KEY, "retry", {}).ok  # nothing to retry
    assert book.claim(KEY, "timer", {"invocation": "i1"}).ok
    assert not book.claim(KEY, "retry", {}).ok  # attempt 1 is still running
    book.finish(KEY, "i1", {"result": "exit-code", "exit_status": "1"})
    retry = book.claim(KEY, "retry", {"invocation": "i2"})
    assert retry.ok and retry.attempt == 2
    book.finish(KEY, "i2", {"result": "success", "exit_status": "0"})
    assert not book.claim(KEY, "retry", {}).ok  # it succeeded: no third attempt
    assert not book.claim(KEY, "timer", {}).ok
    assert [(a["attempt"], a["result"]) for a in book.attempts(KEY)] == [
        (1, "exit-code"), (2, "success")]


def test_finish_goes_to_the_invocations_own_entry(tmp_path):
    book = LocalLedger(str(tmp_path))
    book.claim(KEY, "timer", {"invocation": "first", "started_utc": "2025-11-26T20:50:00Z"})
    book.refuse(KEY, {"invocation": "second", "refused": "already-ran",
                      "started_utc": "2025-11-26T20:55:00Z"})
    book.finish(KEY, "second", {"result": "exit-code", "exit_status": "173"})
    book.finish(KEY, "first", {"result": "success", "exit_status": "0"})
    [attempt] = book.attempts(KEY)
    [refusal] = book.refusals(KEY)
    assert attempt["result"] == "success" and refusal["exit_status"] == "173"


def test_a_key_with_a_slot_is_separate_from_the_session(tmp_path):
    book = LocalLedger(str(tmp_path))
    assert book.claim(KEY, "timer", {}).ok
    slot = ledger.Key(KEY.job, KEY.session, "143000")
    assert book.claim(slot, "timer", {}).ok and not book.claim(slot, "timer", {}).ok
    assert sorted((k.session, k.slot) for k in book.keys()) == [
        ("2025-11-26", ""), ("2025-11-26", "143000")]


@pytest.mark.parametrize("bad", ["", "../x", ".hidden", "a/b", "x\ny"])
def test_keys_that_could_escape_the_ledger_are_refused(bad):
    with pytest.raises(ValueError):
        ledger.Key(bad, "2025-11-26")
    with pytest.raises(ValueError):
        ledger.Key("job", bad)


def test_records_read_the_ledger_and_fall_back_to_pre_ledger_run_records(tmp_path):
    legacy = tmp_path / "runs" / "signal" / "2025-11-20.json"
    legacy.parent.mkdir(parents=True)
    legacy.write_text('{"job": "signal", "session": "2025-11-20", "result": "success"}\n')
    LocalLedger(str(tmp_path)).claim(ledger.Key("signal", "2025-11-21"), "timer", {"pid": 1})
    assert runrecord.read(tmp_path, "signal", "2025-11-20")["result"] == "success"
    assert runrecord.read(tmp_path, "signal", "2025-11-21")["attempts"] == 1
    assert runrecord.read(tmp_path, "signal", "2025-11-22") is None
    assert [r["session"] for r in runrecord.all_records(tmp_path)] == ["2025-11-20", "2025-11-21"]


def test_the_ledger_imports_only_os_and_errno():
    import subprocess
    import sys

    code = ("import sys; before = set(sys.modules); import market_timers.ledger.local; "
            "print(sorted(m for m in set(sys.modules) - before "
            "if m.split('.')[0] not in ('market_timers', '__future__', 'errno')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_symlinks_planted_in_the_ledger_are_never_followed_by_the_readers(tmp_path):
    precious = tmp_path / "precious"
    precious.write_text("job=signal\nhost=evil\n")
    entry = tmp_path / "state" / "ledger" / "signal" / "2025-12-01"
    entry.mkdir(parents=True)
    (entry / "attempt-1").symlink_to(precious)
    (tmp_path / "state" / "ledger" / "quotes").symlink_to(tmp_path)
    state = tmp_path / "state"
    assert runrecord.read(state, "signal", "2025-12-01") is None
    assert runrecord.read(state, "quotes", "2025-12-01") is None
    assert runrecord.all_records(state) == []
    # the runner's claim cannot be taken over a planted entry either: it refuses to run
    claim = LocalLedger(str(state)).claim(ledger.Key("signal", "2025-12-01"), "timer", {})
    assert not claim.ok
    assert precious.read_text() == "job=signal\nhost=evil\n"


def test_a_claim_that_hits_a_full_disk_leaves_nothing_that_reads_as_a_start(tmp_path,
                                                                              monkeypatch):
    import errno

    from market_timers.ledger import local

    book = LocalLedger(str(tmp_path))
    real_write = os.write

    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(local.os, "write", full)
    with pytest.raises(OSError, match="No space left"):
        book.claim(KEY, "timer", {"pid": 1})
    monkeypatch.setattr(local.os, "write", real_write)
    assert book.holder(KEY) is None  # not "already ran": the session can still run
    assert runrecord.read(tmp_path, KEY.job, KEY.session) is None  # status, the deadman: no start
    key_dir = tmp_path / "ledger" / KEY.job / KEY.session
    assert sorted(p.name for p in key_dir.iterdir()) == []  # not even the temp file
    assert book.claim(KEY, "timer", {"pid": 2}).ok


def test_an_empty_claim_left_by_an_older_version_is_no_start_and_is_replaced(tmp_path):
    book = LocalLedger(str(tmp_path))
    key_dir = tmp_path / "ledger" / KEY.job / KEY.session
    key_dir.mkdir(parents=True)
    (key_dir / "attempt-1").write_text("")
    assert book.holder(KEY) is None
    claim = book.claim(KEY, "timer", {"pid": 7})
    assert claim.ok and claim.attempt == 1
    assert book.holder(KEY)["pid"] == 7


def test_a_fifo_planted_in_the_ledger_is_refused_without_blocking(tmp_path):
    import subprocess
    import sys

    key_dir = tmp_path / "ledger" / KEY.job / KEY.session
    key_dir.mkdir(parents=True)
    os.mkfifo(key_dir / "attempt-1")
    code = ("import sys; from market_timers import ledger; from market_timers.ledger.local import "
            "LocalLedger\ntry:\n    LocalLedger(sys.argv[1]).holder(ledger.Key('closing-orders', "
            "'2025-11-26'))\nexcept OSError as e:\n    print('refused:', e)")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                         text=True, timeout=20)  # the old code blocked here forever
    assert "refused:" in out.stdout and "not a regular file" in out.stdout, out


@pytest.mark.parametrize("char", ["\n", "\r", "\\", "\v", "\f", "\x1c", "\x1d", "\x1e", "\x85",
                                  "\u2028", "\u2029", "=", "\0"])
def test_every_field_round_trips_whatever_it_holds(char):
    fields = {"by": f"ops{char}attempt=99{char}host=evil", "node": f"{char}", "pid": 4}
    assert ledger.parse_fields(ledger.format_fields(fields)) == fields
