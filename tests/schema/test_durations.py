"""Durations and offsets (issue 27): "m", systemd's own spelling of minutes, is accepted; "M"
(systemd's months) and "ms" (milliseconds) are refused with the reason."""

from __future__ import annotations

import pytest

from market_timers.config import loader as config
from market_timers.schema.durations import parse_duration, parse_offset


@pytest.mark.parametrize(("text", "seconds"), [
    ("-15m", -900), ("+30m", 1800), ("1h30m", 5400), ("2m30s", 150), ("-15min", -900)])
def test_offset_takes_m_for_minutes(text, seconds):
    assert parse_offset(text) == seconds


def test_duration_takes_m_for_minutes():
    assert parse_duration("5m", 3600) == 300


@pytest.mark.parametrize(("text", "reason"), [
    ("-15M", "months"), ("15ms", "milliseconds"), ("1m30min", "once each"),
    ("30s1m", "largest first")])
def test_months_milliseconds_and_a_repeated_minute_are_refused(text, reason):
    with pytest.raises(ValueError, match=reason):
        parse_offset(text)


def test_a_job_offset_of_minus_15m_loads(write_config):
    cfg = config.load(write_config('calendar = "XNYS"\n[[job]]\nname = "signal"\nevent = "close"\n'
                                   'offset = "-15m"\ncommand = ["/usr/bin/true"]\n'))
    assert cfg.job("signal").offset == -900
