"""A plan.json that is not a plan: the deadman's pass and `status` say which file and why."""

from __future__ import annotations

from market_timers.watch import deadman, status

from .conftest import utc


def corrupt(config) -> str:
    config.state_dir.mkdir(parents=True, exist_ok=True)
    path = config.state_dir / "plan.json"
    path.write_text("{not json")
    return str(path)


def test_a_corrupt_plan_json_is_a_pass_error_naming_it(make_config, fake_systemctl, alerts):
    config = make_config()
    path = corrupt(config)
    result = deadman.run_pass(config, utc("2025-11-24T12:00:00Z"), systemctl=fake_systemctl,
                              alert=alerts, env={})
    assert result.failed and alerts.calls == []
    [error] = result.errors
    assert f"{path}: not JSON" in error


def test_status_with_a_corrupt_plan_json_names_it_and_fails(make_config, fake_systemctl, capsys):
    config = make_config()
    path = corrupt(config)
    code = status.command(config, None, False, utc("2025-11-24T12:00:00Z"),
                          systemctl=fake_systemctl)
    err = capsys.readouterr().err
    assert code == 1 and err.startswith(f"market-timers status: {path}: not JSON")
