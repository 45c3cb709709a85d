"""The LoadCredential= drop-ins that sync writes from the channel registry and the config.

Regression: the handler/outbox/deadman units loaded four fixed credential names, so renaming one
in the config (`token_credential = "tg-prod"`) left the secret missing at run time."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from market_timers.alerts import privileges
from market_timers.channels import NAMES, lookup
from market_timers.config import loader as config
from market_timers.schedule import credunits, sync
from market_timers.schema.problems import ConfigError

WED = datetime(2025, 11, 26, 12, 0, tzinfo=UTC)
JOBS = """
calendar = "XNYS"
horizon = 2
[[job]]
name = "signal"
event = "close"
offset = "-15min"
command = ["/usr/bin/true"]
"""
RENAMED = JOBS + """
[alerts.telegram]
chat_id = "-1"
token_credential = "tg-prod"
[alerts.pagerduty]
routing_key_credential = "pd-key"
[watch]
ping_credential = "hc-url"
"""


class Systemctl:
    def __init__(self, unit_dir=None):
        self.reloads = 0
        self.unit_dir = unit_dir
        self.timers_at_reload: list[list[str]] = []

    def show(self, units, props):
        return {}

    def start(self, units):
        pass

    stop = reset_failed = start

    def daemon_reload(self):
        self.reloads += 1
        if self.unit_dir is not None:
            self.timers_at_reload.append(sorted(p.name for p in self.unit_dir.glob("*.timer")))


def loaded(unit_dir, unit) -> list[str]:
    path = credunits.path(unit_dir, unit)
    if not path.exists():
        return []
    return [line.split("=", 1)[1] for line in path.read_text().splitlines()
            if line.startswith("LoadCredential=")]


def test_a_renamed_credential_is_loaded_by_every_alert_unit(write_config, tmp_path):
    cfg = config.load(write_config(RENAMED))
    sc = Systemctl()
    result = sync.sync(cfg, now=WED, systemctl=sc)
    units = tmp_path / "units"
    for unit in credunits.CHANNEL_UNITS:
        names = loaded(units, unit)
        assert names[:2] == ["tg-prod", "pd-key"], unit
        assert "market-timers.telegram-token" not in names
    assert loaded(units, "market-deadman.service")[-1] == "hc-url"  # renamed heartbeat
    assert "hc-url" not in loaded(units, "market-outbox.service")  # only where it is used
    assert result.reloaded and sc.reloads == 1  # a drop-in of a loaded unit needs one


def test_sync_twice_does_not_reload_and_a_rename_reloads_once(write_config, tmp_path):
    path = write_config(RENAMED)
    sc = Systemctl()
    sync.sync(config.load(path), now=WED, systemctl=sc)
    sync.sync(config.load(path), now=WED, systemctl=sc)
    assert sc.reloads == 1
    write_config(RENAMED.replace('"tg-prod"', '"tg-new"'))
    assert sync.sync(config.load(path), now=WED, systemctl=Systemctl(), dry_run=True).reloaded
    assert loaded(tmp_path / "units", "market-outbox.service")[0] == "tg-prod"  # dry run
    sync.sync(config.load(path), now=WED, systemctl=sc)
    assert sc.reloads == 2
    assert loaded(tmp_path / "units", "market-outbox.service")[0] == "tg-new"


def test_no_alerts_no_drop_in_and_a_removed_table_removes_it(write_config, tmp_path):
    path = write_config(JOBS)
    sc = Systemctl()
    sync.sync(config.load(path), now=WED, systemctl=sc)
    assert not (tmp_path / "units" / "market-outbox.service.d").exists() and sc.reloads == 0
    write_config(RENAMED)
    sync.sync(config.load(path), now=WED, systemctl=sc)
    write_config(JOBS)
    sync.sync(config.load(path), now=WED, systemctl=sc)
    assert not credunits.path(tmp_path / "units", "market-outbox.service").exists()
    assert sc.reloads == 2


def test_a_hand_written_file_of_that_name_is_left_alone(write_config, tmp_path, capsys):
    file = credunits.path(tmp_path / "units", "market-outbox.service")
    file.parent.mkdir(parents=True)
    file.write_text("[Service]\nLoadCredential=mine\n")
    sync.sync(config.load(write_config(RENAMED)), now=WED, systemctl=Systemctl())
    assert file.read_text() == "[Service]\nLoadCredential=mine\n"
    assert "left" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["tg\nExecStartPre=/bin/evil", "a/b", "%n", "", "x y", ".hidden"])
def test_a_credential_name_that_could_inject_a_directive_is_a_config_error(write_config, name):
    with pytest.raises(ConfigError) as err:
        config.load(write_config(JOBS + "[alerts.telegram]\nchat_id = \"1\"\n"
                                 f"token_credential = \"{name.encode('unicode_escape').decode()}\"\n"))
    [line] = err.value.problems.lines()
    assert "alerts.telegram.token_credential: must be a credential name" in line
    assert "evil" not in line  # the value is not echoed: it may be the secret pasted in


def test_a_watch_credential_that_is_not_loadable_never_reaches_a_unit(write_config, capsys):
    # watch/config.py refuses only '/' in this name; the drop-in is stricter
    cfg = config.load(write_config(RENAMED.replace('"hc-url"', '"hc\\nExecStartPre=evil"')))
    text = credunits.render(cfg)["market-deadman.service"]
    assert "evil" not in text and "not loadable" in capsys.readouterr().err


def test_every_registered_channel_declares_its_credentials_for_the_units(write_config):
    tables = "".join(f"[alerts.{name}]\n" for name in NAMES)
    tables = tables.replace("[alerts.telegram]\n", "[alerts.telegram]\nchat_id = \"1\"\n")
    tables = tables.replace("[alerts.email]\n",
                            "[alerts.email]\nfrom = \"a@b.c\"\nto = [\"o@b.c\"]\n")
    cfg = config.load(write_config(JOBS + tables))
    defaults = [s.default for name in NAMES for s in lookup(name).credentials()]
    assert len(defaults) >= len(NAMES)
    assert credunits.needed(cfg)["market-outbox.service"] == defaults
    assert privileges.credential_names(cfg) == defaults + ["market-timers.deadman-ping-url"]


def test_a_drop_in_reload_comes_before_the_new_timers_are_written(write_config, tmp_path):
    """e2e regression (test_watch closure): the reload loaded the new timers as wanted by
    timers.target, so a timer that a later sync stopped and deleted stayed in list-timers."""
    sc = Systemctl(tmp_path / "units")
    result = sync.sync(config.load(write_config(RENAMED)), now=WED, systemctl=sc)
    assert result.written and sc.timers_at_reload == [[]]


def test_the_events_processor_loads_every_configured_channels_secret(write_config, tmp_path):
    """Its static unit used to load four fixed names: PagerDuty, ntfy and renamed secrets were
    missing when an incident alerted."""
    cfg = config.load(write_config(RENAMED))
    sync.sync(cfg, now=WED, systemctl=Systemctl())
    names = loaded(tmp_path / "units", "market-events.service")
    assert names[:2] == ["tg-prod", "pd-key"]
    assert names == loaded(tmp_path / "units", "market-outbox.service")
