"""Config validation: every error names the file, the key and the value; exit code 2; nothing written."""

from __future__ import annotations

import re

import pytest

from market_timers import cli
from market_timers.config import loader as config
from market_timers.schedule import calendar_checks
from market_timers.schema.problems import ConfigError

GOOD_JOB = """
[[job]]
name = "signal"
event = "close"
offset = "-15min"
command = ["/usr/bin/true"]
"""


def at(line: str, path, rest: str) -> bool:
    """`FILE:LINE: rest` (a job's key, whose line the loader finds) or `FILE: rest`."""
    return re.match(rf"{re.escape(str(path))}(:[0-9]+)?: {re.escape(rest)}", line) is not None


def at_any(text: str, path, rest: str) -> bool:
    return any(at(line, path, rest) for line in text.splitlines())


def problems_of(path) -> list[str]:
    """Every problem of the file, calendar ones included (the loader the commands use)."""
    with pytest.raises(ConfigError) as exc:
        calendar_checks.load(path)
    return exc.value.problems.lines()


def test_valid_config_loads_with_defaults(write_config):
    cfg = config.load(write_config('calendar = "XNYS"\n' + GOOD_JOB))
    job = cfg.job("signal")
    assert (job.event, job.offset, job.grace, job.timeout, job.lock, job.severity) == (
        "close", -900, 120, 1800, "signal", "critical")
    assert cfg.horizon == 3  # what the daily refresh needs, with two failed days to spare


def test_unknown_top_level_key_is_named(write_config):
    path = write_config('calendar = "XNYS"\nhorizn = 5\n' + GOOD_JOB)
    [line] = problems_of(path)
    assert line.startswith(f"{path}: horizn: unknown key")


def test_unknown_job_key_names_the_job_by_its_name(write_config):
    path = write_config('calendar = "XNYS"\n' + GOOD_JOB + 'gracee = "1min"\n')
    assert any("job.signal.gracee: unknown key" in x for x in problems_of(path))


def test_a_problem_of_the_fourth_job_names_it_not_its_place(write_config):
    """An operator finds `closing` by the name they wrote; `job[3]` meant counting tables."""
    jobs = "".join(GOOD_JOB.replace('"signal"', f'"{n}"') for n in ("a", "b", "c"))
    path = write_config('calendar = "XNYS"\n' + jobs + GOOD_JOB.replace('"signal"', '"closing"')
                        + 'requires = ["signl"]\n' + GOOD_JOB.replace('"signal"', '"statement"')
                        .replace('"-15min"', '"-15"'))
    found = problems_of(path)
    assert any(at(x, path, "job.closing.requires[0]: no job of that name")
               for x in found), found
    assert any(at(x, path, "job.statement.offset: cannot parse") for x in found), found
    assert not any("job[3]" in x or "job[4]" in x for x in found)


def test_wrong_type_names_key_and_value(write_config):
    path = write_config('calendar = "XNYS"\nhorizon = "ten"\n' + GOOD_JOB)
    [line] = problems_of(path)
    assert "horizon: must be a whole number from 1 to 250 (got 'ten')" in line


def test_unknown_calendar_suggests_close_names(write_config):
    path = write_config('calendar = "XNYZ"\n' + GOOD_JOB)
    [line] = problems_of(path)
    assert "calendar: unknown exchange calendar; did you mean" in line
    assert "XNYS" in line and "(got 'XNYZ')" in line


def test_unknown_job_calendar_is_reported_on_the_job(write_config):
    path = write_config('calendar = "XNYS"\n' + GOOD_JOB + 'calendar = "XHKX"\n')
    [line] = problems_of(path)
    assert "job.signal.calendar: unknown exchange calendar" in line and "XHKG" in line


def test_calendar_alias_is_accepted(write_config):
    cfg = config.load(write_config('calendar = "NYSE"\n' + GOOD_JOB))
    assert cfg.job("signal").calendar == "NYSE"


@pytest.mark.parametrize("offset", ["-15", "15M", "-15 minutes", "1min30h", "--15min", ""])
def test_unparseable_offset_is_refused(write_config, offset):
    path = write_config('calendar = "XNYS"\n' + GOOD_JOB.replace('"-15min"', f'"{offset}"'))
    [line] = problems_of(path)
    assert "job.signal.offset:" in line and f"(got '{offset}')" in line


