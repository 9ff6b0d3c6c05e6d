"""A dispatch opened over MCP is the caller's, and its agent (the spawn-log's `agent`: who takes
the work on) follows the board's rule: none when it is dispatched, unless the caller takes it on
itself, and filled in when the work returns, by the agent that closes a dispatch another opened.
No caller names another agent, as the opener or as the one the work is given to."""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime
from typing import Any

import pytest
from mcp import Client

import ledger_bus
from ledger_bus.access.identity import Identity
from ledger_bus.board.dispatches import Board
from ledger_bus.mcp.server import build_server
from ledger_bus.model.errors import InvalidInput
from ledger_bus.store.base import EventStore

WORK = {"session": "s", "role": "coder", "objective": "fix the build"}


def _as(store: EventStore, agent: str, tool: str, **args: Any) -> Any:
    """One call as a writer named `agent`: the tool's result."""

    async def go() -> Any:
        async with Client(build_server(store, Identity(agent, "writer"))) as client:
            return await client.call_tool(tool, args)

    return asyncio.run(go())


def _ok(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    found: dict[str, Any] = result.structured_content
    inner: dict[str, Any] = found.get("result", found)
    return inner


def _refused(result: Any) -> str:
    assert result.is_error
    (text,) = [c.text for c in result.content if c.type == "text"]
    return re.sub(r"^Error executing tool [^:]+: ", "", text)


def _record(store: EventStore, dispatch_id: str) -> dict[str, Any]:
    return Board(store, "s").state().records[dispatch_id]


@pytest.mark.parametrize(
    "fields",
    [{"agent": "someone-else"}, {"by": "the-boss"}, {"agent": "lead", "by": "the-boss"}],
)
def test_a_writer_may_not_name_another_agent_on_a_dispatch(fields: dict[str, Any]) -> None:
    store = ledger_bus.connect("memory://")
    refused = _refused(_as(store, "lead", "dispatch_open", **WORK, fields=fields))
    assert refused.startswith("Refused: "), refused
    assert store.sessions() == [], "a refusal writes nothing"


def test_a_dispatch_is_its_callers_and_its_agent_is_filled_in_when_the_work_returns() -> None:
    store = ledger_bus.connect("memory://")
    # Dispatched: opened by the caller, nobody on it yet
    handed = _ok(_as(store, "lead", "dispatch_open", **WORK))["id"]
    assert (_record(store, handed)["by"], _record(store, handed)["agent"]) == ("lead", None)
    # Returned: the agent that closes another's dispatch is the one that did it
    _ok(_as(store, "coder-7", "dispatch_close", session="s", dispatch_id=handed, outcome="done"))
    assert _record(store, handed)["agent"] == "coder-7"
    # A caller may take its own dispatch on, and say so when it opens it
    mine = _ok(_as(store, "lead", "dispatch_open", **WORK, fields={"agent": "lead"}))["id"]
    assert _record(store, mine)["agent"] == "lead"
    # A dispatch its opener closes (cancelled, say) names no agent that did not take it on
    dropped = _ok(_as(store, "lead", "dispatch_open", **WORK))["id"]
    _ok(_as(store, "lead", "dispatch_close", session="s", dispatch_id=dropped, outcome="cancelled"))
    assert _record(store, dropped)["agent"] is None
    # and an agent already on a dispatch stays its agent whoever closes it
    _ok(_as(store, "coder-9", "dispatch_close", session="s", dispatch_id=mine, outcome="done"))
    assert _record(store, mine)["agent"] == "lead"


def test_the_board_takes_an_agent_that_is_a_name_or_none() -> None:
    store = ledger_bus.connect("memory://")
    board = Board(store, "s")
    now = datetime.now(UTC)
    for bad in (3, {"name": "x"}, "has space", ""):
        with pytest.raises(InvalidInput):
            board.open("coder", "o", now, {"agent": bad})
    assert store.sessions() == []
    opened = board.open("coder", "o", now, {"agent": "coder-1"})
    assert board.state().records[opened]["agent"] == "coder-1"
