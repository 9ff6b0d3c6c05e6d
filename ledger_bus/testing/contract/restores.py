"""The restores' part of the contract: recorded events written as they were (a session moved in,
an export imported), refused out of order, skipped when written before."""

from __future__ import annotations

import pytest

import ledger_bus as lb
from ledger_bus.model.records import RecordedEvent
from ledger_bus.store.attempts import Attempts
from ledger_bus.store.log import Log
from ledger_bus.testing.events import call, result

BIG = "x" * 70_000  # above the artifact threshold: kept as an artifact


def recorded_session() -> tuple[lb.EventStore, list[RecordedEvent]]:
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


def as_read(events: list[RecordedEvent]) -> list[tuple[object, ...]]:
    return [(e.stream.name, e.version, e.cursor, e.fields) for e in events]


def test_a_restored_session_reads_back_as_recorded_and_a_second_restore_writes_nothing(
    store: lb.EventStore,
) -> None:
    # Given the events of a session recorded elsewhere
    source, events = recorded_session()

    # When they are restored here, twice (a restore cut short is run again)
    assert store.restore(events) == len(events)
    assert store.restore(events) == 0

    assert isinstance(store, Log)
    # Then the session reads as it was recorded: versions, cursors, event ids, fields
    assert as_read(list(store.iter_session("s"))) == as_read(events)
    assert as_read(store.read_stream(lb.StreamId("s", "side"))) == as_read(
        source.read_stream(lb.StreamId("s", "side"))
    )
    assert as_read(store.tail("s", 2)) == as_read(events[-2:])
    # and what follows from the events follows: the artifact; the open attempt, flagged
    assert store.artifact_uses("s") == source.artifact_uses("s")
    if isinstance(store, Attempts):
        assert store.open_attempts("s") == source.open_attempts("s")
        (open_,) = store.open_attempts("s")
        assert open_.attempt_id == "c#2"
        assert open_.flagged_cursor == events[-2].cursor
    assert store.stream_version(lb.StreamId("s", "main")) == 3
    # And an append afterwards goes on after them
    after = store.append(lb.StreamId("s", "main"), 3, "5", [result("c#2")])
    assert after.first_version == 4
    assert after.cursor > events[-1].cursor
    if isinstance(store, Attempts):
        assert store.open_attempts("s") == []


def test_a_restore_refuses_a_gap_or_events_out_of_order_and_writes_nothing_of_the_batch(
    store: lb.EventStore,
) -> None:
    _, events = recorded_session()
    main = [e for e in events if e.stream.name == "main"]
    with pytest.raises(lb.VersionConflict):
        store.restore([main[0], main[2]])  # version 3 after version 1
    assert store.stream_version(lb.StreamId("s", "main")) == 0
    with pytest.raises(lb.InvalidInput):
        store.restore([events[3], events[2]])


def test_a_restore_of_events_below_the_sessions_newest_cursor_is_refused(
    store: lb.EventStore,
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


# What `from ledger_bus.testing.contract.restores import *` brings: the tests alone (their
# helpers stay here, where the tests find them).
__all__ = [name for name in list(globals()) if name.startswith("test_")]
