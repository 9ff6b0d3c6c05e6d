"""Property tests over hostile input: whatever arrives through the API or the command line (deep
nesting, lone surrogates, bytes that are not UTF-8, control characters), the answer is a
documented error or a whole append, never a traceback and never a partial write."""

from __future__ import annotations

import io
import json
import math
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

import ledger_bus as lb
from ledger_bus.cli import main
from ledger_bus.model.batch import Limits, _all_given_fields, _given_fields
from ledger_bus.model.events import (
    DEFAULTS,
    event_adapter,
    event_fields,
    validate_given,
)
from ledger_bus.model.vocabulary import EVENT_TYPES, RESERVED_FIELDS
from ledger_bus.store.base import EventStore
from ledger_bus.store.memory import MemoryStore
from ledger_bus.store.redis import RedisStore
from tests.support.helpers import redis_client
from tests.support.snapshot import whole_state

SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# Text that is fine, and text that is not: lone surrogates, C0 and C1 controls, braces, spaces.
hostile_char = st.one_of(
    st.characters(categories=["Cs"]),
    st.characters(min_codepoint=0x80, max_codepoint=0x9F),
    st.characters(max_codepoint=0x1F),
    st.sampled_from(["{", "}", " ", "\x7f", "\u2028", "é", "😀"]),
)
text = st.one_of(
    st.text(min_size=1, max_size=12),
    st.lists(st.one_of(hostile_char, st.characters()), min_size=0, max_size=6).map("".join),
)
name = st.one_of(st.from_regex(r"[a-z][a-z0-9_.-]{0,11}", fullmatch=True), text)


def nested(levels: int, leaf: Any) -> Any:
    value = leaf
    for level in range(levels):
        value = {"k": value} if level % 2 else [value]
    return value


leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**60), max_value=2**60),
    st.floats(allow_nan=True, allow_infinity=True),
    text,
)
json_value = st.one_of(
    st.recursive(
        leaf,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
        max_leaves=8,
    ),
    st.builds(nested, st.integers(min_value=100, max_value=3000), leaf),
)


@st.composite
def event(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["message", "tool_call", "tool_result", "mutation", "other"]))
    out: dict[str, Any] = {"type": kind, "agent": draw(name)}
    if kind == "message":
        out["body"] = draw(st.one_of(text, json_value))
    elif kind in ("tool_call", "tool_result"):
        out.update(tool=draw(name), attempt_id=draw(name))
        if kind == "tool_call":
            out["args"] = draw(st.dictionaries(text, json_value, max_size=2))
        else:
            out.update(status=draw(st.sampled_from(["ok", "error", "maybe"])))
            out["result"] = draw(json_value)
    else:
        out["kind"] = draw(name)
        out.update(draw(st.dictionaries(text, json_value, max_size=2)))
    if draw(st.booleans()):
        out["run_id"] = draw(name)
    return out


def fingerprint(store: EventStore) -> Any:
    """Everything the store holds, in a form that shows any write (the indexes included)."""
    return whole_state(store)


@pytest.fixture(params=["memory", "redis", "sqlite"])
def target(request: pytest.FixtureRequest) -> EventStore:
    return request.getfixturevalue(f"{request.param}_store")  # type: ignore[no-any-return]


def appended_or_refused(
    target: EventStore, session: Any, stream: Any, append_id: Any, events: list[dict[str, Any]]
) -> lb.AppendResult | None:
    """The append's result; None when it was refused, as InvalidInput (InvalidEvent among them)
    or as an append id drawn again with other events, having written nothing."""
    before = fingerprint(target)
    try:
        return target.append(lb.StreamId(session, stream), lb.ANY, append_id, events)
    except (lb.InvalidInput, lb.IdempotencyConflict):
        assert fingerprint(target) == before, "a refused append wrote something"
        return None


