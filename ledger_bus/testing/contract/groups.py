"""The consumer groups' part of the contract (with the log's): a group delivers each event of a
session to one of its consumers, at least once; an event stays pending until acked; an idle
consumer's pending events can be claimed; what fails for good becomes a dead letter.

    from ledger_bus.testing.contract.groups import *  # noqa: F403
"""

from __future__ import annotations

import threading
import time

import pytest

import ledger_bus as lb
from ledger_bus.model.ids import CURSOR_ZERO
from ledger_bus.model.records import Delivery


def put(store: lb.EventStore, session: str, *bodies: str) -> None:
    events = [{"type": "message", "agent": "w", "body": body} for body in bodies]
    store.append(lb.StreamId(session, "feed"), lb.ANY, f"put-{bodies[0]}", events)


def bodies(deliveries: list[Delivery]) -> list[str]:
    return [d.event["body"] for d in deliveries]


def test_a_group_starts_where_it_is_told_and_delivers_each_event_once(store: lb.EventStore) -> None:
    put(store, "g1", "a", "b")
    assert not store.group_exists("g1", "g")
    assert store.group_create("g1", "g", None) is True  # at the session's end
    assert store.group_create("g1", "g", None) is False
    assert store.group_exists("g1", "g")
    put(store, "g1", "c", "d", "e")

    first = store.group_read("g1", "g", "c1", 2, None)
    second = store.group_read("g1", "g", "c2", 10, None)

    assert bodies(first) == ["c", "d"]
    assert bodies(second) == ["e"]
    assert all(d.deliveries == 1 for d in first + second)
    assert store.group_read("g1", "g", "c1", 10, None) == []
    stats = store.group_stats("g1", "g")
    assert (stats.pending, stats.lag, stats.consumers) == (3, 0, 2)
    assert stats.last_delivered == second[-1].event.cursor


def test_a_group_created_after_a_cursor_delivers_what_follows_it(store: lb.EventStore) -> None:
    put(store, "g2", "a", "b", "c")
    cursor = store.scan_session("g2")[0].cursor
    store.group_create("g2", "g", cursor)
    assert bodies(store.group_read("g2", "g", "c", 10, None)) == ["b", "c"]


def test_a_blocking_read_returns_what_commits_while_it_waits(store: lb.EventStore) -> None:
    store.group_create("g3", "g", None)
    writer = threading.Timer(0.2, put, args=(store, "g3", "late"))
    writer.start()
    found = store.group_read("g3", "g", "c", 10, 3000)
    # The read returns once the event is in; the append may still be tidying its index. Wait
    # for it, or it would run on a store the fixture has closed.
    writer.join()
    assert bodies(found) == ["late"]


def test_own_pending_events_come_back_counted_until_acked(store: lb.EventStore) -> None:
    store.group_create("g4", "g", None)
    put(store, "g4", "a", "b")
    delivered = store.group_read("g4", "g", "c", 10, None)

    again = store.group_pending("g4", "g", "c", 10)  # a restart of consumer c
    assert bodies(again) == ["a", "b"]
    assert [d.deliveries for d in again] == [2, 2]
    assert store.group_pending("g4", "g", "other", 10) == []

    assert store.group_ack("g4", "g", [delivered[0].entry_id]) == 1
    assert store.group_ack("g4", "g", [delivered[0].entry_id]) == 0
    assert bodies(store.group_pending("g4", "g", "c", 10)) == ["b"]
    assert store.group_stats("g4", "g").pending == 1


def test_idle_events_are_claimed_and_kept_ones_are_not(store: lb.EventStore) -> None:
    store.group_create("g5", "g", None)
    put(store, "g5", "a", "b")
    held = store.group_read("g5", "g", "dead", 10, None)
    # Wide margins: only a stall of 0.8 s between two calls could make "b" or a
    # just-claimed "a" look idle, so a loaded machine does not fail this.
    time.sleep(1.0)
    store.group_keep("g5", "g", "dead", [held[1].entry_id])  # still working on "b"

    taken = store.group_claim("g5", "g", "alive", 800, 10)

    assert bodies(taken) == ["a"]
    assert taken[0].deliveries == 2
    assert store.group_claim("g5", "g", "alive", 800, 10) == [], "a claim resets the idle time"
    assert bodies(store.group_pending("g5", "g", "alive", 10)) == ["a"]


def test_a_dead_letter_records_why_and_leaves_the_pending_list(store: lb.EventStore) -> None:
    store.group_create("g6", "g", None)
    put(store, "g6", "poison")
    (delivery,) = store.group_read("g6", "g", "c", 10, None)
    store.group_dead_letter("g6", "g", delivery, "kept failing")
    (letter,) = store.group_dead_letters("g6", "g")
    assert letter["reason"] == "kept failing"
    assert letter["cursor"] == delivery.event.cursor
    assert letter["event_id"] == delivery.event.event_id
    assert store.group_stats("g6", "g").pending == 0