@pytest.mark.parametrize("name", ["Signal", "sig nal", "sig@nal", "1signal", "a" * 41, "sig.nal"])
def test_job_name_unsafe_in_a_unit_name_is_refused(write_config, name):
    path = write_config('calendar = "XNYS"\n' + GOOD_JOB.replace('"signal"', f'"{name}"'))
    assert any("job[0].name:" in x and "unit names" in x for x in problems_of(path))


def test_duplicate_job_names_are_refused(write_config):
    path = write_config('calendar = "XNYS"\n' + GOOD_JOB + GOOD_JOB)
    [line] = problems_of(path)
    assert "job[1].name: duplicate job name (also job[0], counting the [[job]] tables from 0) (got 'signal')" in line


def test_break_event_on_calendar_without_breaks_is_refused(write_config):
    path = write_config('calendar = "XNYS"\n' + GOOD_JOB.replace('"close"', '"break_start"'))
    [line] = problems_of(path)
    assert "job.signal.event: calendar XNYS never has a break" in line


def test_break_event_on_calendar_with_breaks_is_accepted(write_config):
    text = 'calendar = "XHKG"\n' + GOOD_JOB.replace('"close"', '"break_end"')
    assert config.load(write_config(text)).job("signal").event == "break_end"


def test_local_wall_clock_schedule_is_refused_with_dst_explanation(write_config):
    path = write_config("""
        [[job]]
        name = "nightly"
        at = "02:30 Europe/Madrid"
        command = ["/usr/bin/true"]
    """)
    [line] = problems_of(path)
    assert "job.nightly.at:" in line and "daylight-saving" in line and '"02:30 UTC"' in line


def test_timezone_key_is_refused_with_dst_explanation(write_config):
    path = write_config('calendar = "XNYS"\n' + GOOD_JOB + 'timezone = "America/New_York"\n')
    [line] = problems_of(path)
    assert "job.signal.timezone:" in line and "daylight-saving" in line


def test_fixed_utc_job_is_accepted(write_config):
    cfg = config.load(write_config("""
        [[job]]
        name = "nightly"
        at = "02:30 UTC"
        command = ["/usr/bin/true"]
    """))
    job = cfg.job("nightly")
    assert job.at_utc.isoformat() == "02:30:00" and not job.is_session_job


def test_relative_command_is_refused(write_config):
    path = write_config('calendar = "XNYS"\n' + GOOD_JOB.replace('"/usr/bin/true"', '"true"'))
    [line] = problems_of(path)
    assert "job.signal.command: the program must be an absolute path" in line


def test_every_problem_is_reported_at_once(write_config):
    path = write_config("""
        calendar = "XNYS"
        [[job]]
        name = "Bad Name"
        event = "closing"
        offset = "soon"
        command = []
        severity = "urgent"
    """)
    found = problems_of(path)
    for key in ("job[0].name", "job[0].event", "job[0].offset", "job[0].command",
                "job[0].severity"):
        assert any(f": {key}:" in x for x in found), key


def test_override_with_bad_time_is_named(write_config):
    path = write_config('calendar = "XNYS"\n' + GOOD_JOB + """
        [overrides.XNYS]
        early_close = { "2026-12-24" = "1pm" }
    """)
    [line] = problems_of(path)
    assert "overrides.XNYS.early_close.2026-12-24:" in line and "(got '1pm')" in line


def test_toml_syntax_error_names_the_file(write_config):
    path = write_config('calendar = "XNYS\n')
    [line] = problems_of(path)
    assert line.startswith(f"{path}: (file): not valid TOML")


def test_cli_exits_2_and_writes_nothing_on_a_bad_config(write_config, tmp_path, capsys):
    path = write_config('calendar = "XNYS"\n' + GOOD_JOB.replace('"-15min"', '"-15"'))
    out = tmp_path / "out"
    assert cli.main(["--config", str(path), "render", "--out", str(out)]) == 2
    assert not out.exists()
    err = capsys.readouterr().err
    assert at_any(err, path, "job.signal.offset:") and "nothing was changed" in err


def test_config_path_from_environment(monkeypatch):
    monkeypatch.setenv("MARKET_TIMERS_CONFIG", "/tmp/x.toml")
    assert config.config_path(None) == "/tmp/x.toml"
    assert config.config_path("/etc/y.toml") == "/etc/y.toml"


