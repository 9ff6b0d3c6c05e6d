"""Deletion's part of the contract (with the log's; spec 3.9): the events go, the append_ids stay,
and the same ids can be written again from version 1.

    from ledger_bus.testing.contract.deletes import *  # noqa: F403
"""

from __future__ import annotations

import pytest

import ledger_bus as lb
from ledger_bus.store.attempts import Attempts
from ledger_bus.testing.events import call, msg

S = "del-1"
MAIN, SIDE = lb.StreamId(S, "main"), lb.StreamId(S, "side")


def fill(store: lb.EventStore) -> None:
    store.append(MAIN, 0, "m1", [msg("one"), call("att-1", "run-1")])
    store.append(SIDE, 0, "s1", [msg("side one")])
    store.append(MAIN, 2, "m2", [msg("three")])


def test_a_deleted_session_reads_as_empty_and_leaves_other_sessions_alone(
    store: lb.EventStore,
) -> None:
    fill(store)
    other = lb.StreamId("del-other", "main")
    store.append(other, 0, "o1", [msg("kept")])

    gone = store.delete_session(S)

    assert (gone.session_id, gone.stream, gone.events, gone.generation) == (S, None, 4, 1)
    assert store.scan_session(S) == []
    assert store.tail(S, 20) == []
    assert store.read_stream(MAIN) == []
    assert store.stream_version(MAIN) == 0
    assert not store.session_exists(S)
    if isinstance(store, Attempts):
        assert store.open_attempts(S) == []
    assert S not in [session for session, _ in store.sessions()]
    assert [e["body"] for e in store.scan_session("del-other")] == ["kept"]


def test_a_retry_after_delete_returns_the_original_result_and_writes_nothing(
    store: lb.EventStore,
) -> None:
    fill(store)
    original = store.append(MAIN, 3, "m3", [msg("four")])
    store.delete_session(S)

    again = store.append(MAIN, 3, "m3", [msg("four")])

    assert again.deduplicated
    assert (again.first_version, again.last_version, again.cursor) == (
        original.first_version,
        original.last_version,
        original.cursor,
    )
    assert store.scan_session(S) == []
    with pytest.raises(lb.IdempotencyConflict):
        store.append(MAIN, lb.ANY, "m3", [msg("other content")])
    assert store.scan_session(S) == []


def test_the_same_session_is_written_again_from_version_one_with_later_cursors(
    store: lb.EventStore,
) -> None:
    fill(store)
    last_before = store.tail(S, 1)[0].cursor
    store.delete_session(S)

    fresh = store.append(MAIN, 0, "new-1", [msg("again")])

    assert (fresh.first_version, fresh.last_version) == (1, 1)
    assert fresh.cursor > last_before
    assert [e["body"] for e in store.read_stream(MAIN)] == ["again"]
    assert [e.version for e in store.scan_session(S)] == [1]
    assert store.session_exists(S)
    assert store.delete_session(S).generation == 2


def test_deleting_what_is_not_there_changes_nothing(store: lb.EventStore) -> None:
    assert store.delete_session("del-never").events == 0
    assert store.delete_stream(lb.StreamId("del-never", "main")).generation == 0
    fill(store)
    assert store.delete_stream(lb.StreamId(S, "nothing")).events == 0
    assert len(store.scan_session(S)) == 4


def test_a_deleted_stream_goes_and_the_session_keeps_the_others(store: lb.EventStore) -> None:
    fill(store)
    side_event = store.read_stream(SIDE)[0]

    gone = store.delete_stream(MAIN)

    assert (gone.stream, gone.events, gone.generation) == ("main", 3, 1)
    assert store.read_stream(MAIN) == []
    assert store.stream_version(MAIN) == 0
    if isinstance(store, Attempts):
        assert store.open_attempts(S) == []  # att-1 was requested on main
    left = store.scan_session(S)
    assert [(e.stream.name, e.version, e.cursor) for e in left] == [("side", 1, side_event.cursor)]
    assert store.session_exists(S)
    info = store.session_info(S)
    assert (info.events, [(s.name, s.version) for s in info.streams]) == (1, [("side", 1)])
    again = store.append(MAIN, 0, "m-new", [msg("main again")])
    assert (again.first_version, again.cursor > side_event.cursor) == (1, True)
    assert store.append(MAIN, lb.ANY, "m2", [msg("three")]).deduplicated


def test_bad_arguments_are_refused(store: lb.EventStore) -> None:
    with pytest.raises(lb.InvalidInput):
        store.delete_session("has space")
    with pytest.raises(lb.InvalidInput):
        store.delete_stream("del-1/main")  # type: ignore[arg-type]


# What `from ledger_bus.testing.contract.deletes import *` brings: the tests alone (their
# helpers stay here, where the tests find them).
__all__ = [name for name in list(globals()) if name.startswith("test_")]
