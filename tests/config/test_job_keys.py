"""A `[[job]]` key is declared once, as its Key row: the row's field is the Job field it fills,
with the Job field's default. These tests fail when a row and the Job dataclass disagree."""

import dataclasses

from market_timers.config import jobs
from market_timers.config.periodic import PERIODIC_KEYS
from market_timers.schema.problems import Problems

NOT_FIELDS = {"enabled"} | PERIODIC_KEYS  # enabled: no Job at all; periodic: Job.periodic
DERIVED = {"periodic"}  # a Job field no single key fills: periodic.py builds it


def _fields():
    return {f.name: f for f in dataclasses.fields(jobs.Job)}


def test_every_key_fills_a_job_field_of_its_default():
    fields = _fields()
    for key in jobs.JOB.keys:
        if key.name in NOT_FIELDS:
            assert key.field not in fields, key.name
            continue
        assert key.field in fields, f"{key.name}: no Job field {key.field}"
        field = fields[key.field]
        if field.default is dataclasses.MISSING:
            assert key.required, f"{key.name}: the Job field has no default, the key one"
        else:
            assert key.default == field.default, (key.name, key.default, field.default)


def test_every_job_field_has_its_key():
    filled = {k.field for k in jobs.JOB.keys if k.name not in NOT_FIELDS}
    assert set(_fields()) - filled == DERIVED


def test_a_job_of_defaults_is_the_job_dataclass_of_defaults():
    problems = Problems()
    job = jobs.parse_job({"name": "a", "command": ["/bin/true"], "event": "open"}, "job[0]",
                         "XNYS", problems)
    assert not problems
    assert job == jobs.Job(name="a", command=("/bin/true",), event="open", calendar="XNYS",
                           lock="a")