@SETTINGS
@given(session=name, stream=name, append_id=text, events=st.lists(event(), min_size=1, max_size=3))
def test_an_append_of_anything_writes_it_whole_or_refuses_it_with_a_ledger_error(
    target: EventStore, session: str, stream: str, append_id: str, events: list[dict[str, Any]]
) -> None:
    result = appended_or_refused(target, session, stream, append_id, events)
    if result is None or result.deduplicated:
        return
    read = target.read_stream(lb.StreamId(session, stream), after_version=result.first_version - 1)
    assert len(read) == len(events) == result.last_version - result.first_version + 1
    assert [e.fields["type"] for e in read] == [e["type"] for e in events]


FIELDS = ["agent", "event_id", "run_id", "step_id", "attempt_id", "parents", "tool", "args"]
FIELDS += ["status", "result", "body", "kind", "type"]
odd_value = st.one_of(
    st.none(),
    st.integers(),
    st.sampled_from(["", "ok", "x\x01", "error"]),
    st.lists(st.sampled_from(["p", "", 1]), max_size=2),
    st.dictionaries(st.sampled_from(["k", "type"]), st.integers(), max_size=1),
)
VALID = {
    "message": {"type": "message", "agent": "a", "body": "hi"},
    "tool_call": {"type": "tool_call", "agent": "a", "tool": "t", "attempt_id": "1"},
    "tool_result": {"type": "tool_result", "agent": "a", "tool": "t", "attempt_id": "1"},
    "mutation": {"type": "mutation", "agent": "a", "kind": "k"},
}
VALID["tool_result"]["status"] = "ok"


@SETTINGS
@given(
    kind=st.sampled_from(sorted(VALID)),
    changes=st.dictionaries(st.sampled_from(FIELDS), odd_value, max_size=2),
    drop=st.sets(st.sampled_from(FIELDS), max_size=1),
)
def test_the_dict_validator_accepts_and_refuses_what_the_models_do(
    kind: str, changes: dict[str, Any], drop: set[str]
) -> None:
    """batch.py validates a dict without making the model; the two must never disagree."""
    raw = {name: value for name, value in {**VALID[kind], **changes}.items() if name not in drop}
    if raw.get("type") not in EVENT_TYPES:
        return  # refused by name before either is asked
    if raw["type"] == "mutation" and RESERVED_FIELDS.intersection(raw):
        return  # likewise
    try:
        model = event_adapter.validate_python(raw)
    except ValidationError as err:
        with pytest.raises(ValidationError) as raised:
            validate_given(raw)
        ours, theirs = raised.value.errors()[0], err.errors()[0]
        assert (ours["type"], ours["loc"]) == (theirs["type"], theirs["loc"])
        return
    given = validate_given(raw)
    assert given.keys() == raw.keys()
    # What the append keeps (defaults dropped) is what the model gives.
    assert _given_fields(0, raw) == event_fields(model)


odd_event = st.builds(
    lambda kind, changes, drop: {
        name: value for name, value in {**VALID[kind], **changes}.items() if name not in drop
    },
    st.sampled_from(sorted(VALID)),
    st.dictionaries(st.sampled_from([*FIELDS, "version"]), odd_value, max_size=2),
    st.sets(st.sampled_from(FIELDS), max_size=1),
)


