"""Bounds' part of the contract (with the log's; spec 3.12): the newest K events kept, older
appends trimmed whole, and a retry of a trimmed append deduplicated inside the window.

    from ledger_bus.testing.contract.bounds import *  # noqa: F403
"""

from __future__ import annotations

import pytest

import ledger_bus as lb
from ledger_bus.store.bounds import DEFAULT_DEDUP_WINDOW_MS
from ledger_bus.testing.events import msg

S = "bound-1"
CHECKPOINTS, MAIN = lb.StreamId(S, "checkpoints"), lb.StreamId(S, "main")


def bodies(events: list[lb.RecordedEvent]) -> list[str]:
    return [e["body"] for e in events]


def test_a_bounded_stream_keeps_its_newest_events_and_its_versions(store: lb.EventStore) -> None:
    store.append(MAIN, 0, "m1", [msg("main stays")])
    store.bound_stream(CHECKPOINTS, keep=3)
    assert store.stream_bound(CHECKPOINTS) == lb.Bound(3, DEFAULT_DEDUP_WINDOW_MS)
    for n in range(1, 11):
        store.append(CHECKPOINTS, n - 1, f"c{n}", [msg(f"checkpoint {n}")])

    kept = store.read_stream(CHECKPOINTS)
    assert [e.version for e in kept] == [8, 9, 10]
    assert bodies(kept) == ["checkpoint 8", "checkpoint 9", "checkpoint 10"]
    assert [e.version for e in store.read_stream(CHECKPOINTS, after_version=2, limit=2)] == [8, 9]
    assert store.stream_version(CHECKPOINTS) == 10
    assert bodies(store.scan_session(S)) == ["main stays", *bodies(kept)]
    assert store.session_info(S).events == 4
    # Appends go on from the version the stream has, trimmed events or not.
    with pytest.raises(lb.VersionConflict):
        store.append(CHECKPOINTS, 3, "c-late", [msg("stale")])
    assert store.append(CHECKPOINTS, 10, "c11", [msg("checkpoint 11")]).first_version == 11


def test_older_appends_are_trimmed_whole(store: lb.EventStore) -> None:
    store.bound_stream(CHECKPOINTS, keep=3)
    for n in range(4):
        store.append(CHECKPOINTS, lb.ANY, f"c{n}", [msg(f"{n}a"), msg(f"{n}b")])

    # Versions 1..8; the newest 3 are 6..8, and 5 belongs to the append of 5 and 6.
    assert [e.version for e in store.read_stream(CHECKPOINTS)] == [5, 6, 7, 8]


def test_a_retry_of_a_trimmed_append_deduplicates_inside_the_window(store: lb.EventStore) -> None:
    store.bound_stream(CHECKPOINTS, keep=1)
    first = store.append(CHECKPOINTS, 0, "c1", [msg("one")])
    store.append(CHECKPOINTS, 1, "c2", [msg("two")])
    assert bodies(store.read_stream(CHECKPOINTS)) == ["two"]

    again = store.append(CHECKPOINTS, 0, "c1", [msg("one")])

    assert again.deduplicated
    assert (again.first_version, again.last_version, again.cursor) == (1, 1, first.cursor)
    assert bodies(store.read_stream(CHECKPOINTS)) == ["two"], "nothing written again"
    with pytest.raises(lb.IdempotencyConflict):
        store.append(CHECKPOINTS, lb.ANY, "c1", [msg("other")])


def test_after_the_window_a_trimmed_append_id_is_forgotten(store: lb.EventStore) -> None:
    store.bound_stream(CHECKPOINTS, keep=1, dedup_window_ms=0)
    store.append(CHECKPOINTS, 0, "c1", [msg("one")])
    store.append(CHECKPOINTS, 1, "c2", [msg("two")])  # trims c1, past its window at once

    again = store.append(CHECKPOINTS, lb.ANY, "c1", [msg("one")])

    assert not again.deduplicated
    assert again.first_version == 3
    assert bodies(store.read_stream(CHECKPOINTS)) == ["one"]
    # The record of the append just made is kept: its events are not trimmed.
    assert store.append(CHECKPOINTS, lb.ANY, "c1", [msg("one")]).deduplicated


def test_a_bound_is_declared_changed_and_lifted(store: lb.EventStore) -> None:
    with pytest.raises(lb.InvalidInput):
        store.bound_stream(CHECKPOINTS, keep=0)
    with pytest.raises(lb.InvalidInput):
        store.bound_stream(CHECKPOINTS, keep=2, dedup_window_ms=-1)
    assert store.stream_bound(CHECKPOINTS) is None
    for n in range(4):
        store.append(CHECKPOINTS, lb.ANY, f"c{n}", [msg(str(n))])
    store.bound_stream(CHECKPOINTS, keep=2, dedup_window_ms=5000)
    assert store.stream_bound(CHECKPOINTS) == lb.Bound(2, 5000)
    store.append(CHECKPOINTS, lb.ANY, "c4", [msg("4")])
    assert bodies(store.read_stream(CHECKPOINTS)) == ["3", "4"]

    store.bound_stream(CHECKPOINTS, None)
    store.append(CHECKPOINTS, lb.ANY, "c5", [msg("5")])
    assert bodies(store.read_stream(CHECKPOINTS)) == ["3", "4", "5"]

    store.bound_stream(CHECKPOINTS, keep=1)
    store.delete_stream(CHECKPOINTS)
    assert store.stream_bound(CHECKPOINTS) is None, "a bound goes with its stream"


def test_a_bound_for_one_writers_appends_trims_at_those_alone(store: lb.EventStore) -> None:
    # Given a stream of three, bounded to one for the appends whose ids begin "rw:"
    for n in range(3):
        store.append(CHECKPOINTS, lb.ANY, f"c{n}", [msg(str(n))])
    store.bound_stream(CHECKPOINTS, keep=1, dedup_window_ms=0, only="rw:")
    assert store.stream_bound(CHECKPOINTS) == lb.Bound(1, 0, "rw:")
    # When someone else appends, nothing is trimmed
    store.append(CHECKPOINTS, lb.ANY, "other", [msg("3")])
    assert bodies(store.read_stream(CHECKPOINTS)) == ["0", "1", "2", "3"]
    # When the rewrite appends, what came before goes
    store.append(CHECKPOINTS, lb.ANY, "rw:1", [msg("kept")])
    assert bodies(store.read_stream(CHECKPOINTS)) == ["kept"]
    # And a bound its writer never lifted goes on trimming nothing
    store.append(CHECKPOINTS, lb.ANY, "later", [msg("later")])
    assert bodies(store.read_stream(CHECKPOINTS)) == ["kept", "later"]
    with pytest.raises(lb.InvalidInput):
        store.bound_stream(CHECKPOINTS, keep=1, only="has space")


# What `from ledger_bus.testing.contract.bounds import *` brings: the tests alone (their
# helpers stay here, where the tests find them).
__all__ = [name for name in list(globals()) if name.startswith("test_")]
