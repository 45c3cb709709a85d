"""Jobs' secrets (issue 27): `credentials = ["broker-api-key"]` on a job loads each from the
credstore with LoadCredential= (tests/render_cases/job_credentials.toml: the unit), and the runner
hands the job its own copy, readable by the job's user only, as $CREDENTIALS_DIRECTORY; names are
checked, each problem naming the file, the key and the value."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.config.test_config import at

from market_timers.config import loader as config
from market_timers.schema.problems import ConfigError

JOB = """
calendar = "XNYS"
[[job]]
name = "orders"
event = "close"
offset = "-10min"
command = ["/usr/bin/true"]
"""


def problems(write_config, line: str) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        config.load(write_config(JOB + line + "\n"))
    return exc.value.problems.lines()


def test_job_credentials_load(write_config):
    cfg = config.load(write_config(JOB + 'credentials = ["broker-api-key", "fix.cert"]\n'))
    assert cfg.job("orders").credentials == ("broker-api-key", "fix.cert")


@pytest.mark.parametrize(("line", "where", "reason", "shown"), [
    ('credentials = "broker-api-key"', "job.orders.credentials:", "array of credential names",
     "(got 'broker-api-key')"),
    ('credentials = ["a/b"]', "job.orders.credentials[0]:", "a file name in /etc/credstore", None),
    ('credentials = ["ok", "sk_live 123=="]', "job.orders.credentials[1]:", "not the secret itself",
     None),
    ('credentials = ["market-timers.cluster-dsn"]', "job.orders.credentials[0]:",
     "the package's own", "(got 'market-timers.cluster-dsn')"),
    ('credentials = ["k", "k"]', "job.orders.credentials[1]:", "twice", "(got 'k')"),
])
def test_bad_job_credentials_name_file_key_and_value(write_config, line, where, reason, shown):
    [problem] = problems(write_config, line)
    assert at(problem, write_config(JOB), where), problem
    assert reason in problem
    if shown:
        assert problem.endswith(shown), problem
    else:  # perhaps the secret itself, pasted: never echoed
        assert "(got" not in problem


def test_a_channel_credential_is_refused_to_a_job(write_config):
    [problem] = problems(write_config, 'credentials = ["tg-token"]\n[alerts.telegram]\n'
                         'chat_id = "1"\ntoken_credential = "tg-token"')
    assert "job.orders.credentials[0]:" in problem and "[alerts.telegram]" in problem


# The runner's hand-over ------------------------------------------------------------------------

JOB_USER = "nobody"


def hand_over(tmp_path: Path, names: str, script: str) -> subprocess.CompletedProcess:
    """The runner's supervisor started as root would be: a CREDENTIALS_DIRECTORY of its own
    (0500, as systemd makes it) and a job run as JOB_USER."""
    creds = tmp_path / "creds"
    creds.mkdir()
    (creds / "broker-api-key").write_text("sk-123\n")
    (creds / "market-timers.cluster-dsn").write_text("postgresql://secret\n")
    for p in creds.iterdir():
        p.chmod(0o400)
    creds.chmod(0o500)
    code = ("import sys\nfrom market_timers.runner import jobuser\n"
            "env = dict(__import__('os').environ)\n"
            "user = jobuser.resolve({k: v for k, v in env.items() if k != 'MARKET_JOB_CREDENTIALS'})\n"
            "sys.exit(jobuser.supervise(['/bin/sh', '-c', sys.argv[1]], "
            "dict(__import__('os').environ), user))\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
           "CREDENTIALS_DIRECTORY": str(creds), "MARKET_JOB_USER": JOB_USER,
           "MARKET_JOB_CREDENTIALS": names}
    return subprocess.run([sys.executable, "-c", code, script], env=env, capture_output=True,
                          text=True, timeout=30)


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to switch users")


@needs_root
def test_the_job_reads_its_credential_as_its_own_user_and_nothing_else(tmp_path):
    proc = hand_over(tmp_path, "broker-api-key", (
        'id -un; cat "$CREDENTIALS_DIRECTORY/broker-api-key"; '
        'stat -c "%U %a" "$CREDENTIALS_DIRECTORY" "$CREDENTIALS_DIRECTORY/broker-api-key"; '
        'ls "$CREDENTIALS_DIRECTORY"; echo "$CREDENTIALS_DIRECTORY"'))
    assert proc.returncode == 0, proc.stderr
    user, secret, mode_dir, mode_file, listing, directory = proc.stdout.splitlines()
    assert (user, secret) == (JOB_USER, "sk-123")
    assert mode_dir == f"{JOB_USER} 500" and mode_file == f"{JOB_USER} 400"
    assert listing == "broker-api-key"  # not the runner's DSN
    assert not Path(directory).exists()  # removed once the job ended


@needs_root
def test_a_credential_gone_after_the_check_fails_the_start_naming_it(tmp_path):
    proc = hand_over(tmp_path, "broker-api-key,missing-key", "echo ran")
    assert proc.returncode == 172 and "ran" not in proc.stdout
    assert "missing-key" in proc.stderr and "LoadCredential" in proc.stderr


def test_an_unreadable_job_credential_is_refused_before_the_claim(tmp_path):
    """resolve() runs before the claim: a run that cannot hand the job its secret takes none
    (systemd 252 starts a unit whose LoadCredential=NAME is in no credstore)."""
    from market_timers.runner import jobuser

    env = {"CREDENTIALS_DIRECTORY": str(tmp_path), "MARKET_JOB_USER": JOB_USER,
           "MARKET_JOB_CREDENTIALS": "broker-api-key"}
    with pytest.raises(jobuser.JobUserError, match="broker-api-key.*/etc/credstore/broker-api-key"):
        jobuser.resolve(env)
    (tmp_path / "broker-api-key").write_text("sk\n")
    jobuser.resolve(env)  # readable: no complaint
