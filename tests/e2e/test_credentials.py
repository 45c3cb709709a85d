"""A renamed credential reaches the alert handler on a real systemd (issue 11).

Regression: the handler/outbox/deadman units loaded four fixed credential names, so a channel
whose credential was renamed in the config (`token_credential = "..."`) found no secret at run
time and its alerts never left the outbox. `market-timers sync` now writes the units'
`LoadCredential=` lines as drop-ins rendered from the channel registry and the config.
"""

from __future__ import annotations

import pytest

from .scenario import CONFIG, CREDSTORE, TOKEN, Job, Scenario, instant_in

pytestmark = pytest.mark.e2e

RENAMED = "e2e-renamed-telegram-token"
DROPIN = "/etc/systemd/system/market-alert-failure@.service.d/market-timers-credentials.conf"


def test_a_renamed_telegram_credential_is_loaded_and_the_failure_is_delivered(
    scenario: Scenario,
) -> None:
    box = scenario.box
    default = f"{CREDSTORE}/market-timers.telegram-token"
    box.run(["rm", "-f", default])  # only the renamed file holds the token now
    box.write_file(f"{CREDSTORE}/{RENAMED}", TOKEN + "\n", 0o600)
    try:
        job = Job("renamed-cred", instant_in(8), ["fail", "4"])
        scenario.jobs = [job]
        text = scenario.config_text([job]).replace(
            "[alerts.telegram]\n", f'[alerts.telegram]\ntoken_credential = "{RENAMED}"\n', 1)
        box.write_file(CONFIG, text)
        out = scenario.sync()
        assert f"start {job.timer}" in out, out
        dropin = box.read_file(DROPIN)
        assert f"LoadCredential={RENAMED}\n" in dropin
        assert "market-timers.telegram-token" not in dropin
        # in effect (sync reloaded): systemd 252 prints LoadCredential= as [unprintable]
        paths = box.systemctl("show", "-p", "DropInPaths", "market-outbox.service").stdout
        assert "market-outbox.service.d/market-timers-credentials.conf" in paths, paths

        scenario.wait_finished(job, 30)
        msg = scenario.wait_message("telegram", "renamed-cred", "exit status 4", timeout=60,
                                    poll=scenario.flush_outbox)
        assert "insufficient margin" in msg["text"]  # the run's own journal lines
        assert [r for r in scenario.outbox() if r["job"] == "renamed-cred"] == []
    finally:
        box.run(["rm", "-f", f"{CREDSTORE}/{RENAMED}"])
        box.write_file(default, TOKEN + "\n", 0o600)


def test_a_new_channel_from_the_registry_gets_its_renamed_credential_too(
    scenario: Scenario,
) -> None:
    """PagerDuty is only its module and its name in the registry: its routing key, under a name
    of the config's choosing, reaches the handler and the event reaches the (fake) Events API."""
    box = scenario.box
    key = "R0E2EROUTINGKEY"
    box.write_file(f"{CREDSTORE}/e2e-pd-key", key + "\n", 0o600)
    try:
        job = Job("pd-cred", instant_in(8), ["fail", "5"])
        scenario.jobs = [job]
        extra = (f'[alerts.pagerduty]\napi_base = "{scenario.api.base}"\n'
                 'routing_key_credential = "e2e-pd-key"\nsource = "e2e-box"\n')
        text = scenario.config_text([job]).replace(
            "[alerts]\n", '[alerts]\nroutes = { critical = "pagerduty" }\n', 1).replace(
            "[watch]\n", extra + "[watch]\n", 1)
        box.write_file(CONFIG, text)
        assert f"start {job.timer}" in scenario.sync()
        scenario.wait_finished(job, 30)
        msg = scenario.wait_message("pagerduty", "pd-cred failed with exit status 5",
                                    timeout=60, poll=scenario.flush_outbox)
        event = msg["event"]
        assert event["routing_key"] == key and event["event_action"] == "trigger"
        assert event["dedup_key"] == "market-timers:e2e-box:job:pd-cred"
        assert scenario.messages("telegram", "pd-cred") == []  # no fallback was needed
    finally:
        box.run(["rm", "-f", f"{CREDSTORE}/e2e-pd-key"])