def test_relative_read_write_path_is_refused(write_config):
    path = write_config('calendar = "XNYS"\n' + GOOD_JOB + 'read_write_paths = ["data"]\n')
    [line] = problems_of(path)
    assert "job.signal.read_write_paths: must be an array of absolute paths" in line


def test_two_override_tables_for_one_exchange_are_refused(write_config):
    path = write_config('calendar = "XNYS"\n' + GOOD_JOB + """
        [overrides.XNYS]
        closed = ["2027-01-08"]
        [overrides.NYSE]
        closed = ["2027-01-11"]
    """)
    [line] = problems_of(path)
    assert "overrides.NYSE: a second table for XNYS (also overrides.XNYS)" in line


def test_zero_grace_is_refused_once(write_config):
    path = write_config('calendar = "XNYS"\n' + GOOD_JOB + 'grace = "0s"\n')
    assert [re.sub(r":[0-9]+: ", ": ", x, count=1) for x in problems_of(path)] == [
        f"{path}: job.signal.grace: must be more than zero (got '0s')"]


def test_bad_job_name_is_reported_once(write_config):
    path = write_config('calendar = "XNYS"\n' + GOOD_JOB.replace('"signal"', '"Sig"'))
    assert len(problems_of(path)) == 1


def test_relative_runner_is_refused(write_config):
    path = write_config('runner = "market-timers-run"\ncalendar = "XNYS"\n' + GOOD_JOB)
    [line] = problems_of(path)
    assert "runner: must be an absolute path" in line


# overrides (issue 9, medium 7) and calendar problems in the same pass --------------------------

def override_problems(write_config, table: str) -> list[str]:
    return problems_of(write_config('calendar = "XNYS"\n' + GOOD_JOB + "[overrides.XNYS]\n"
                                    + table))


@pytest.mark.parametrize("table,key,why", [
    ('early_close = { "2026-12-24" = "24:00" }', "overrides.XNYS.early_close.2026-12-24",
     "not a valid time of day"),
    ('late_open = { "2027-03-02" = "13:60" }', "overrides.XNYS.late_open.2027-03-02",
     "not a valid time of day"),
    ('early_close = { "2027-03-02" = "17:00" }', "overrides.XNYS.early_close.2027-03-02",
     "an early close must fall inside the session (XNYS 2027-03-02 trades 09:30-16:00"),
    ('early_close = { "2027-03-02" = "09:00" }', "overrides.XNYS.early_close.2027-03-02",
     "an early close must fall inside the session"),
    ('late_open = { "2027-03-02" = "16:30" }', "overrides.XNYS.late_open.2027-03-02",
     "a late open must fall inside the session"),
    ('closed = ["2027-01-09"]', "overrides.XNYS.closed", "2027-01-09 is a Saturday"),
    ('closed = ["2026-12-25"]', "overrides.XNYS.closed",
     "2026-12-25 is a holiday (Christmas) on XNYS"),
    ('late_open = { "2027-01-10" = "10:30" }', "overrides.XNYS.late_open.2027-01-10",
     "2027-01-10 is a Sunday"),
    ('early_close = { "2027-03-02" = "12:00" }\nlate_open = { "2027-03-02" = "13:00" }',
     "overrides.XNYS.late_open.2027-03-02", "not before the early close"),
])
def test_bad_override_is_named_with_key_value_and_why(write_config, table, key, why):
    lines = override_problems(write_config, table)
    assert len(lines) == 1, lines
    assert f": {key}: " in lines[0] and why in lines[0]
    assert "(got '" in lines[0]


def test_bad_override_is_exit_2_in_every_command_not_a_traceback(write_config, capsys):
    path = write_config('calendar = "XNYS"\n' + GOOD_JOB +
                        '[overrides.XNYS]\nearly_close = { "2026-12-24" = "24:00" }\n')
    for argv in (["plan"], ["sync", "--dry-run"], ["render", "--out", str(path.parent / "o")]):
        assert cli.main(["--config", str(path), *argv]) == 2, argv
        assert "overrides.XNYS.early_close.2026-12-24" in capsys.readouterr().err


def test_good_overrides_are_accepted(write_config):
    cfg = config.load(write_config('calendar = "XNYS"\n' + GOOD_JOB + """
[overrides.NYSE]
closed = ["2027-01-08"]
early_close = { "2026-12-24" = "13:00", "2027-03-02" = "14:00" }
late_open = { "2027-01-11" = "10:30" }
"""))
    assert cfg.overrides["NYSE"].closed == {__import__("datetime").date(2027, 1, 8)}


