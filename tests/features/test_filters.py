"""Filters on tail, scan and export: what they keep, and what reading it costs."""

from __future__ import annotations

import json
from typing import Any

import pytest

import ledger_bus as lb
from ledger_bus.agent.filters import EventFilter, parse_bound, select, select_tail
from ledger_bus.model.records import RecordedEvent
from ledger_bus.store.base import EventStore
from ledger_bus.store.memory import MemoryStore
from ledger_bus.store.steps import Op
from tests.support.helpers import ledger_cli


def event(kind: str, agent: str, n: int, run: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "mutation", "agent": agent, "kind": kind, "n": n}
    if kind == "call":
        out = {"type": "tool_call", "agent": agent, "tool": "t", "attempt_id": f"a{n}"}
    if run:
        out["run_id"] = run
    return out


def fill(store: EventStore, session: str = "f") -> list[RecordedEvent]:
    """Thirty events over three streams, two agents, two runs and two types."""
    for n in range(30):
        stream = ("main", "side", "board")[n % 3]
        kind = "call" if n % 5 == 0 else "note"
        store.append(
            lb.StreamId(session, stream),
            lb.ANY,
            f"e{n}",
            [event(kind, "alice" if n % 2 else "bob", n, run="r1" if n < 15 else "r2")],
        )
    return store.scan_session(session)


def test_select_keeps_what_every_criterion_names(store: EventStore) -> None:
    everything = fill(store)
    keep = EventFilter(types={"mutation"}, agents={"alice"}, streams={"main", "side"}, runs={"r2"})
    picked = list(select(store, "f", keep))
    expected = [e for e in everything if keep.matches(e)]
    assert picked == expected
    assert picked, "the filter kept something"
    assert all(e.type == "mutation" and e.agent == "alice" and e.run_id == "r2" for e in picked)


def test_a_window_of_cursors_is_inclusive_at_both_ends(store: EventStore) -> None:
    everything = fill(store)
    since, until = everything[5].cursor, everything[9].cursor
    keep = EventFilter(since=since, until=until)
    assert list(select(store, "f", keep)) == everything[5:10]
    assert select_tail(store, "f", 3, keep) == everything[7:10]
    assert select_tail(store, "f", 50, keep) == everything[5:10]


def test_a_filtered_tail_is_the_last_n_that_match(store: EventStore) -> None:
    everything = fill(store)
    calls = [e for e in everything if e.type == "tool_call"]
    assert select_tail(store, "f", 2, EventFilter(types={"tool_call"})) == calls[-2:]
    board = [e for e in everything if e.stream.name == "board"]
    assert select_tail(store, "f", 4, EventFilter(streams={"board"})) == board[-4:]
    assert select_tail(store, "f", 0, EventFilter(types={"tool_call"})) == []


class Counting(MemoryStore):
    """A memory store that counts the pages a tail reads."""

    pages = 0

    def _tail(self, session_id: str, n: int, before: str | None) -> Op[list[RecordedEvent]]:
        self.pages += 1
        return super()._tail(session_id, n, before)


def test_a_filtered_tail_reads_back_only_as_far_as_it_needs() -> None:
    store = Counting()
    ref = lb.StreamId("long", "main")
    for start in range(0, 5000, 1000):
        store.append(ref, lb.ANY, f"b{start}", [event("note", "bob", n) for n in range(1000)])
    store.append(ref, lb.ANY, "last", [event("call", "alice", n) for n in range(5)])

    found = select_tail(store, "long", 3, EventFilter(types={"tool_call"}))

    assert [e["attempt_id"] for e in found] == ["a2", "a3", "a4"]
    assert store.pages == 1, "one page from the end held them; the session was not read"
    store.pages = 0
    select_tail(store, "long", 3, EventFilter(streams={"main"}))
    assert store.pages == 0, "one stream's tail is read by version, not by paging the log"


@pytest.mark.parametrize(
    ("text", "end", "cursor"),
    [
        ("1796000000000-000007", False, "1796000000000-000007"),
        ("1796000000000-7", True, "1796000000000-000007"),
        ("2026-11-30T12:00:00Z", False, "1796040000000-000000"),
        ("2026-11-30T13:00:00+01:00", True, "1796040000000-999999"),
        ("2026-11-30T12:00:00", False, "1796040000000-000000"),
        ("2026-11-30", False, "1795996800000-000000"),
        ("2026-11-30", True, "1796083199999-999999"),
    ],
)
def test_bounds_are_cursors_times_or_dates(text: str, end: bool, cursor: str) -> None:
    assert parse_bound(text, end) == cursor


def test_filters_from_the_command_line(redis_url: str, prefix: str) -> None:
    with lb.connect(redis_url, prefix=prefix) as store:
        everything = fill(store)

    def lines(*args: str) -> list[dict[str, Any]]:
        done = ledger_cli(redis_url, prefix, *args)
        assert done.returncode == 0, done.stderr
        return [json.loads(line) for line in done.stdout.splitlines()]

    calls = [e.cursor for e in everything if e.type == "tool_call"]
    assert [e["cursor"] for e in lines("tail", "f", "-n", "2", "--type", "tool_call")] == calls[-2:]
    window = lines("scan", "f", "--since", everything[3].cursor, "--until", everything[6].cursor)
    assert [e["cursor"] for e in window] == [e.cursor for e in everything[3:7]]
    side = lines("export", "f", "--stream", "side", "--agent", "alice")
    assert side
    assert {(e["stream"], e["agent"]) for e in side} == {("side", "alice")}
    assert len(lines("scan", "f", "--run", "r1", "--limit", "4")) == 4
    bad = ledger_cli(redis_url, prefix, "scan", "f", "--since", "yesterday")
    assert bad.returncode == 2
    assert "not a cursor, ISO 8601 time, date or duration ago" in bad.stderr
