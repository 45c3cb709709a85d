"""Every channel fits any alert text into its limit, in the units it counts, and never spins.

Regression: Telegram's fit() looped forever on a text over 4096 characters with no journal excerpt
(a refresh alert naming 40 jobs), and cut a journal of emoji down to the header alone.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from market_timers.alerts.model import Alert
from market_timers.channels import slack, specs, telegram
from market_timers.channels.textfit import JOURNAL_LABEL, fit_parts, utf16_len

EMOJI = "\U0001F4A5\U0001F680\u26a0\ufe0f"  # two astral (2 UTF-16 units each) and a BMP one

# Texts a user could produce: plain, accented, emoji, very long lines, newlines, NUL-free.
chars = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")
texts = st.one_of(
    st.text(chars, max_size=300),
    st.builds(lambda c, n: c * n, st.sampled_from(["x", "é", EMOJI, "\U0001F4A5", "a\n"]),
              st.integers(0, 12000)),
    st.builds(lambda a, b: a + b, st.text(chars, max_size=50),
              st.builds(lambda n: "line " * n, st.integers(0, 3000))),
)


def alert(text: str, journal: str = "", title: str = "job failed", severity="critical"):
    details = {"journal": journal} if journal else {}
    return Alert(id="1130-0123abcd", kind="failed", severity=severity, key="k", title=title,
                 text=text, job="signal", session="2026-11-30", details=details)


# From the registry: every channel that declares a limit (a new one is tested without an edit here).
LIMITED = [s for s in specs() if s.limit is not None]


def whole(spec, a: Alert) -> str:
    """What the channel sends when nothing needs cutting."""
    return {"body": a.body(), "message": a.body(with_subject=False),
            "subject": a.subject()}[spec.fits]


def test_the_limited_channels_include_the_known_ones():
    assert {"telegram", "slack", "pagerduty", "ntfy"} <= {s.name for s in LIMITED}
    assert telegram.LIMIT == 4096 and slack.LIMIT == 3900


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=texts, journal=st.one_of(st.just(""), texts), title=st.text(chars, max_size=200))
def test_every_channel_fits_any_text_into_its_limit(text, journal, title):
    a = alert(text, journal, title or "t")
    for spec in LIMITED:
        out = spec.fit(a)
        assert spec.measure(out) <= spec.limit, spec.name
        full = whole(spec, a)
        if spec.measure(full) <= spec.limit:
            assert out == full, spec.name  # nothing is cut when it fits
        elif spec.fits != "message":
            assert out  # never empty
            assert out.startswith(a.subject()[:50].rstrip("…")[:20])


def test_long_text_without_journal_is_cut_not_looped():
    """The refresh's 6,153-character alert: fit returns (it looped forever before)."""
    text = "\n".join(f"job{i:02d}: offset -15 is not a duration" for i in range(40)) * 4
    out = telegram.fit(alert(text))
    assert utf16_len(out) <= 4096
    assert out.endswith("…")
    assert out.startswith("[CRITICAL] job failed")


def test_emoji_journal_keeps_as_much_as_fits():
    journal = EMOJI * 3000  # 15,000 UTF-16 units
    out = telegram.fit(alert("short", journal))
    assert JOURNAL_LABEL in out
    kept = out.split(JOURNAL_LABEL, 1)[1]
    assert utf16_len(out) <= 4096
    assert utf16_len(out) >= 4096 - 4  # an emoji may not fit whole at the edge
    assert journal.endswith(kept.removeprefix("…"))  # the end of the journal is kept


@pytest.mark.parametrize("limit", [0, 1, 2, 5, 50])
def test_tiny_limits_terminate(limit):
    out = fit_parts("[CRITICAL] " + EMOJI * 10, EMOJI * 10, limit, utf16_len)
    assert utf16_len(out) <= limit


def test_email_and_webhook_send_the_whole_text():
    a = alert("y" * 50000, "z" * 50000)
    assert len(a.body()) > 100000