def test_unknown_calendar_is_reported_with_the_other_problems_once_naming_its_keys(
        write_config):
    text = 'calendar = "XNYZ"\n' + "".join(
        GOOD_JOB.replace('"signal"', f'"job{i}"') for i in range(7))
    text += GOOD_JOB.replace('"signal"', '"other"') + 'calendar = "XNYZ"\n'
    text = text.replace('offset = "-15min"', 'offset = "-15"', 1)
    lines = problems_of(write_config(text))
    assert len(lines) == 2, lines
    assert ": job.job0.offset: cannot parse" in lines[0]
    assert ": calendar: unknown exchange calendar" in lines[1]
    assert "(used by calendar, job.other.calendar)" in lines[1] and "(got 'XNYZ')" in lines[1]


def test_two_distinct_bad_calendars_are_two_lines(write_config):
    text = ('calendar = "XNYZ"\n' + GOOD_JOB + GOOD_JOB.replace('"signal"', '"b"')
            + 'calendar = "XLNO"\n' + "[overrides.XNYZ]\nclosed = []\n")
    lines = problems_of(write_config(text))
    assert [line.split(": ")[1] for line in lines] == ["calendar", "job.b.calendar"]
    assert "(used by calendar, overrides.XNYZ)" in lines[0]


# --- issue 9: nothing that reaches a unit file may carry a control character -----------------

INJECTION = "x\nExecStartPre=+/bin/sh -c 'id > /var/tmp/pwned'\n#"


def _toml(value: str) -> str:
    import json

    return json.dumps(value)  # a JSON string is a valid TOML basic string


@pytest.mark.parametrize("bad", [INJECTION, "a\rb", "a\x00b", "a\x1bb", "a\x7fb", "a\x85b",
                                 "trailing\\"])
@pytest.mark.parametrize("where", [
    "environment = {{ NOTE = {v} }}",
    "description = {v}",
    "read_write_paths = [{p}]",
    "command = [\"/usr/bin/true\", {v}]",
])
def test_control_character_in_a_job_value_is_refused(write_config, bad, where):
    line = where.format(v=_toml(bad), p=_toml("/srv/" + bad))
    body = GOOD_JOB.replace('command = ["/usr/bin/true"]\n', "") + line + "\n"
    if "command" not in line:
        body += 'command = ["/usr/bin/true"]\n'
    path = write_config('calendar = "XNYS"\n' + body)
    found = problems_of(path)
    assert len(found) == 1, found
    key = line.split(" ", 1)[0]
    assert at(found[0], path, f"job.signal.{key}")
    assert ("control character" in found[0]) or ("backslash" in found[0])
    assert "\n" not in found[0] and "\r" not in found[0]  # the value is shown escaped


@pytest.mark.parametrize("key", ["user", "state_dir", "spool_dir", "runtime_dir", "unit_dir",
                                 "runner", "calendar"])
@pytest.mark.parametrize("bad", ["\nExecStartPre=/bin/sh", "\t", "\\"])
def test_control_character_in_a_top_level_value_is_refused(tmp_path, key, bad):
    value = ("/srv/x" if key not in ("user", "calendar") else "xnys") + bad
    path = tmp_path / "c.toml"
    path.write_text(f"{key} = {_toml(value)}\n" + ('calendar = "XNYS"\n' if key != "calendar"
                                                    else "") + GOOD_JOB)
    found = problems_of(path)
    assert any(f"{path}: {key}:" in x for x in found), found
    assert all("\n" not in x for x in found)


@pytest.mark.parametrize("user", ["root;x", "a b", "%n", "-x", "a" * 32, "trader$"])
def test_user_must_be_a_user_name(write_config, user):
    path = write_config(f"user = {_toml(user)}\ncalendar = \"XNYS\"\n" + GOOD_JOB)
    [line] = problems_of(path)
    assert f"{path}: user: " in line


@pytest.mark.parametrize("where", ["top", "job"])
@pytest.mark.parametrize("user", ["root", "market-timers"])
def test_a_job_never_runs_as_root_or_the_package_user(write_config, where, user):
    top = f"user = {_toml(user)}\n" if where == "top" else ""
    job = f"user = {_toml(user)}\n" if where == "job" else ""
    path = write_config(top + 'calendar = "XNYS"\n' + GOOD_JOB + job)
    [line] = problems_of(path)
    key = "user" if where == "top" else "job.signal.user"
    assert at(line, path, f"{key}: a job never runs as {user}: that user owns the scheduler's")


