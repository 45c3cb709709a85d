"""The one declaration of a config table (schema/table.py): the texts every table shares."""

from __future__ import annotations

from market_timers.schema.problems import Problems
from market_timers.schema.table import HIDE, Bad, Key, Table
from market_timers.schema.values import flag, whole


def credential(value):
    if value != "name":
        raise Bad("not a name")
    return value


def string(value):
    if not isinstance(value, str):
        raise Bad("required; a string")
    return value


TABLE = Table((
    Key("size", whole(1, 9), 3, "a size"),
    Key("on", flag, False, "on or off"),
    Key("token", credential, "name", "a credential name", secret=True),
    Key("from", str.upper, "A", "where", attr="start"),
    Key("name", string, None, "its name", required=True),
), not_table="must be a table ([t])")


def lines(raw, path="t"):
    problems = Problems("f.toml")
    values = TABLE.parse(raw, path, problems)
    return values, problems.lines()


def test_the_values_of_a_good_table_with_defaults_for_the_absent_keys():
    values, problems = lines({"name": "x", "size": 5, "from": "b"})
    assert problems == []
    assert values == {"size": 5, "on": False, "token": "name", "start": "B", "name": "x"}


def test_unknown_keys_are_named_with_every_known_key_sorted():
    _, problems = lines({"name": "x", "zz": 1, "colour": 2})
    assert problems == ["f.toml: t.colour: unknown key (known: from, name, on, size, token)",
                        "f.toml: t.zz: unknown key (known: from, name, on, size, token)"]


def test_the_known_keys_in_declared_order_when_asked():
    table = Table((Key("b"), Key("a")), sort_known=False)
    problems = Problems("f.toml")
    table.parse({"c": 1}, "", problems)
    assert problems.lines() == ["f.toml: c: unknown key (known: b, a)"]


def test_a_refused_value_is_named_echoed_and_its_default_kept():
    values, problems = lines({"name": "x", "size": "ten", "on": 1})
    assert problems == ["f.toml: t.size: must be a whole number from 1 to 9 (got 'ten')",
                        "f.toml: t.on: must be true or false (got 1)"]
    assert values["size"] == 3 and values["on"] is False


def test_a_secret_is_never_echoed():
    values, problems = lines({"name": "x", "token": "hunter2"})
    assert problems == ["f.toml: t.token: not a name"]
    assert "hunter2" not in "".join(problems) and values["token"] == "name"


def test_a_required_key_that_is_absent_is_refused_by_its_check():
    _, problems = lines({})
    assert problems == ["f.toml: t.name: required; a string (got None)"]


def test_a_value_that_is_not_a_table():
    values, problems = lines(["a"])
    assert values is None
    assert problems == ["f.toml: t: must be a table ([t]) (got ['a'])"]


def test_parts_of_a_value_are_refused_each_at_its_own_path():
    def items(value):
        raise Bad.each([Bad("bad one", at="[0]", shown="a"), Bad("hidden", at="[2]", shown=HIDE)])

    problems = Problems("f.toml")
    values = Table((Key("list", items, ()),)).parse({"list": ["a", "b", "c"]}, "", problems)
    assert problems.lines() == ["f.toml: list[0]: bad one (got 'a')", "f.toml: list[2]: hidden"]
    assert values == {"list": ()}


def test_a_value_error_of_a_check_is_its_reason():
    def duration(value):
        raise ValueError("cannot parse")

    problems = Problems("f.toml")
    Table((Key("grace", duration, 120),)).parse({"grace": "2m"}, "job[0]", problems)
    assert problems.lines() == ["f.toml: job[0].grace: cannot parse (got '2m')"]


def test_a_refused_key_and_a_hint():
    table = Table((Key("a"),), refused={"tz": "no time zones"}, hint=lambda k: "; try a")
    problems = Problems("f.toml")
    table.parse({"tz": "UTC", "b": 1}, "x", problems)
    assert problems.lines() == ["f.toml: x.b: unknown key (known: a); try a",
                                "f.toml: x.tz: no time zones (got 'UTC')"]
