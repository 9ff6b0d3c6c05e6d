"""What a tail or a wait of the MCP server reads and gives is bounded in bytes, not in events
alone: a session of large events costs a reader what one answer may hold, and the answer says
where to read on. Counted on the store's reads, in process."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from mcp import Client

import ledger_bus
from ledger_bus.access.identity import Identity
from ledger_bus.mcp.server import build_server
from ledger_bus.model.artifacts import ArtifactRef
from ledger_bus.model.records import RecordedEvent
from ledger_bus.store.base import EventStore

MB = 1_000_000


def _size(value: Any) -> int:
    if isinstance(value, bytes):
        return len(value)
    if isinstance(value, list):
        return sum(_size(v) for v in value)
    if isinstance(value, RecordedEvent):
        return len(json.dumps(value.fields, default=ArtifactRef.to_dict))
    return 0


class Reads:
    """The bytes a store's reads return, counted by wrapping its read methods."""

    def __init__(self, store: EventStore):
        self.total = 0
        self.largest = 0
        for name in ("tail", "scan_session", "wait_session", "read_stream", "artifact"):
            setattr(store, name, self._counted(getattr(store, name)))

    def _counted(self, read: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            found = read(*args, **kwargs)
            size = _size(found)
            self.total += size
            self.largest = max(self.largest, size)
            return found

        return counted


def _big(store: EventStore, session: str, n: int, first: int = 0) -> None:
    ref = ledger_bus.StreamId(session, "main")
    for k in range(first, first + n):
        body = f"{k:04d}" + "x" * (MB - 4)
        event = {"type": "message", "agent": "a", "body": body}
        store.append(ref, ledger_bus.ANY, f"a{k}", [event])


async def _call(client: Client, tool: str, **args: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, args)
    assert not result.is_error, result.content
    found: dict[str, Any] | None = result.structured_content
    assert found is not None
    return found


def test_a_tail_of_large_events_reads_and_gives_one_answers_worth_and_says_where_to_go_on() -> None:
    # Given a session of twenty events of 1 MB
    store = ledger_bus.connect("memory://")
    _big(store, "big", 20)
    reads = Reads(store)

    async def scenario(client: Client) -> None:
        # When its tail of 20 is asked for
        tail = await _call(client, "tail", session="big", n=20)
        # Then it reads and gives about one event's worth (its byte budget), not twenty
        given = sum(len(e["body"]) for e in tail["events"])
        assert 0 < given <= 2 * MB, given
        assert reads.total <= 3 * MB, f"a tail read {reads.total:,} bytes"
        # and says it stopped short, with the cursor to read on before
        assert tail["truncated"] is True
        assert tail["before"] == tail["events"][0]["cursor"]
        bodies = [e["body"][:4] for e in tail["events"]]
        older = await _call(client, "tail", session="big", n=20, before=tail["before"])
        more = [e["body"][:4] for e in older["events"]]
        assert more, older
        assert more[-1] == f"{int(bodies[0]) - 1:04d}", (more, bodies)
        # and a tail of small events is whole, as before
        small = ledger_bus.StreamId("small", "main")
        store.append(small, 0, "s", [{"type": "message", "agent": "a", "body": "hi"}] * 3)
        whole = await _call(client, "tail", session="small", n=20)
        assert (len(whole["events"]), whole["truncated"], whole["before"]) == (3, False, None)

    asyncio.run(_run(build_server(store, Identity("reader", "reader")), scenario))


def test_a_wait_for_large_events_gives_one_answers_worth_and_its_cursor_goes_on_from_there() -> (
    None
):
    store = ledger_bus.connect("memory://")
    _big(store, "big", 1)
    (start,) = store.tail("big", 1)
    _big(store, "big", 10, first=1)
    reads = Reads(store)

    async def scenario(client: Client) -> None:
        seen: list[str] = []
        cursor = start.cursor
        for _ in range(20):
            found = await _call(client, "wait", session="big", after=cursor, timeout_s=0)
            if not found["events"]:
                break
            seen += [e["body"][:4] for e in found["events"]]
            assert sum(len(e["body"]) for e in found["events"]) <= 2 * MB
            cursor = found["cursor"]
        # Every event once, in order, each answer within its budget
        assert seen == [f"{k:04d}" for k in range(1, 11)]
        assert reads.largest <= 2 * MB, f"one read of {reads.largest:,} bytes"

    asyncio.run(_run(build_server(store, Identity("reader", "reader")), scenario))


async def _run(server: Any, scenario: Callable[[Client], Any]) -> None:
    async with Client(server) as client:
        await scenario(client)