def test_a_group_that_does_not_exist_is_not_found(store: lb.EventStore) -> None:
    put(store, "g7", "a")
    with pytest.raises(lb.NotFound, match="no consumer group 'nope'"):
        store.group_read("g7", "nope", "c", 10, None)
    with pytest.raises(lb.NotFound):
        store.group_stats("g7", "nope")
    with pytest.raises(lb.NotFound):
        store.group_read("never-written", "nope", "c", 10, None)


def test_names_are_checked(store: lb.EventStore) -> None:
    for bad in ("", "a b", "x\ud800", "{g}"):
        with pytest.raises(lb.InvalidInput):
            store.group_create("g8", bad, None)
        with pytest.raises(lb.InvalidInput):
            store.group_read("g8", "g", bad, 10, None)


def test_idle_consumers_are_removed_but_never_one_that_holds_events(store: lb.EventStore) -> None:
    store.group_create("g9", "g", None)
    put(store, "g9", "a")
    store.group_read("g9", "g", "holder", 10, None)
    for n in range(20):  # each reads one event, acks it and leaves
        put(store, "g9", f"e{n}")
        (got,) = store.group_read("g9", "g", f"once-{n}", 10, None)
        store.group_ack("g9", "g", [got.entry_id])
    time.sleep(0.05)
    stats = store.group_stats("g9", "g", idle_ms=20)
    assert (stats.consumers, stats.idle_consumers) == (1, 20), "the holder is live: it has 'a'"

    removed = store.group_prune("g9", "g", idle_ms=20)

    assert sorted(removed) == sorted(f"once-{n}" for n in range(20))
    stats = store.group_stats("g9", "g", idle_ms=20)
    assert (stats.consumers, stats.idle_consumers, stats.pending) == (1, 0, 1)
    assert bodies(store.group_pending("g9", "g", "holder", 10)) == ["a"], "nothing was lost"


def test_groups_are_listed_with_what_each_holds(store: lb.EventStore) -> None:
    put(store, "ga", "a", "b")
    store.group_create("ga", "one", CURSOR_ZERO)
    store.group_create("ga", "two", None)
    store.group_read("ga", "one", "c1", 1, None)
    listed = store.groups("ga")
    assert [(g.group, g.pending, g.lag) for g in listed] == [("one", 1, 1), ("two", 0, 0)]
    assert store.groups("never-written") == []


def test_pending_entries_say_who_holds_what_since_when(store: lb.EventStore) -> None:
    put(store, "gp", "a", "b")
    store.group_create("gp", "g", CURSOR_ZERO)
    first = store.group_read("gp", "g", "c1", 1, None)
    store.group_read("gp", "g", "c2", 1, None)
    time.sleep(0.05)
    entries = store.group_pending_entries("gp", "g")
    oldest = entries[0]
    assert (oldest.cursor, oldest.consumer, oldest.deliveries) == (first[0].event.cursor, "c1", 1)
    assert [e.consumer for e in entries] == ["c1", "c2"]
    assert all(e.idle_ms >= 40 for e in entries)


def test_a_group_is_reset_and_deleted(store: lb.EventStore) -> None:
    put(store, "gr", "a", "b", "c")
    store.group_create("gr", "g", None)
    assert store.group_read("gr", "g", "c", 10, None) == []
    store.group_reset("gr", "g", CURSOR_ZERO)
    assert bodies(store.group_read("gr", "g", "c", 10, None)) == ["a", "b", "c"]
    assert store.group_delete("gr", "g") is True
    assert store.group_delete("gr", "g") is False
    assert not store.group_exists("gr", "g")
    with pytest.raises(lb.NotFound):
        store.group_reset("gr", "g", CURSOR_ZERO)


def test_replayed_dead_letters_are_taken_over_and_delivered_again(store: lb.EventStore) -> None:
    put(store, "gd", "poison", "fine")
    store.group_create("gd", "g", CURSOR_ZERO)
    poison, fine = store.group_read("gd", "g", "c1", 10, None)
    store.group_dead_letter("gd", "g", poison, "kept failing")
    store.group_ack("gd", "g", [fine.entry_id])

    assert store.group_replay_dead_letters("gd", "g") == 1

    assert store.group_dead_letters("gd", "g") == []
    taken = store.group_claim("gd", "g", "c2", 60_000, 10)  # idle long enough for any taker
    assert bodies(taken) == ["poison"]
    assert taken[0].deliveries == 1, "the count starts again"
    assert store.group_replay_dead_letters("gd", "g") == 0


# What `from ledger_bus.testing.contract.groups import *` brings: the tests alone (their
# helpers stay here, where the tests find them).
__all__ = [name for name in list(globals()) if name.startswith("test_")]
