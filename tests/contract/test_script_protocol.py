"""The scripts' calling convention is written down once, in ledger_bus/store/lua/protocol.json,
and held here: each script's header names its KEYS and ARGV where the description puts them and
returns the kinds it lists; the Python store builds each script's KEYS (store/redis/keys.py, a
builder per script) and reads each reply (store/redis/replies.py, a parser per script) as it
says. The Go and TypeScript SDKs hold their builders and parsers to the same file in their own
tests (go/store/redisstore/protocol_test.go, typescript/test/protocol.test.ts), from the copies they
carry, which tests/contract/test_go_lua.py and the TypeScript package's tests hold to it."""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ledger_bus.model.errors import UnexpectedReply
from ledger_bus.store.redis import replies
from ledger_bus.store.redis.keys import Keys

LUA = Path(__file__).resolve().parents[2] / "ledger_bus" / "store" / "lua"
PROTOCOL: dict[str, Any] = json.loads((LUA / "protocol.json").read_text("utf-8"))
SCRIPTS: dict[str, dict[str, Any]] = PROTOCOL["scripts"]
FAMILIES: dict[str, str] = PROTOCOL["keys"]

# What each placeholder of a key's template, or each builder's parameter, is in these tests;
# a starred key is one per item of its list.
SAMPLE: dict[str, Any] = {
    "prefix": "lb",
    "session": "S1",
    "stream": "run-r1",
    "sha256": "ab" * 32,
    "token": "t0k",
    "name": "run-r1",
    "group": "g1",
    # the placeholder's rule in the description, computed here
    "bucket": zlib.crc32(b"S1") % 64,
    "streams": ["a", "b"],
    "groups": ["g1", "g2"],
    "idempotency_streams": ["a", "b", "gone"],
    "artifacts": ["cd" * 32, "ef" * 32],
}
LISTS = {
    "stream": "streams",
    "group_dead_letters": "groups",
    "idempotency": "idempotency_streams",
    "artifact": "artifacts",
}
ITEM = {
    "streams": "stream",
    "groups": "group",
    "idempotency_streams": "stream",
    "artifacts": "sha256",
}


def placeholders(template: str) -> list[str]:
    return re.findall(r"<(\w+)>", template)


def render(family: str, **given: Any) -> str:
    """The key `family` names, its placeholders the sample's but for those `given`."""
    values = {**SAMPLE, **given}
    key = FAMILIES[family]
    for name in placeholders(key):
        value = values[name]
        key = key.replace(f"<{name}>", f"{value:02d}" if isinstance(value, int) else value)
    return key


def described_keys(entries: list[str]) -> list[str]:
    keys: list[str] = []
    for entry in entries:
        family = entry.removesuffix("*")
        if entry.endswith("*"):
            item = ITEM[LISTS[family]]
            keys += [render(family, **{item: each}) for each in SAMPLE[LISTS[family]]]
        else:
            keys.append(render(family))
    return keys


def test_every_script_is_described_and_every_description_a_script() -> None:
    assert set(SCRIPTS) == {p.stem for p in LUA.glob("*.lua")}


def test_every_key_family_is_built_by_the_python_store_as_its_template_says() -> None:
    keys = Keys(SAMPLE["prefix"])
    for family, template in FAMILIES.items():
        args = [SAMPLE[name] for name in placeholders(template) if name != "prefix"]
        assert getattr(keys, family)(*args) == render(family), family


def _header(script: str) -> str:
    lines = (LUA / f"{script}.lua").read_text("utf-8").splitlines()
    return "\n".join(
        line for line in lines[: next(i for i, s in enumerate(lines) if not s.startswith("--"))]
    )


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_the_scripts_header_puts_its_keys_and_arguments_where_the_description_does(
    script: str,
) -> None:
    described = SCRIPTS[script]
    header = _header(script)
    # "KEYS[3]  lb:{S}:s:<stream>": the key at a fixed place, as the header writes it.
    named = re.findall(r"(?:^--\s*|\s{2,})KEYS\[(\d+)\]\s+(\S+)", header, re.MULTILINE)
    order = [*described["keys"], *described.get("optional_keys", [])]
    for at, template in named:
        entry = order[int(at) - 1]
        assert not entry.endswith("*"), f"{script}.lua: KEYS[{at}] is one of many, {entry}"
        wanted = FAMILIES[entry].replace("<prefix>", "lb").replace("<session>", "S")
        assert template == wanted.replace("<bucket>", "NN"), f"{script}.lua: KEYS[{at}]"
    fixed = next((i for i, a in enumerate(described["argv"]) if a.endswith("*")), None)
    fixed = len(described["argv"]) if fixed is None else fixed
    places = re.findall(r"(?:^--\s*|\s{2,})ARGV\[(\d+)\]\s", header, re.MULTILINE)
    assert sorted({int(at) for at in places}) == list(range(1, fixed + 1)), script


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_the_script_returns_the_kinds_the_description_lists(script: str) -> None:
    body = (LUA / f"{script}.lua").read_text("utf-8")
    body = "\n".join(line for line in body.splitlines() if not line.lstrip().startswith("--"))
    kinds = set(re.findall(r"(?:return\s*\{\s*|reply\(\s*)'(\w+)'", body))
    reply = SCRIPTS[script]["reply"]
    assert kinds == (set(reply) if isinstance(reply, dict) else set())


