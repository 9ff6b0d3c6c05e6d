"""A stream read once and kept up to date (adapters/view.py): what this process appended is
folded in without reading it back, in the order it landed, whatever order the replies came in;
values an adapter keeps packed read back as one array."""

from __future__ import annotations

from typing import Any

import msgpack

import ledger_bus as lb
from ledger_bus.adapters.packed import msgpack_array
from ledger_bus.adapters.view import StreamView, Views, size_of
from ledger_bus.model.records import RecordedEvent
from ledger_bus.store import EventStore
from tests.support.events import msg

REF = lb.StreamId("view", "main")


def _view() -> StreamView[list[str]]:
    def apply(state: list[str], event: RecordedEvent) -> None:
        state.append(str(event.fields["body"]))

    return StreamView(REF, list, apply)


def _append(store: EventStore, append_id: str, *bodies: str) -> tuple[Any, list[dict[str, Any]]]:
    events = [msg(body) for body in bodies]
    return store.append(REF, lb.ANY, append_id, events), events


def test_appends_answered_out_of_order_are_folded_in_the_order_they_landed() -> None:
    store = lb.connect("memory://")
    view = _view()
    first = _append(store, "a1", "one", "two")
    second = _append(store, "a2", "three")
    third = _append(store, "a3", "four")
    # The third reply comes first, then the second: both wait for the first, which lands first.
    view.wrote(*third)
    view.wrote(*second)
    assert (view.state, view.version) == ([], 0)
    view.wrote(*first)
    assert (view.state, view.version) == (["one", "two", "three", "four"], 4)
    # Nothing is left to read, and a read finds the view as it is.
    assert store.run_op(view.refresh_op(store)) == ["one", "two", "three", "four"]


def test_an_append_another_process_made_between_is_read_and_what_waited_is_not_applied_twice() -> (
    None
):
    store = lb.connect("memory://")
    view = _view()
    _append(store, "other", "theirs")  # another writer's, never seen by `wrote`
    mine = _append(store, "mine", "ours")
    view.wrote(*mine)  # it landed after one the view has not read: it waits
    assert view.version == 0
    assert store.run_op(view.refresh_op(store)) == ["theirs", "ours"]
    view.wrote(*mine)  # a late repeat of what the read already folded in
    later = _append(store, "later", "next")
    view.wrote(*later)
    assert (view.state, view.version) == (["theirs", "ours", "next"], 3)


def test_a_deduplicated_append_is_not_folded_in_again() -> None:
    store = lb.connect("memory://")
    view = _view()
    view.wrote(*_append(store, "a1", "one"))
    view.wrote(*_append(store, "a1", "one"))
    assert (view.state, view.version) == (["one"], 1)


def test_a_forgotten_view_weighs_nothing_and_weighs_what_it_reads_again_once() -> None:
    """A stream deleted (a LangGraph thread pruned) is forgotten: what it held no longer counts
    against the cap, and read again it counts once."""
    store = lb.connect("memory://")
    views: Views[list[str]] = Views(list, _view().apply, lambda event: 10, max_bytes=1000)
    _append(store, "a1", "one", "two")
    store.run_op(views.of(REF).refresh_op(store))
    assert views.held() == 20
    views.of(REF).forget()
    assert views.held() == 0
    store.run_op(views.of(REF).refresh_op(store))
    assert views.held() == 20


def test_size_of_counts_what_nested_values_hold() -> None:
    flat = size_of({"a": "x"})
    nested = size_of({"a": "x", "b": [{"c": "y" * 1000}, ("z", 1)]})
    assert nested > flat + 1000
    assert size_of([]) < size_of(["x" * 100])


def test_values_packed_one_by_one_unpack_as_one_array_of_any_length() -> None:
    for count in (0, 1, 15, 16, 65_535, 65_536):
        values = [{"n": n} for n in range(count)]
        assert msgpack.unpackb(msgpack_array([msgpack.packb(v) for v in values])) == values
