"""`ledger-bus mcp --http`: streamable HTTP with bearer tokens, the server a process of its own
on a real redis-server, its clients the MCP SDK's. Each token's role and sessions are held, a
refusal leaves every key of the ledger as it was, a request without a valid token gets no
further than HTTP, and 20 clients posting at once are each kept once, in gapless versions."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

import ledger_bus
from ledger_bus.access.identity import Identity
from ledger_bus.access.tokens import add_token
from ledger_bus.demo.server import free_port
from ledger_bus.store.base import EventStore
from tests.support.helpers import ledger_keys, ledger_serving


@pytest.fixture
def tokens(tmp_path: Path) -> dict[str, Any]:
    """Tokens of each role, one of another team's, and the file that holds their digests."""
    file = str(tmp_path / "tokens.json")
    return {
        "file": file,
        "writer": add_token(file, Identity("alice", "writer", "team-a-*")),
        "reader": add_token(file, Identity("viewer", "reader", "team-a-*")),
        "operator": add_token(file, Identity("ops", "operator", "team-a-*")),
        "other": add_token(file, Identity("bob", "operator", "team-b-*")),
    }


@pytest.fixture
def url(redis_url: str, prefix: str, tokens: dict[str, Any], tmp_path: Path) -> Iterator[str]:
    port = free_port()
    command = ["mcp", "--http", "--port", str(port), "--tokens", tokens["file"]]
    with ledger_serving(redis_url, prefix, port, tmp_path / "server.log", *command):
        yield f"http://127.0.0.1:{port}/mcp"


async def _as(url: str, token: str | None, tool: str, **args: Any) -> Any:
    """One call as the token's holder: the tool's result."""
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        return await client.call_tool(tool, args)


def _text(result: Any) -> str:
    return " ".join(c.text for c in result.content if c.type == "text")


def test_a_writer_posts_as_its_token_says(
    url: str, tokens: dict[str, Any], redis_store: EventStore
) -> None:
    result = asyncio.run(_as(url, tokens["writer"], "post", session="team-a-1", body="hello"))
    assert not result.is_error, _text(result)
    (event,) = redis_store.read_stream(ledger_bus.StreamId("team-a-1", "posts-alice"))
    assert (event.agent, event.get("body")) == ("alice", "hello")
    tail = asyncio.run(_as(url, tokens["reader"], "tail", session="team-a-1"))
    assert [e["body"] for e in tail.structured_content["events"]] == ["hello"]


@pytest.mark.parametrize(
    ("who", "tool", "args"),
    [
        ("reader", "post", {"session": "team-a-1", "body": "x"}),
        ("reader", "dispatch_open", {"session": "team-a-1", "role": "r", "objective": "o"}),
        ("writer", "resolve", {"session": "team-a-1", "attempt_id": "a1", "outcome": "unknown"}),
        ("other", "post", {"session": "team-a-1", "body": "x"}),
        ("other", "tail", {"session": "team-a-1"}),
        ("other", "resolve", {"session": "team-a-1", "attempt_id": "a1", "outcome": "unknown"}),
    ],
)
def test_what_a_token_may_not_do_is_refused_and_writes_nothing(
    url: str,
    tokens: dict[str, Any],
    redis_url: str,
    prefix: str,
    redis_store: EventStore,
    who: str,
    tool: str,
    args: dict[str, Any],
) -> None:
    call = {"type": "tool_call", "agent": "worker", "tool": "deploy", "attempt_id": "a1"}
    redis_store.append(ledger_bus.StreamId("team-a-1", "run-r1"), 0, "r1:1", [call])
    before = ledger_keys(redis_url, prefix)
    result = asyncio.run(_as(url, tokens[who], tool, **args))
    assert result.is_error
    assert "Refused: " in _text(result)
    assert ledger_keys(redis_url, prefix) == before
    # The operator of the session's team may.
    if tool == "resolve":
        done = asyncio.run(_as(url, tokens["operator"], tool, **args))
        assert not done.is_error, _text(done)


@pytest.mark.parametrize("token", [None, "lbt_not-a-token"])
def test_a_request_without_a_valid_token_gets_no_further_than_http(
    url: str, token: str | None, redis_url: str, prefix: str
) -> None:
    before = ledger_keys(redis_url, prefix)
    headers = {"Accept": "application/json, text/event-stream"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    answered = httpx2.post(url, json=body, headers=headers)
    assert answered.status_code == 401
    assert "Bearer" in answered.headers["WWW-Authenticate"]
    with pytest.raises(BaseException):  # noqa: B017, PT011  (the SDK's own group of errors)
        asyncio.run(_as(url, token, "post", session="team-a-1", body="x"))
    assert ledger_keys(redis_url, prefix) == before


def test_twenty_clients_posting_at_once_are_each_kept_once(
    url: str, tokens: dict[str, Any], redis_store: EventStore
) -> None:
    async def post(n: int) -> Any:
        return await _as(
            url,
            tokens["writer"],
            "post",
            session="team-a-busy",
            body=f"post {n}",
            append_id=f"p-{n}",
        )

    async def all_at_once() -> list[Any]:
        return await asyncio.gather(*(post(n) for n in range(20)))

    results = asyncio.run(all_at_once())
    assert [r.is_error for r in results] == [False] * 20
    # A client whose reply was lost retries with its append id: kept once.
    again = asyncio.run(post(7))
    assert again.structured_content["deduplicated"] is True
    events = redis_store.read_stream(ledger_bus.StreamId("team-a-busy", "posts-alice"))
    assert [e.version for e in events] == list(range(1, 21))
    assert sorted(e.get("body") for e in events) == sorted(f"post {n}" for n in range(20))


def test_a_subscriber_is_told_when_another_client_posts(url: str, tokens: dict[str, Any]) -> None:
    uri = "ledger://sessions/team-a-live/tail"

    async def scenario() -> Any:
        headers = {"Authorization": f"Bearer {tokens['reader']}"}
        async with (
            httpx2.AsyncClient(headers=headers) as http,
            Client(streamable_http_client(url, http_client=http)) as client,
            client.listen(resource_subscriptions=[uri]) as subscription,
        ):
            posted = await _as(url, tokens["writer"], "post", session="team-a-live", body="hi")
            assert not posted.is_error, _text(posted)
            with anyio.fail_after(1.0):  # the bound: told within a second
                return await subscription.__anext__()

    told = asyncio.run(scenario())
    assert told.uri == uri