def test_each_job_has_a_user_of_its_own_by_default_and_a_job_may_name_one(write_config):
    path = write_config('calendar = "XNYS"\n' + GOOD_JOB + GOOD_JOB.replace('"signal"', '"b"')
                        + 'user = "trader"\n')
    cfg = config.load(path)
    assert cfg.user == ""  # issue 41: market-jobs is no longer every job's
    assert [cfg.user_of(j) for j in cfg.jobs] == ["market-job-signal", "trader"]


def test_path_with_dotdot_is_refused(write_config, tmp_path):
    path = write_config('calendar = "XNYS"\n' + GOOD_JOB + 'read_write_paths = ["/srv/../etc"]\n')
    assert any("job.signal.read_write_paths[0]: must not contain '..'" in x
               for x in problems_of(path))
    path = tmp_path / "c.toml"
    path.write_text('state_dir = "/srv/../etc"\ncalendar = "XNYS"\n' + GOOD_JOB)
    assert any("state_dir: must not contain '..'" in x for x in problems_of(path))


def test_tab_and_specials_in_arguments_and_environment_are_accepted(write_config):
    odd = "% $ ${X} \\ \" ' ; space\ttab é"
    cfg = config.load(write_config('calendar = "XNYS"\n' + GOOD_JOB.replace(
        '["/usr/bin/true"]', f'["/usr/bin/true", {_toml(odd)}]') +
        f"environment = {{ ODD = {_toml(odd)} }}\n"))
    job = cfg.job("signal")
    assert job.command[1] == odd and dict(job.environment)["ODD"] == odd


def test_missing_config_file_hints_at_config_and_environment(tmp_path):
    [line] = problems_of(tmp_path / "nope.toml")
    assert "no such file" in line and "--config" in line and "MARKET_TIMERS_CONFIG" in line


# --- issue 9: bounded durations, one problem per value with the right kind of example --------

@pytest.mark.parametrize("offset", ["+24h", "-24h", "+30h", "-100000h", "99999999h",
                                    "+23h60min", "9" * 5000 + "s"])
def test_offset_beyond_a_day_is_refused(write_config, offset):
    path = write_config('calendar = "XNYS"\n' + GOOD_JOB.replace('"-15min"', f'"{offset}"'))
    [line] = problems_of(path)
    assert "job.signal.offset:" in line and "23h59min59s" in line


@pytest.mark.parametrize("offset,seconds", [("+23h59min59s", 86399), ("-23h59min59s", -86399)])
def test_offset_up_to_a_day_is_accepted(write_config, offset, seconds):
    path = write_config('calendar = "XNYS"\n' + GOOD_JOB.replace('"-15min"', f'"{offset}"'))
    assert config.load(path).job("signal").offset == seconds


@pytest.mark.parametrize("key,value", [("timeout", '"99999999h"'), ("timeout", '"25h"'),
                                       ("grace", '"25h"'), ("watchdog", '"25h"'),
                                       ("timeout", '"' + "9" * 30 + 'h"')])
def test_duration_beyond_its_range_is_refused(write_config, key, value):
    path = write_config('calendar = "XNYS"\n' + GOOD_JOB + f"{key} = {value}\n")
    found = problems_of(path)
    assert len(found) == 1 and f"job.signal.{key}: must be at most" in found[0], found


def test_watchdog_not_shorter_than_timeout_is_refused(write_config):
    path = write_config('calendar = "XNYS"\n' + GOOD_JOB + 'timeout = "1min"\nwatchdog = "2min"\n')
    [line] = problems_of(path)
    assert "job.signal.watchdog:" in line and "timeout" in line


@pytest.mark.parametrize("key", ["grace", "timeout", "watchdog"])
@pytest.mark.parametrize("value", ["0", "5", "60", '"5"', '"-5min"', "true", "1.5"])
def test_bad_duration_is_one_problem_with_a_duration_example(write_config, key, value):
    if key == "watchdog" and value == "true":
        value = '"on"'
    path = write_config('calendar = "XNYS"\n' + GOOD_JOB + f"{key} = {value}\n")
    found = problems_of(path)
    assert len(found) == 1, found
    assert f"job.signal.{key}:" in found[0]
    assert "-15min" not in found[0] and "signed" not in found[0], found[0]
    assert '"90s"' in found[0] or '"5min"' in found[0] or "more than zero" in found[0], found[0]


