"""An operator's halt, pause and resume run by root (issue 41 item 4): root's service takes a
request only from root or a member of operator_group, only a regular file of one link, small and
well formed; it runs the command as root's would and answers its owner alone; an operator's
command line prints that answer, or says that no one took the request."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from types import SimpleNamespace

import pytest
from tests.controls.test_halt import systemd  # noqa: F401 (a fixture)

from market_timers.cli import controlrequests
from market_timers.controls import requests

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give files away")
NOBODY, DAEMON = 65534, 1  # nobody's primary group is nogroup; daemon is not in it
HALT = {"command": "halt", "fields": {"reason": "desk halt", "job": None}}
CONFIG = """calendar = "XNYS"
operator_group = "nogroup"
[[job]]
name = "closing-orders"
event = "close"
offset = "-10min"
command = ["/usr/bin/true"]
orders = true
"""


@pytest.fixture
def root(tmp_path):
    top = tmp_path / "requests"
    for name, mode in (("in", 0o1733), ("out", 0o755)):
        (top / name).mkdir(parents=True)
        os.chmod(top / name, mode)
    return str(top)


def put(root: str, body, uid: int = 0, name: str = "0" * 32 + ".json") -> str:
    path = os.path.join(requests.inbox(root), name)
    with open(path, "wb") as f:
        f.write(body if isinstance(body, bytes) else json.dumps(body).encode())
    os.chown(path, uid, -1)
    return path


def refused(path: str, group: str = "nogroup") -> str:
    with pytest.raises(requests.Refused) as e:
        requests.read(path, group)
    return str(e.value)


@root_only
def test_a_members_request_is_taken_and_its_owner_named(root):
    got = requests.read(put(root, HALT, NOBODY), "nogroup")
    assert (got.uid, got.user, got.command) == (NOBODY, "nobody", "halt")
    assert got.fields == {"job": None, "group": None, "all_jobs": False, "reason": "desk halt",
                          "json": False}


@root_only
def test_a_request_of_a_user_outside_the_operator_group_is_refused(root):
    why = refused(put(root, HALT, DAEMON))
    assert "uid 1" in why and "neither root nor a member" in why and "'nogroup'" in why


def test_what_is_not_a_regular_file_of_one_link_is_refused(root, tmp_path):
    link = os.path.join(requests.inbox(root), "1" * 32 + ".json")
    os.symlink(tmp_path / "elsewhere", link)
    assert "not a regular file" in refused(link)
    fifo = os.path.join(requests.inbox(root), "2" * 32 + ".json")
    os.mkfifo(fifo)
    assert "not a regular file" in refused(fifo)
    directory = os.path.join(requests.inbox(root), "3" * 32 + ".json")
    os.mkdir(directory)
    assert "not a regular file" in refused(directory)
    path = put(root, HALT)
    os.link(path, tmp_path / "second-name")
    assert "one link" in refused(path)


def test_a_request_too_big_or_badly_named_is_refused(root):
    too_big = put(root, {"command": "halt", "fields": {"reason": "x" * 9000}})
    assert "too big" in refused(too_big)
    assert "32 hex digits" in refused(put(root, HALT, name="halt.json"))


@pytest.mark.parametrize("body, why", [
    (b"{not json", "not JSON"),
    ({"command": "sync", "fields": {}}, "none of halt, pause, resume"),
    ({"command": "halt", "fields": {"reason": "x", "config": "/tmp/mine.toml"}},
     "halt's fields are"),
    ({"command": "halt", "fields": {"reason": 3}}, "must be a text"),
    ({"command": "halt", "fields": {}}, "halt needs reason"),
    ({"command": "halt", "fields": {"reason": "x", "job": "a", "all_jobs": True}}, "one of"),
    ({"command": "pause", "fields": {"note": "x", "until": "soon", "job": "a"}},
     "must be a date"),
    ({"command": "halt", "fields": {"reason": "x"}, "as": "root"}, "command and fields"),
])
def test_a_malformed_request_is_refused_naming_what(root, body, why):
    assert why in refused(put(root, body))


def run_taker(write_config, root, capsys) -> tuple[str, str]:
    args = SimpleNamespace(config=str(write_config(CONFIG)), now=None)
    assert controlrequests.cmd_take_requests(args, root) == 0
    out = capsys.readouterr()
    return out.out, out.err


@root_only
def test_root_runs_a_members_request_as_its_own_and_answers_the_owner_alone(
        write_config, root, capsys, tmp_path):
    put(root, {"command": "pause", "fields": {"job": "closing-orders", "note": "desk"}}, NOBODY)
    _, log = run_taker(write_config, root, capsys)
    assert os.listdir(requests.inbox(root)) == []
    answer = os.path.join(requests.outbox(root), "0" * 32 + ".json")
    st = os.stat(answer)
    assert (st.st_uid, st.st_mode & 0o777) == (NOBODY, 0o400)
    with open(answer) as f:
        got = json.load(f)
    assert got["status"] == 0 and "paused closing-orders" in got["stdout"], got
    assert "pause for nobody" in log
    with open(tmp_path / "state" / "controls" / "pause-job-closing-orders") as f:
        assert "nobody" in f.read()  # "by": the requester, not root


@root_only
def test_root_refuses_and_logs_a_non_members_request_and_changes_nothing(
        write_config, root, capsys, tmp_path):
    path = put(root, {"command": "pause", "fields": {"job": "closing-orders", "note": "x"}},
               DAEMON)
    _, log = run_taker(write_config, root, capsys)
    assert f"refused {path}" in log and "neither root nor a member" in log
    assert os.listdir(requests.inbox(root)) == [] and os.listdir(requests.outbox(root)) == []
    assert not (tmp_path / "state" / "controls").exists()


def operator(monkeypatch) -> None:
    """This process, seen as an operator on the packaged layout."""
    monkeypatch.setattr(os, "geteuid", lambda: 1234)
    monkeypatch.setattr("market_timers.config.loader.config_path",
                        lambda given=None: "/etc/market-timers/market-timers.toml")


def halt_args(**more):
    return SimpleNamespace(config=None, now=None, job=None, group=None, all_jobs=False,
                           reason="desk halt", json=False, **more)


def test_an_operators_halt_without_a_taker_says_so_and_is_withdrawn(monkeypatch, root, capsys):
    operator(monkeypatch)
    monkeypatch.setattr(controlrequests, "WAIT_SEC", 0.3)
    assert controlrequests.by_request(halt_args(), "halt", root) == 1
    err = capsys.readouterr().err
    assert "is market-controls.path active?" in err and "nothing was done" in err
    assert os.listdir(requests.inbox(root)) == []


def test_an_operators_halt_prints_roots_answer_and_exits_with_its_status(
        monkeypatch, root, capsys):
    operator(monkeypatch)

    def taker():
        while not (names := [n for n in os.listdir(requests.inbox(root))
                             if n.endswith(".json")]):  # not the .tmp it is renamed from
            time.sleep(0.02)
        asked = requests.read(os.path.join(requests.inbox(root), names[0]), "nogroup")
        os.unlink(os.path.join(requests.inbox(root), names[0]))
        requests.answer(asked.id, os.getuid(), 1, f"halted by {asked.fields['reason']}\n",
                        "could not stop x\n", root)

    thread = threading.Thread(target=taker)
    thread.start()
    assert controlrequests.by_request(halt_args(), "halt", root) == 1
    thread.join()
    out = capsys.readouterr()
    assert out.out == "halted by desk halt\n" and out.err == "could not stop x\n"


def test_root_and_other_configs_run_the_command_themselves(monkeypatch, root):
    assert controlrequests.by_request(halt_args(), "halt", root) is None or os.geteuid() != 0
    monkeypatch.setattr(os, "geteuid", lambda: 1234)  # an operator with a config of their own
    assert controlrequests.by_request(SimpleNamespace(config="/tmp/x.toml"), "halt", root) is None


def test_without_the_requests_directory_the_taker_takes_nothing(write_config, tmp_path, capsys):
    args = SimpleNamespace(config=str(write_config(CONFIG)), now=None)
    assert controlrequests.cmd_take_requests(args, str(tmp_path / "none")) == 0
    assert "no requests to take" in capsys.readouterr().err


@root_only
@pytest.mark.usefixtures("systemd")
def test_an_operators_halt_whose_alert_cannot_be_spooled_answers_why(
        write_config, root, capsys, monkeypatch, tmp_path):
    """Seen on the packaged layout: the halt made, its HALT alert never spooled, and nothing said
    why: the child that spools it as the package's user logged into its own copy of the stderr
    that take-requests captures for the answer."""
    from market_timers.alerts import api, privileges
    from market_timers.controls import halt_alerts

    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(tmp_path / "no-credentials"))
    monkeypatch.setattr(halt_alerts, "_package_user_exists", lambda: True)
    monkeypatch.setattr(privileges, "become_service_user", lambda config: True)  # stays root

    def read_only(*args, **kwargs):
        raise OSError(30, "Read-only file system", "/var/spool/market-timers/outbox")

    monkeypatch.setattr(api, "_raise", read_only)
    # as under the command line, no handler of its own: the log goes to stderr (lastResort)
    monkeypatch.setattr(logging.getLogger("market_timers"), "propagate", False)
    put(root, HALT, NOBODY)
    alerts = ('[alerts]\n[alerts.telegram]\nchat_id = "-1"\napi_base = "http://127.0.0.1:9"\n')
    args = SimpleNamespace(config=str(write_config(CONFIG.replace("[[job]]", alerts + "[[job]]"))),
                           now=None)
    assert controlrequests.cmd_take_requests(args, root) == 0
    with open(os.path.join(requests.outbox(root), "0" * 32 + ".json")) as f:
        got = json.load(f)
    assert got["status"] == 0 and "halted order jobs" in got["stdout"], got
    assert "could not raise halt alert" in got["stderr"], got
    assert "Read-only file system" in got["stderr"], got
