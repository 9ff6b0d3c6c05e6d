"""The log's part of the contract: append, read, scan, tail, wait, versions, the sessions index,
artifacts; every rule of spec/ledger-v1.md and the README that a store's log must keep, over the
public API alone. A store that is a log and nothing else passes this part alone::

    from ledger_bus.testing.contract.log import *  # noqa: F403
"""

from __future__ import annotations

import threading
import time

import pytest

import ledger_bus as lb
from ledger_bus.model.ids import derive_event_id
from ledger_bus.store.log import Log
from ledger_bus.testing.events import call, msg

# The ledger's keys of a JSONL line, first and in this order (the README's command line).
LEDGER_KEYS = ["session", "stream", "version", "cursor", "type", "agent", "event_id", "recorded_at"]


def snapshot(store: Log, session: str) -> list[dict[str, object]]:
    return [e.to_dict() for e in store.scan_session(session)]


REF = lb.StreamId("s1", "run-a")


def test_append_assigns_consecutive_versions_and_returns_the_last_cursor(store: Log) -> None:
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


def test_a_stream_with_no_events_has_version_zero(store: Log) -> None:
    assert store.stream_version(lb.StreamId("nobody", "nothing")) == 0
    assert store.read_stream(lb.StreamId("nobody", "nothing")) == []
    assert store.scan_session("nobody") == []
    assert store.tail("nobody", 5) == []


def test_version_conflict_reports_both_versions_and_writes_nothing(store: Log) -> None:
    store.append(REF, 0, "a1", [msg("one")])
    before = snapshot(store, "s1")

    with pytest.raises(lb.VersionConflict) as raised:
        store.append(REF, 0, "a2", [msg("two")])

    assert (raised.value.expected, raised.value.actual) == (0, 1)
    assert snapshot(store, "s1") == before
    # The refused append_id stays free: the same id succeeds at the right version.
    assert store.append(REF, 1, "a2", [msg("two")]).first_version == 2


def test_retry_after_a_lost_reply_returns_the_original_result_even_with_a_stale_version(
    store: Log,
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


def test_same_append_id_with_other_content_is_an_idempotency_conflict(store: Log) -> None:
    store.append(REF, 0, "a1", [msg("one")])
    before = snapshot(store, "s1")

    with pytest.raises(lb.IdempotencyConflict):
        store.append(REF, lb.ANY, "a1", [msg("ONE")])
    with pytest.raises(lb.IdempotencyConflict):
        store.append(REF, 1, "a1", [msg("one"), msg("two")])

    assert snapshot(store, "s1") == before


def test_idempotency_compares_canonical_content_not_spelling(store: Log) -> None:
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


def test_append_ids_are_scoped_to_their_stream(store: Log) -> None:
    store.append(REF, 0, "a1", [msg("one")])
    other = store.append(lb.StreamId("s1", "run-b"), 0, "a1", [msg("different")])
    assert not other.deduplicated


def test_generated_event_ids_are_stable_across_retries_and_given_ones_are_kept(
    store: Log,
) -> None:
    store.append(REF, 0, "a1", [msg("one"), msg("two", event_id="mine")])
    ids = [e.event_id for e in store.read_stream(REF)]
    store.append(REF, 0, "a1", [msg("one"), msg("two", event_id="mine")])

    assert ids[1] == "mine"
    assert ids[0] != ids[1]
    assert [e.event_id for e in store.read_stream(REF)] == ids
    assert ids[0] == derive_event_id("s1", "run-a", "a1", 0)


def test_cursors_increase_strictly_across_streams_in_commit_order(store: Log) -> None:
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


def test_paging_scan_by_cursor_equals_a_full_scan(store: Log) -> None:
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


def test_read_stream_pages_by_version(store: Log) -> None:
    store.append(REF, 0, "a1", [msg(str(i)) for i in range(25)])
    assert [e.version for e in store.read_stream(REF, after_version=20)] == [21, 22, 23, 24, 25]
    assert [e.version for e in store.read_stream(REF, after_version=3, limit=2)] == [4, 5]
    assert store.read_stream(REF, after_version=25) == []


def test_read_stream_across_many_appends_and_pages_returns_every_version_once(
    store: Log,
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
    store: Log,
) -> None:
    for i in range(40):
        session = "s1" if i % 2 else "s2"
        store.append(lb.StreamId(session, "main"), lb.ANY, f"a{i}", [msg(f"{session}-{i}")])

    last = store.tail("s1", 5)

    assert [e["body"] for e in last] == [f"s1-{i}" for i in (31, 33, 35, 37, 39)]
    assert {e.session_id for e in last} == {"s1"}
    assert len(store.tail("s1", 100)) == 20
    assert store.tail("s1", 0) == []


def test_recorded_events_carry_every_field_and_the_commit_time(store: Log) -> None:
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
def test_bad_input_is_rejected_and_writes_nothing(store: Log, case: str) -> None:
    store.append(REF, 0, "a0", [msg("existing")])
    before = snapshot(store, "s1")

    with pytest.raises(lb.InvalidEvent):
        store.append(REF, 1, "bad", BAD_BATCHES[case])

    assert snapshot(store, "s1") == before
    # The append_id was not consumed: a good append may still use it.
    assert store.append(REF, 1, "bad", [msg("good")]).first_version == 2


def test_an_invalid_event_error_names_the_event_and_field(store: Log) -> None:
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
    store: Log, stream: object, expected: object, append_id: object, events: object
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


def test_too_many_events_in_one_append_is_invalid(store: Log) -> None:
    too_many = [msg(str(i)) for i in range(store.limits.max_events_per_append + 1)]
    with pytest.raises(lb.InvalidEvent):
        store.append(REF, 0, "a1", too_many)
    assert store.stream_version(REF) == 0


def test_wait_session_returns_events_that_commit_while_waiting(store: Log) -> None:
    store.append(REF, 0, "a1", [msg("old")])
    timer = threading.Timer(0.2, lambda: store.append(REF, 1, "a2", [msg("new")]))
    timer.start()
    try:
        found = store.wait_session("s1", None, timeout_ms=5000)
    finally:
        timer.join()
    assert [e["body"] for e in found] == ["new"]
    assert store.wait_session("s1", found[-1].cursor, timeout_ms=50) == []


def test_session_info_and_the_sessions_index(store: Log) -> None:
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


# What `from ledger_bus.testing.contract.log import *` brings: the tests alone (their
# helpers stay here, where the tests find them).
__all__ = [name for name in list(globals()) if name.startswith("test_")]