def _event_by_event(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each event's fields as `_given_fields` gives them; at the first event the vocabulary
    refuses, an earlier event whose values JSON cannot carry (an integer past 2**53) is the
    first fault instead, as the ledger names the first event at fault."""
    fields: list[dict[str, Any]] = []
    for index, raw in enumerate(events):
        try:
            fields.append(_given_fields(index, raw))
        except lb.InvalidEvent:
            for earlier, data in enumerate(fields):
                try:
                    lb.canonical_bytes(data)
                except lb.JsonValueError as err:
                    raise lb.InvalidEvent(err.message, index=earlier, field=err.where) from None
            raise
    return fields


def _first_fault(fields: Any) -> tuple[Any, ...] | list[dict[str, Any]]:
    try:
        return list(fields())
    except lb.InvalidEvent as err:
        return (err.index, err.field, str(err))


@SETTINGS
@given(events=st.lists(odd_event | st.sampled_from(list(VALID.values())), min_size=1, max_size=6))
@example(events=[VALID["message"], {**VALID["mutation"], "version": 1}])  # valid, but refused
# a value JSON cannot carry, then an event the vocabulary refuses: the first is the first fault
@example(events=[{**VALID["mutation"], "tool": {"k": 2**53}}, {**VALID["message"], "agent": None}])
def test_a_list_validated_in_one_call_gives_what_event_by_event_gives(
    events: list[dict[str, Any]],
) -> None:
    """A list of dicts is validated in one call; its fields, or its first fault, are those of
    the events validated one by one."""
    one_by_one = _first_fault(lambda: _event_by_event(events))
    assert _first_fault(lambda: _all_given_fields(events, Limits())) == one_by_one
    # A tuple of the same events takes the path event by event, to the same answer.
    assert _first_fault(lambda: _all_given_fields(tuple(events), Limits())) == one_by_one


# -- the command line, run in this process through its entry point --------------------------------


@contextmanager
def command_line(url: str, prefix: str, stdin: bytes) -> Iterator[tuple[io.BytesIO, io.BytesIO]]:
    saved = sys.stdin, sys.stdout, sys.stderr, dict(os.environ)
    out, err = io.BytesIO(), io.BytesIO()
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8")
    sys.stdout = io.TextIOWrapper(out, encoding="utf-8", write_through=True)
    # As Python sets up a process's stderr: what cannot be encoded is escaped, not an error.
    sys.stderr = io.TextIOWrapper(
        err, encoding="utf-8", errors="backslashreplace", write_through=True
    )
    os.environ.update({"LEDGER_BUS_URL": url, "LEDGER_BUS_PREFIX": prefix})
    try:
        yield out, err
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved[:3]
        os.environ.clear()
        os.environ.update(saved[3])


def run_main(url: str, prefix: str, args: list[str], stdin: bytes) -> tuple[int, bytes, bytes]:
    with command_line(url, prefix, stdin) as (out, err):
        saved_argv = sys.argv
        sys.argv = ["ledger-bus", *args]
        try:
            main()
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else 1
        finally:
            sys.argv = saved_argv
        return code, out.getvalue(), err.getvalue()


def from_argv(arg: str) -> bool:
    """Whether a process can be handed `arg`: argv is bytes without NUL (it ends a C string),
    which Python decodes with surrogateescape; other lone surrogates cannot arrive that way."""
    try:
        return b"\x00" not in os.fsencode(arg)
    except UnicodeEncodeError:
        return False


# An argument as a shell hands it over: any bytes, decoded as Python decodes argv.
argument = st.one_of(name, st.binary(min_size=1, max_size=8).map(os.fsdecode)).filter(from_argv)


def stdin_line(value: Any) -> bytes:
    try:
        return json.dumps(value, ensure_ascii=True).encode()
    except (ValueError, RecursionError):
        return b"{"


stdin = st.one_of(
    st.lists(event(), min_size=1, max_size=3).map(
        lambda events: b"\n".join(stdin_line(e) for e in events)
    ),
    st.binary(max_size=64),
    st.integers(min_value=1, max_value=200_000).map(lambda n: b"[" * n + b"]" * n),
)


@SETTINGS
@given(
    command=st.sampled_from(["append", "read", "scan", "tail", "export", "unresolved"]),
    args=st.lists(argument, min_size=1, max_size=3),
    data=stdin,
)
def test_the_command_line_answers_anything_with_one_line_and_a_documented_code(
    redis_store: EventStore, tmp_path: Path, command: str, args: list[str], data: bytes
) -> None:
    workdir = tmp_path / "cwd"
    workdir.mkdir(exist_ok=True)
    assert isinstance(redis_store, RedisStore)
    url = (
        f"redis://127.0.0.1:{redis_client(redis_store).connection_pool.connection_kwargs['port']}/0"
    )
    if command == "append":
        args = [*[*args[:2], "x", "x"][:2], "--append-id", args[-1]]
    before = fingerprint(redis_store)
    here = os.getcwd()
    os.chdir(workdir)  # where `export SESSION FILE` may write
    try:
        code, out, err = run_main(url, redis_store.keys.prefix, [command, *args], data)
    finally:
        os.chdir(here)

    assert code in (0, 2, 4, 6), (code, err)  # 4: the same ids drawn again, other events
    assert b"Traceback" not in err
    if code:
        lines = err.decode("utf-8").splitlines()
        assert len(lines) == 1, lines
        assert lines[0].startswith("ledger-bus: ")
        assert fingerprint(redis_store) == before, "a refused command wrote something"
    elif not any(arg.startswith("-") for arg in args):  # --help and the like print text
        for line in out.decode("utf-8").splitlines():
            assert isinstance(json.loads(line), dict)


def test_floats_that_json_cannot_carry_are_refused() -> None:
    store = MemoryStore()
    for bad in (math.nan, math.inf, -math.inf):
        with pytest.raises(lb.InvalidEvent, match="not a JSON number"):
            store.append(
                lb.StreamId("f", "m"),
                lb.ANY,
                "a",
                [{"type": "mutation", "agent": "a", "kind": "k", "x": bad}],
            )


# Values of the wrong type where the ledger wants text or whole numbers: bytes, numbers too big
# for JSON to carry exactly, booleans, floats, and what a loose parser would turn into a string.
wrong = st.one_of(
    st.binary(max_size=4),
    st.integers(min_value=2**53, max_value=2**80),
    st.integers(max_value=-(2**53)),
    st.booleans(),
    st.floats(allow_nan=True),
    st.just(b"x"),
    st.just(bytearray(b"ok")),
    st.integers(min_value=0, max_value=9),
)
field_value = st.one_of(wrong, name, json_value)
STRICT_FIELDS = ["agent", "body", "tool", "kind", "attempt_id", "run_id", "step_id", "event_id"]


@st.composite
def loose_event(draw: st.DrawFn) -> dict[str, Any]:
    """A valid event, one to three of whose fields (or a mutation's data) hold odd values."""
    kind = draw(st.sampled_from(sorted(VALID)))
    out: dict[str, Any] = dict(VALID[kind])
    for field in draw(st.lists(st.sampled_from(STRICT_FIELDS), min_size=1, max_size=3)):
        out[field] = draw(field_value)
    if kind == "mutation" and draw(st.booleans()):
        out[draw(st.sampled_from(["data", "n", "blob"]))] = draw(field_value)
    if draw(st.booleans()):
        out["parents"] = draw(st.lists(field_value, max_size=2))
    return out


def as_given(event: dict[str, Any], recorded: dict[str, Any]) -> dict[str, Any]:
    """The recorded fields, without those the ledger fills in when the event gave none (an
    `event_id` of None is none: the ledger makes one)."""
    drop = {"event_id"} if event.get("event_id") is None else set()
    return {k: v for k, v in recorded.items() if k not in drop}


@settings(
    max_examples=2000,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    stream=name,
    append_id=st.one_of(text, wrong),
    events=st.lists(loose_event(), min_size=1, max_size=3),
)
def test_odd_types_are_refused_never_coerced_and_a_refusal_writes_nothing(
    target: EventStore, stream: Any, append_id: Any, events: list[dict[str, Any]]
) -> None:
    # Given an append whose fields may hold bytes, huge or wrongly typed numbers, odd names
    # When it is appended, a refusal being InvalidInput (InvalidEvent among them) that wrote nothing
    result = appended_or_refused(target, "fuzz", stream, append_id, events)
    # Then what is taken is read back exactly as it was given: no bytes became text
    if result is None or result.deduplicated:
        return
    read = target.read_stream(lb.StreamId("fuzz", stream), after_version=result.first_version - 1)
    given = [
        {k: v for k, v in e.items() if k not in DEFAULTS[e["type"]] or DEFAULTS[e["type"]][k] != v}
        for e in events
    ]
    assert [as_given(e, r.fields) for e, r in zip(events, read, strict=True)] == given