# -- the Python store's key builders --------------------------------------------------------


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_the_python_store_builds_the_scripts_keys_as_described(script: str) -> None:
    keys = Keys(SAMPLE["prefix"])
    builder: Callable[..., list[str]] = getattr(keys, f"{script}_keys")
    args = {name: SAMPLE[name] for name in inspect.signature(builder).parameters}
    assert builder(**args) == described_keys(SCRIPTS[script]["keys"])
    if "optional_keys" in SCRIPTS[script]:
        made = keys.artifact_keys(SAMPLE["session"], SAMPLE["artifacts"])
        assert made == described_keys(SCRIPTS[script]["optional_keys"])


# -- the Python store's reply parsers -------------------------------------------------------


def sample_reply(kind: str, fields: list[list[str]]) -> tuple[list[object], dict[str, object]]:
    """A reply of `kind` as redis-py gives it (text as bytes), and the fields it holds."""
    values: dict[str, object] = {
        name: 11 + at if kind_of == "int" else f"{name}-{at}"
        for at, (name, kind_of) in enumerate(fields)
    }
    raw = [v.encode() if isinstance(v, str) else v for v in values.values()]
    return [kind.encode(), *raw], values


def _parser(script: str) -> Callable[[object], Any]:
    return getattr(replies, f"{script}_reply")  # type: ignore[no-any-return]


TABLES = sorted(s for s, d in SCRIPTS.items() if isinstance(d["reply"], dict))


@pytest.mark.parametrize("script", TABLES)
def test_each_kind_of_reply_is_read_with_the_fields_the_description_names(script: str) -> None:
    parse = _parser(script)
    for kind, fields in SCRIPTS[script]["reply"].items():
        raw, values = sample_reply(kind, fields)
        parsed = parse(raw)
        assert parsed.kind == kind, (script, kind)
        got = {f.name: getattr(parsed, f.name) for f in dataclasses.fields(parsed)}
        assert got == values, (script, kind)


@pytest.mark.parametrize("script", TABLES)
def test_a_reply_unlike_the_description_is_unexpected(script: str) -> None:
    parse = _parser(script)
    odd: list[object] = [[b"nosuchkind"], [], b"ok", None]
    for kind, fields in SCRIPTS[script]["reply"].items():
        raw, _ = sample_reply(kind, fields)
        odd += [raw[:-1] if fields else [*raw, 1], [*raw, b"more"]]
        for at, (_, kind_of) in enumerate(fields, start=1):
            wrong = [*raw]
            wrong[at] = b"12" if kind_of == "int" else 12
            odd.append(wrong)
    for reply in odd:
        with pytest.raises(UnexpectedReply):
            parse(reply)


@pytest.mark.parametrize("script", sorted(set(SCRIPTS) - set(TABLES)))
def test_each_reply_of_one_value_or_a_list_is_read_as_described(script: str) -> None:
    parse, shape = _parser(script), SCRIPTS[script]["reply"]
    good: list[tuple[object, object]]
    bad: list[object]
    if shape == "flag":
        good, bad = [(1, True), (0, False)], [2, -1, b"1", [1], None]
    elif shape == "integer":
        good, bad = [(0, 0), (1, 1), (7, 7)], [-1, b"7", [7], None]
    elif shape == "names":
        good, bad = [([], []), ([b"a", b"b"], ["a", "b"])], [b"a", [1], None]
    else:
        assert shape == "entries", f"{script}: a reply of no shape the tests know: {shape}"
        entry = [b"1-0", [b"s", b"run-r1", b"v", b"1"]]
        read = (b"1-0", {b"s": b"run-r1", b"v": b"1"})
        good = [([], []), ([entry], [read])]
        bad = [[[b"1-0"]], [[b"1-0", [b"s"]]], [[1, []]], b"x", None]
    for raw, value in good:
        assert parse(raw) == value, (script, raw)
    for raw in bad:
        with pytest.raises(UnexpectedReply):
            parse(raw)
