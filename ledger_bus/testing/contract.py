"""The store contract as tests: every rule of CONTRACT.md and spec/ledger-v1.md that a store must
keep, over the public API alone, so that a store written outside this repository runs them too.

Use it from a test module of your own, with a `store` fixture that gives an empty store (a fresh
database, or a fresh key prefix) for each test::

    import pytest
    from ledger_bus.testing.contract import *  # noqa: F403  (the tests, collected by pytest)

    @pytest.fixture
    def store():
        with MyStore(...) as fresh:
            yield fresh

Every backend of this repository runs these (tests/contract/test_contract.py), each sync store and each
asyncio one. Needs pytest (`pip install 'ledger-bus[testing]'`).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

import ledger_bus as lb
from ledger_bus.model.ids import derive_event_id
from ledger_bus.model.records import RecordedEvent
from ledger_bus.store.base import EventStore
from ledger_bus.testing.events import call, msg, result

# The ledger's keys of a JSONL line, first and in this order (CONTRACT.md, the command line).
LEDGER_KEYS = ["session", "stream", "version", "cursor", "type", "agent", "event_id", "recorded_at"]


def snapshot(store: EventStore, session: str) -> list[dict[str, object]]:
    return [e.to_dict() for e in store.scan_session(session)]


REF = lb.StreamId("s1", "run-a")


def test_append_assigns_consecutive_versions_and_returns_the_last_cursor(store: EventStore) -> None:
    first = store.append(REF, 0, "a1", [msg("one"), msg("two")])
    second = store.append(REF, 2, "a2", [msg("three")])

    assert (first.first_version, first.last_version, first.deduplicated) == (1, 2, False)
    assert (second.first_version, second.last_version) == (3, 3)
    events = store.read_stream(REF)
    assert [e.version for e in events] == [1, 2, 3]
    assert [e["body"] for e in events] == ["one", "two", "three"]
    assert events[1].cursor == first.cursor
    assert events[2].cursor == second.cursor
    assert store.stream_version(REF) == 3


def test_a_stream_with_no_events_has_version_zero(store: EventStore) -> None:
    assert store.stream_version(lb.StreamId("nobody", "nothing")) == 0
    assert store.read_stream(lb.StreamId("nobody", "nothing")) == []
    assert store.scan_session("nobody") == []
    assert store.tail("nobody", 5) == []


def test_version_conflict_reports_both_versions_and_writes_nothing(store: EventStore) -> None:
    store.append(REF, 0, "a1", [msg("one")])
    before = snapshot(store, "s1")

    with pytest.raises(lb.VersionConflict) as raised:
        store.append(REF, 0, "a2", [msg("two")])

    assert (raised.value.expected, raised.value.actual) == (0, 1)
    assert snapshot(store, "s1") == before
    # The refused append_id stays free: the same id succeeds at the right version.
    assert store.append(REF, 1, "a2", [msg("two")]).first_version == 2


def test_retry_after_a_lost_reply_returns_the_original_result_even_with_a_stale_version(
    store: EventStore,
) -> None:
    original = store.append(REF, 0, "a1", [msg("one"), call("t1")])
    store.append(REF, 2, "a2", [msg("later")])

    retried = store.append(REF, 0, "a1", [msg("one"), call("t1")])

    assert retried.deduplicated
    assert (retried.first_version, retried.last_version, retried.cursor) == (
        original.first_version,
        original.last_version,
        original.cursor,
    )
    assert store.stream_version(REF) == 3


def test_same_append_id_with_other_content_is_an_idempotency_conflict(store: EventStore) -> None:
    store.append(REF, 0, "a1", [msg("one")])
    before = snapshot(store, "s1")

    with pytest.raises(lb.IdempotencyConflict):
        store.append(REF, lb.ANY, "a1", [msg("ONE")])
    with pytest.raises(lb.IdempotencyConflict):
        store.append(REF, 1, "a1", [msg("one"), msg("two")])

    assert snapshot(store, "s1") == before


def test_idempotency_compares_canonical_content_not_spelling(store: EventStore) -> None:
    given = {
        "type": "tool_call",
        "agent": "a",
        "tool": "t",
        "attempt_id": "x",
        "args": {"b": 1, "a": [1, 2]},
    }
    respelled: dict[str, object] = {
        "args": {"a": [1, 2], "b": 1},
        "attempt_id": "x",
        "tool": "t",
        "agent": "a",
        "type": "tool_call",
        "parents": [],
        "run_id": None,
    }
    as_model = lb.ToolCall(agent="a", tool="t", attempt_id="x", args={"a": [1, 2], "b": 1})

    first = store.append(REF, 0, "a1", [given])

    assert store.append(REF, 0, "a1", [respelled]).deduplicated
    assert store.append(REF, 0, "a1", [as_model]).deduplicated
    assert store.read_stream(REF)[0].event_id == store.read_stream(REF)[0].event_id
    assert first.last_version == 1 == store.stream_version(REF)


def test_append_ids_are_scoped_to_their_stream(store: EventStore) -> None:
    store.append(REF, 0, "a1", [msg("one")])
    other = store.append(lb.StreamId("s1", "run-b"), 0, "a1", [msg("different")])
    assert not other.deduplicated


def test_generated_event_ids_are_stable_across_retries_and_given_ones_are_kept(
    store: EventStore,
) -> None:
    store.append(REF, 0, "a1", [msg("one"), msg("two", event_id="mine")])
    ids = [e.event_id for e in store.read_stream(REF)]
    store.append(REF, 0, "a1", [msg("one"), msg("two", event_id="mine")])

    assert ids[1] == "mine"
    assert ids[0] != ids[1]
    assert [e.event_id for e in store.read_stream(REF)] == ids
    assert ids[0] == derive_event_id("s1", "run-a", "a1", 0)


def test_cursors_increase_strictly_across_streams_in_commit_order(store: EventStore) -> None:
    order = []
    for i in range(30):
        ref = lb.StreamId("s1", f"run-{i % 3}")
        result = store.append(ref, lb.ANY, f"x{i}", [msg(f"m{i}"), msg(f"n{i}")])
        order += [f"m{i}", f"n{i}"]
        assert result.last_version == 2 * (i // 3 + 1)

    events = store.scan_session("s1")
    cursors = [e.cursor for e in events]
    assert [e["body"] for e in events] == order
    assert cursors == sorted(cursors)
    assert len(set(cursors)) == len(cursors)
    for stream in ("run-0", "run-1", "run-2"):
        assert [e.version for e in events if e.stream.name == stream] == list(range(1, 21))


def test_paging_scan_by_cursor_equals_a_full_scan(store: EventStore) -> None:
    for i in range(57):
        store.append(lb.StreamId("s1", f"r{i % 4}"), lb.ANY, f"a{i}", [msg(str(i))])
    full = snapshot(store, "s1")

    paged: list[dict[str, object]] = []
    cursor = None
    while True:
        page = store.scan_session("s1", after_cursor=cursor, limit=10)
        if not page:
            break
        paged += [e.to_dict() for e in page]
        cursor = page[-1].cursor

    assert paged == full
    assert len(full) == 57


def test_read_stream_pages_by_version(store: EventStore) -> None:
    store.append(REF, 0, "a1", [msg(str(i)) for i in range(25)])
    assert [e.version for e in store.read_stream(REF, after_version=20)] == [21, 22, 23, 24, 25]
    assert [e.version for e in store.read_stream(REF, after_version=3, limit=2)] == [4, 5]
    assert store.read_stream(REF, after_version=25) == []


def test_read_stream_across_many_appends_and_pages_returns_every_version_once(
    store: EventStore,
) -> None:
    other = lb.StreamId("s1", "noise")
    for i in range(300):
        store.append(REF, lb.ANY, f"a{i}", [msg(f"{i}.{k}") for k in range(7)])
        store.append(other, lb.ANY, f"n{i}", [msg("noise")])

    events = store.read_stream(REF)
    assert [e.version for e in events] == list(range(1, 2101))
    assert {e.stream.name for e in events} == {"run-a"}
    middle = store.read_stream(REF, after_version=1003, limit=9)
    assert [e["body"] for e in middle] == [
        "143.2",
        "143.3",
        "143.4",
        "143.5",
        "143.6",
        "144.0",
        "144.1",
        "144.2",
        "144.3",
    ]


def test_tail_returns_the_last_n_oldest_first_and_nothing_of_other_sessions(
    store: EventStore,
) -> None:
    for i in range(40):
        session = "s1" if i % 2 else "s2"
        store.append(lb.StreamId(session, "main"), lb.ANY, f"a{i}", [msg(f"{session}-{i}")])

    last = store.tail("s1", 5)

    assert [e["body"] for e in last] == [f"s1-{i}" for i in (31, 33, 35, 37, 39)]
    assert {e.session_id for e in last} == {"s1"}
    assert len(store.tail("s1", 100)) == 20
    assert store.tail("s1", 0) == []


def test_recorded_events_carry_every_field_and_the_commit_time(store: EventStore) -> None:
    before = time.time()
    store.append(
        REF,
        0,
        "a1",
        [
            {
                "type": "mutation",
                "agent": "w",
                "kind": "task.done",
                "task_id": "jwt",
                "run_id": "r1",
                "parents": ["e0"],
            },
            {
                "type": "tool_result",
                "agent": "w",
                "tool": "t",
                "attempt_id": "x",
                "status": "error",
                "result": {"error": "boom", "n": [1, None, True]},
            },
        ],
    )
    mutation, result = store.read_stream(REF)

    line = mutation.to_dict()
    assert list(line)[: len(LEDGER_KEYS)] == LEDGER_KEYS
    assert (line["task_id"], line["kind"], line["run_id"], line["parents"]) == (
        "jwt",
        "task.done",
        "r1",
        ["e0"],
    )
    assert result["result"] == {"error": "boom", "n": [1, None, True]}
    assert isinstance(result.event, lb.ToolResult)
    assert before - 1 <= mutation.recorded_at.timestamp() <= time.time() + 1


BAD_BATCHES: dict[str, list[object]] = {
    "unknown type": [{"type": "thought", "agent": "a"}],
    "missing field": [{"type": "message", "agent": "a"}],
    "missing attempt id": [{"type": "tool_call", "agent": "a", "tool": "t"}],
    "bad status": [
        {"type": "tool_result", "agent": "a", "tool": "t", "attempt_id": "x", "status": "maybe"}
    ],
    "wrong field type": [{"type": "message", "agent": "a", "body": 7}],
    "unknown field on a message": [{"type": "message", "agent": "a", "body": "x", "mood": "ok"}],
    "empty agent": [{"type": "message", "agent": "", "body": "x"}],
    "NaN": [
        {
            "type": "tool_call",
            "agent": "a",
            "tool": "t",
            "attempt_id": "x",
            "args": {"v": float("nan")},
        }
    ],
    "Infinity": [{"type": "mutation", "agent": "a", "kind": "k", "score": float("inf")}],
    "lone surrogate": [{"type": "message", "agent": "a", "body": "bad \ud800 text"}],
    "surrogate in a key": [{"type": "mutation", "agent": "a", "kind": "k", "data": {"\udfff": 1}}],
    "integer JSON cannot carry": [{"type": "mutation", "agent": "a", "kind": "k", "n": 2**53}],
    "reserved mutation field": [{"type": "mutation", "agent": "a", "kind": "k", "version": 3}],
    "not an object": ["message"],
    # What no artifact can take: the fields that frame an event stay in it (spec 3.11).
    "oversized event": [
        {
            "type": "message",
            "agent": "a",
            "body": "x",
            "parents": [f"{n:040d}" for n in range(30_000)],
        }
    ],
    "empty batch": [],
    "one bad event among good ones": [
        {"type": "message", "agent": "a", "body": "fine"},
        {"type": "message", "agent": "a", "body": "fine too"},
        {"type": "message", "agent": "a", "body": float("nan")},
    ],
}


@pytest.mark.parametrize("case", list(BAD_BATCHES))
def test_bad_input_is_rejected_and_writes_nothing(store: EventStore, case: str) -> None:
    store.append(REF, 0, "a0", [msg("existing")])
    before = snapshot(store, "s1")

    with pytest.raises(lb.InvalidEvent):
        store.append(REF, 1, "bad", BAD_BATCHES[case])

    assert snapshot(store, "s1") == before
    # The append_id was not consumed: a good append may still use it.
    assert store.append(REF, 1, "bad", [msg("good")]).first_version == 2


def test_an_invalid_event_error_names_the_event_and_field(store: EventStore) -> None:
    with pytest.raises(lb.InvalidEvent) as raised:
        store.append(REF, 0, "a1", BAD_BATCHES["one bad event among good ones"])
    assert (raised.value.index, raised.value.field) == (2, "body")

    with pytest.raises(lb.InvalidEvent) as raised:
        store.append(REF, 0, "a1", [call("x", nested={"deep": [0, float("nan")]})])
    assert raised.value.field == "args.nested.deep[1]"


@pytest.mark.parametrize(
    ("stream", "expected", "append_id", "events"),
    [
        (lb.StreamId("s1", "x"), -1, "a", [msg("x")]),
        (lb.StreamId("s1", "x"), "3", "a", [msg("x")]),
        (lb.StreamId("s1", "x"), True, "a", [msg("x")]),
        (lb.StreamId("s1", "x"), 0, "", [msg("x")]),
        (lb.StreamId("s1", "x"), 0, None, [msg("x")]),
        ("s1/x", 0, "a", [msg("x")]),
        (lb.StreamId("s1", "x"), 0, "a", {"type": "message"}),
    ],
)
def test_bad_arguments_are_invalid_input(
    store: EventStore, stream: object, expected: object, append_id: object, events: object
) -> None:
    with pytest.raises(lb.InvalidInput):
        store.append(stream, expected, append_id, events)  # type: ignore[arg-type]
    assert store.scan_session("s1") == []


@pytest.mark.parametrize("name", ["", "has space", "br{ace", "br}ace", "tab\t", "x" * 201])
def test_names_that_would_break_keys_or_lines_are_refused(name: str) -> None:
    with pytest.raises(lb.InvalidInput):
        lb.StreamId(name, "main")
    with pytest.raises(lb.InvalidInput):
        lb.StreamId("s1", name)


def test_too_many_events_in_one_append_is_invalid(store: EventStore) -> None:
    too_many = [msg(str(i)) for i in range(store.limits.max_events_per_append + 1)]
    with pytest.raises(lb.InvalidEvent):
        store.append(REF, 0, "a1", too_many)
    assert store.stream_version(REF) == 0


def test_wait_session_returns_events_that_commit_while_waiting(store: EventStore) -> None:
    store.append(REF, 0, "a1", [msg("old")])
    timer = threading.Timer(0.2, lambda: store.append(REF, 1, "a2", [msg("new")]))
    timer.start()
    try:
        found = store.wait_session("s1", None, timeout_ms=5000)
    finally:
        timer.join()
    assert [e["body"] for e in found] == ["new"]
    assert store.wait_session("s1", found[-1].cursor, timeout_ms=50) == []


def test_session_info_and_the_sessions_index(store: EventStore) -> None:
    store.append(REF, 0, "a1", [msg("one"), msg("two")])
    store.append(lb.StreamId("s1", "dispatch"), 0, "d1", [msg("three")])
    store.append(lb.StreamId("s2", "main"), 0, "x", [msg("four")])

    info = store.session_info("s1").to_dict()

    assert info["events"] == 3
    assert info["streams"] == {"dispatch": 1, "run-a": 2}
    assert info["append_ids"] == 2
    assert info["first_cursor"] < info["last_cursor"]
    # Without the append ids counted (a read per stream spared), the rest alike
    uncounted = store.session_info("s1", append_ids=False).to_dict()
    assert uncounted == {**info, "append_ids": None}
    assert {name for name, _ in store.sessions()} == {"s1", "s2"}
    assert len(store.sessions(limit=1)) == 1


# -- restore: recorded events written as they were ------------------------------------------------

BIG = "x" * 70_000  # above the artifact threshold: kept as an artifact


def recorded_session() -> tuple[EventStore, list[RecordedEvent]]:
    """A session of two interleaved streams: calls open and closed, a flag, a big field."""
    source = lb.connect("memory://")
    main, side = lb.StreamId("s", "main"), lb.StreamId("s", "side")
    source.append(main, 0, "1", [call("c#1"), call("c#2", blob=BIG)])
    source.append(side, 0, "2", [{"type": "message", "agent": "b", "body": "hello"}])
    source.append(main, 2, "3", [result("c#1")])
    flag = {
        "type": "mutation",
        "agent": "r",
        "kind": "reconcile.unresolved",
        "attempt_id": "c#2",
    }
    source.append(side, 1, "4", [flag, {"type": "message", "agent": "b", "body": "bye"}])
    return source, list(source.iter_session("s"))


def as_read(events: list[RecordedEvent]) -> list[tuple[Any, ...]]:
    return [(e.stream.name, e.version, e.cursor, e.fields) for e in events]


def test_a_restored_session_reads_back_as_recorded_and_a_second_restore_writes_nothing(
    store: EventStore,
) -> None:
    # Given the events of a session recorded elsewhere
    source, events = recorded_session()

    # When they are restored here, twice (a restore cut short is run again)
    assert store.restore(events) == len(events)
    assert store.restore(events) == 0

    # Then the session reads as it was recorded: versions, cursors, event ids, fields
    assert as_read(list(store.iter_session("s"))) == as_read(events)
    assert as_read(store.read_stream(lb.StreamId("s", "side"))) == as_read(
        source.read_stream(lb.StreamId("s", "side"))
    )
    assert as_read(store.tail("s", 2)) == as_read(events[-2:])
    # and what follows from the events follows: the open attempt, flagged; the artifact
    assert store.open_attempts("s") == source.open_attempts("s")
    (open_,) = store.open_attempts("s")
    assert open_.attempt_id == "c#2"
    assert open_.flagged_cursor == events[-2].cursor
    assert store.artifact_uses("s") == source.artifact_uses("s")
    assert store.stream_version(lb.StreamId("s", "main")) == 3
    # And an append afterwards goes on after them
    after = store.append(lb.StreamId("s", "main"), 3, "5", [result("c#2")])
    assert after.first_version == 4
    assert after.cursor > events[-1].cursor
    assert store.open_attempts("s") == []


def test_a_restore_refuses_a_gap_or_events_out_of_order_and_writes_nothing_of_the_batch(
    store: EventStore,
) -> None:
    _, events = recorded_session()
    main = [e for e in events if e.stream.name == "main"]
    with pytest.raises(lb.VersionConflict):
        store.restore([main[0], main[2]])  # version 3 after version 1
    assert store.stream_version(lb.StreamId("s", "main")) == 0
    with pytest.raises(lb.InvalidInput):
        store.restore([events[3], events[2]])


def test_a_restore_of_events_below_the_sessions_newest_cursor_is_refused(
    store: EventStore,
) -> None:
    # Given a session that went on past the cursors of the events to restore
    _, events = recorded_session()
    store.append(
        lb.StreamId("s", "other"), 0, "x", [{"type": "message", "agent": "a", "body": "later"}]
    )
    older = [RecordedEvent(lb.StreamId("s", "fresh"), 1, "0000000000001-000000", events[0].fields)]
    # Then restoring them is refused (they are not there: no restore wrote them), or skipped
    # as written before; either way nothing is written
    try:
        written = store.restore(older)
    except lb.InvalidInput:
        written = 0
    assert written == 0
    assert store.stream_version(lb.StreamId("s", "fresh")) == 0


# What `from ledger_bus.testing.contract import *` brings: the tests alone (their helpers stay
# here, where the tests find them).
__all__ = [name for name in list(globals()) if name.startswith("test_")]
