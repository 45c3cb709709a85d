"""Names with a trailing newline (issue 41): `$` matches before a final newline, so "orders\n"
passed the checks and failed later with a traceback; each is refused, naming file, key, value."""

from __future__ import annotations

import json

import pytest

from market_timers.config import loader as config
from market_timers.schema.problems import ConfigError

JOB = ('calendar = "XNYS"\n[[job]]\nname = {name}\nevent = "close"\noffset = "-15min"\n'
       'command = ["/usr/bin/true"]\n')


def problems(write_config, text: str) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        config.load(write_config(text))
    return exc.value.problems.lines()


@pytest.mark.parametrize(("extra", "name", "key"), [
    ("", json.dumps("orders\n"), "job[0].name:"),
    ('environment = { "X\\n" = "1" }\n', '"orders"', "job.orders.environment.'X\\n':"),
    ('[cluster]\nnode = "ny4-a\\n"\n', '"orders"', "cluster.node:"),
    ('[[events.incident]]\nname = "gw\\n"\nopen = ["a"]\nclose = ["b"]\n', '"orders"',
     "events.incident[0].name:"),
])
def test_a_trailing_newline_is_refused_cleanly(write_config, extra, name, key):
    text = JOB.format(name=name)
    if extra.startswith("["):
        text += extra
    else:
        text = text.replace('offset = "-15min"\n', "" if extra.startswith("at") else
                            'offset = "-15min"\n').replace('event = "close"\n', "" if
                                                           extra.startswith("at") else
                                                           'event = "close"\n') + extra
    lines = problems(write_config, text)
    assert any(key in line for line in lines), lines
    assert all("\n" not in line for line in lines), lines  # one line each, the name shown