def test_integer_zero_watchdog_is_not_off(write_config):
    path = write_config('calendar = "XNYS"\n' + GOOD_JOB + "watchdog = 0\n")
    [line] = problems_of(path)
    assert "job.signal.watchdog:" in line and '"off"' in line


@pytest.mark.parametrize("value", ['"off"', "false"])
def test_watchdog_off_is_accepted(write_config, value):
    cfg = config.load(write_config('calendar = "XNYS"\n' + GOOD_JOB + f"watchdog = {value}\n"))
    assert cfg.job("signal").watchdog is None


@pytest.mark.parametrize("value", ["15", '"15"', "-15"])
def test_bad_offset_is_one_problem_with_a_signed_example(write_config, value):
    path = write_config('calendar = "XNYS"\n' + GOOD_JOB.replace('"-15min"', value))
    [line] = problems_of(path)
    assert "job.signal.offset:" in line and '"-15min"' in line


@pytest.mark.parametrize("minutes", ["1440", "99999999"])
def test_digest_offset_beyond_a_day_is_refused(write_config, minutes):
    """The digest is a derived job: its offset (alerts.digest_offset_minutes) is bounded too."""
    path = write_config('calendar = "XNYS"\n' + GOOD_JOB + f"""
[alerts]
digest_offset_minutes = {minutes}
[alerts.email]
host = "127.0.0.1"
from = "market-timers@example.org"
to = ["ops@example.org"]
""")
    [line] = problems_of(path)
    assert "alerts.digest_offset_minutes: must be at most 1439" in line


def test_config_load_never_imports_the_calendars(write_config):
    """The dependency runs one way: calendar_checks -> config, never config -> calendars (the
    hot-path commands load a config without exchange_calendars; no import cycle)."""
    import subprocess
    import sys

    path = write_config('calendar = "XNYS"\n' + GOOD_JOB)
    code = ("import sys, market_timers.config.loader as c; c.load(sys.argv[1]); "
            "print(sorted(m for m in sys.modules if 'calendars' in m or 'calendar_' in m))")
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("name", ["BROKER_API_KEY", "IB_PASSWORD", "SLACK_TOKEN", "AWS_SECRET",
                                  "AWS_SECRET_ACCESS_KEY", "PRIVATE_KEY"])
def test_a_secret_in_a_jobs_environment_is_refused_without_showing_it(write_config, name):
    path = write_config('calendar = "XNYS"\n[[job]]\nname = "orders"\nevent = "close"\n'
                        f'command = ["/bin/true"]\nenvironment = {{ {name} = "s3cr3t-v4lue" }}\n')
    found = problems_of(path)
    assert any(f"job.orders.environment.{name}: looks like a secret" in line
               and "credentials" in line for line in found), found
    assert not any("s3cr3t-v4lue" in line for line in found)


@pytest.mark.parametrize("name", ["BROKER", "KEYBOARD", "MONKEY_PATCH", "PASS_THROUGH"])
def test_ordinary_environment_names_are_accepted(write_config, name):
    path = write_config('calendar = "XNYS"\n[[job]]\nname = "orders"\nevent = "close"\n'
                        f'command = ["/bin/true"]\nenvironment = {{ {name} = "paper" }}\n')
    assert config.load(path).job("orders").environment == ((name, "paper"),)


def test_a_problem_of_a_job_gives_the_line_of_its_key(write_config):
    """`FILE:LINE: job.closing.offset: ...`: an editor jumps there (issue 42)."""
    path = write_config('calendar = "XNYS"\n' + GOOD_JOB + GOOD_JOB.replace('"signal"', '"closing"')
                        .replace('"-15min"', '"-15"') + "[job.sessions]\nperiod = \"fortnight\"\n")
    text = path.read_text().splitlines()
    found = problems_of(path)
    offset = next(x for x in found if "job.closing.offset:" in x)
    line = int(offset.split(":")[1])
    assert text[line - 1].startswith("offset = \"-15\""), (offset, text)
    rule = next(x for x in found if "job.closing.sessions" in x)
    assert text[int(rule.split(":")[1]) - 1] == "[job.sessions]", (rule, text)
    top = write_config('calendar = "XNYS"\nhorizn = 5\n' + GOOD_JOB)
    assert problems_of(top)[0].startswith(f"{top}: horizn: ")  # no line for the rest (yet)
