"""`ledger-bus mcp --http` shared by teams: one token cannot take what the others need (MCP
sessions, the threads that serve waits, subscription streams), and a token taken out of the
tokens file stops reading at once, its open subscriptions included. The server a process of its
own on a real redis-server; the clients the MCP SDK's, or plain HTTP for the protocol's older
handshake, which is what opens sessions."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Iterator
from contextlib import AsyncExitStack, ExitStack, contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

import ledger_bus
from ledger_bus.access.identity import Identity
from ledger_bus.access.tokens import add_token
from ledger_bus.demo.server import free_port
from ledger_bus.store.base import EventStore
from tests.support.helpers import ledger_serving

OLDER = "2025-06-18"  # a handshake version: its `initialize` opens a session on the server


@pytest.fixture
def tokens(tmp_path: Path) -> dict[str, str]:
    """A writer and a reader of team a, and a team b with a noisy reader and a writer."""
    file = str(tmp_path / "tokens.json")
    return {
        "file": file,
        "alice": add_token(file, Identity("alice", "writer", "team-a-*")),
        "viewer": add_token(file, Identity("viewer", "reader", "team-a-*")),
        "noisy": add_token(file, Identity("noisy", "reader", "team-b-*")),
        "bob": add_token(file, Identity("bob", "writer", "team-b-*")),
    }


@contextmanager
def serving(redis_url: str, prefix: str, tmp_path: Path, file: str, *limits: str) -> Iterator[str]:
    port = free_port()
    command = ["mcp", "--http", "--port", str(port), "--tokens", file, *limits]
    with ledger_serving(redis_url, prefix, port, tmp_path / "server.log", *command):
        yield f"http://127.0.0.1:{port}/mcp"


@pytest.fixture
def url(redis_url: str, prefix: str, tokens: dict[str, str], tmp_path: Path) -> Iterator[str]:
    with serving(redis_url, prefix, tmp_path, tokens["file"]) as where:
        yield where


def revoke(file: str, agent: str) -> None:
    """Take the agent's tokens out of the file, as its owner would: the file written whole."""
    with open(file, encoding="utf-8") as f:
        data = json.load(f)
    data["tokens"] = [entry for entry in data["tokens"] if entry["agent"] != agent]
    with open(file + ".new", "w", encoding="utf-8") as f:
        json.dump(data, f)
    os.replace(file + ".new", file)


async def client_of(stack: AsyncExitStack, url: str, token: str) -> Client:
    http = await stack.enter_async_context(
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
    )
    return await stack.enter_async_context(Client(streamable_http_client(url, http_client=http)))


def _text(result: Any) -> str:
    return " ".join(c.text for c in result.content if c.type == "text")


def _headers(token: str, session: str | None = None) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"}
    if session is not None:
        headers |= {"mcp-session-id": session, "mcp-protocol-version": OLDER}
    return headers


def initialize(http: httpx.Client, url: str, token: str) -> httpx.Response:
    """The older handshake's `initialize`, as a client of that version sends it."""
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": OLDER,
            "capabilities": {},
            "clientInfo": {"name": "drill", "version": "0"},
        },
    }
    return http.post(url, json=body, headers=_headers(token))


def alive(http: httpx.Client, url: str, token: str, session: str) -> bool:
    """Whether the server still holds the session (a ping in it is answered)."""
    ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
    answered = http.post(url, json=ping, headers=_headers(token, session))
    assert answered.status_code in (200, 404), answered.text
    return answered.status_code == 200


def test_a_flood_of_initialize_from_one_token_keeps_to_its_own_sessions(
    url: str, tokens: dict[str, str]
) -> None:
    with httpx.Client(timeout=30) as http:
        # Given a team a client in a session of its own
        mine = initialize(http, url, tokens["alice"])
        assert mine.status_code == 200, mine.text
        alices = mine.headers["mcp-session-id"]
        # When another team's reader opens 100 sessions and closes none
        opened = []
        for _ in range(100):
            answered = initialize(http, url, tokens["noisy"])
            assert answered.status_code == 200, answered.text
            opened.append(answered.headers["mcp-session-id"])
        # Then it holds at most its limit (32) of them: each new one closed its oldest idle one
        held = [s for s in opened if alive(http, url, tokens["noisy"], s)]
        assert 0 < len(held) <= 32, f"one token holds {len(held)} sessions"
        assert opened[-1] in held
        # and team a's session, and a new one of its, are as they were
        assert alive(http, url, tokens["alice"], alices)
        again = initialize(http, url, tokens["alice"])
        assert again.status_code == 200, again.text
        assert alive(http, url, tokens["alice"], again.headers["mcp-session-id"])


def test_a_token_whose_sessions_are_all_busy_is_refused_a_new_one_and_no_other_is(
    redis_url: str, prefix: str, tokens: dict[str, str], tmp_path: Path
) -> None:
    limits = ("--max-mcp-sessions", "2")
    with (
        serving(redis_url, prefix, tmp_path, tokens["file"], *limits) as where,
        httpx.Client(timeout=30) as http,
    ):
        # Given a token whose two sessions each hold a stream open (busy, not idle)
        busy = []
        for _ in range(2):
            answered = initialize(http, where, tokens["noisy"])
            assert answered.status_code == 200, answered.text
            busy.append(answered.headers["mcp-session-id"])
        with streams_open(http, where, tokens["noisy"], busy):
            # When it asks for a third
            refused = initialize(http, where, tokens["noisy"])
            # Then it is refused, saying why, and the two it holds go on
            assert refused.status_code == 429, refused.text
            said = refused.json()["error"]["message"]
            assert "2 MCP sessions" in said, said
            # and another team's token opens its session as before
            other = initialize(http, where, tokens["alice"])
            assert other.status_code == 200, other.text
        # Once its streams closed (and the server saw them go), its sessions are idle: a new
        # one takes the place of one of them (the least recently used of those seen idle)
        deadline = time.monotonic() + 10
        answered = initialize(http, where, tokens["noisy"])
        while answered.status_code == 429 and time.monotonic() < deadline:
            time.sleep(0.1)
            answered = initialize(http, where, tokens["noisy"])
        assert answered.status_code == 200, answered.text
        newest = answered.headers["mcp-session-id"]
        assert alive(http, where, tokens["noisy"], newest)
        assert sum(alive(http, where, tokens["noisy"], s) for s in busy) == 1


@contextmanager
def streams_open(http: httpx.Client, url: str, token: str, sessions: list[str]) -> Iterator[None]:
    """Each session holding its stream of server messages open (a GET), while the block runs."""
    with ExitStack() as stack:
        for session in sessions:
            headers = _headers(token, session) | {"Accept": "text/event-stream"}
            response = stack.enter_context(http.stream("GET", url, headers=headers))
            assert response.status_code == 200
        yield


def test_one_tokens_flood_of_waits_leaves_another_tokens_calls_answered(
    url: str, tokens: dict[str, str], redis_store: EventStore
) -> None:
    for session in ("team-a-1", "team-b-1"):
        redis_store.append(
            ledger_bus.StreamId(session, "main"),
            0,
            "a0",
            [{"type": "message", "agent": "x", "body": "start"}],
        )

    async def scenario() -> None:
        async with AsyncExitStack() as stack:
            noisy = await client_of(stack, url, tokens["noisy"])
            alice = await client_of(stack, url, tokens["alice"])
            bob = await client_of(stack, url, tokens["bob"])
            # Given 40 long waits at once from one token (more threads than serve waits)
            flood = [
                asyncio.ensure_future(
                    noisy.call_tool("wait", {"session": "team-b-1", "timeout_s": 25})
                )
                for _ in range(40)
            ]
            # Then those beyond its limit (8) are refused at once, saying so
            with anyio.move_on_after(10):
                while sum(task.done() for task in flood) < 32:
                    await asyncio.sleep(0.05)
            refused = [task.result() for task in flood if task.done()]
            assert len(refused) == 32, f"{len(refused)} of 40 waits of one token answered"
            assert all(r.is_error and "OverLimit: " in _text(r) for r in refused)
            held = [task for task in flood if not task.done()]
            # When another token waits with no timeout, waits a while, and tails
            with anyio.fail_after(10):
                quick = await alice.call_tool("wait", {"session": "team-a-1", "timeout_s": 0})
                tail = await alice.call_tool("tail", {"session": "team-a-1"})
                posted = await alice.call_tool("post", {"session": "team-a-1", "body": "hi"})
                waited = await alice.call_tool(
                    "wait", {"session": "team-a-1", "after": tail.structured_content["cursor"]}
                )
            # Then each is answered while the flood still holds its waits
            assert not any(task.done() for task in held), "the flood's waits ended first"
            assert not quick.is_error, _text(quick)
            assert [e["body"] for e in waited.structured_content["events"]] == ["hi"]
            assert not posted.is_error, _text(posted)
            # and the flood's waits end as a wait does: its session grew
            await bob.call_tool("post", {"session": "team-b-1", "body": "wake"})
            with anyio.fail_after(10):
                woken = await asyncio.gather(*held)
            assert all(not r.is_error for r in woken)

    asyncio.run(scenario())


def test_a_revoked_tokens_subscription_ends_at_the_next_event(
    url: str, tokens: dict[str, str]
) -> None:
    uri = "ledger://sessions/team-a-live/tail"

    async def scenario() -> None:
        async with AsyncExitStack() as stack:
            alice = await client_of(stack, url, tokens["alice"])
            viewer = await client_of(stack, url, tokens["viewer"])
            subscription = await stack.enter_async_context(
                viewer.listen(resource_subscriptions=[uri])
            )
            # Given a reader told that the session grew
            await alice.call_tool("post", {"session": "team-a-live", "body": "one"})
            with anyio.fail_after(2):
                told = await subscription.__anext__()
            assert told.uri == uri  # type: ignore[union-attr]
            # When its token is taken out of the file, and the session grows again
            revoke(tokens["file"], "viewer")
            # (a second on: the Redis store refreshes a session's last activity, which the
            # server watches, at most once a second)
            await anyio.sleep(1.1)
            await alice.call_tool("post", {"session": "team-a-live", "body": "two"})
            # Then its subscription ends, and tells it nothing more
            with anyio.fail_after(5):
                try:
                    more = await subscription.__anext__()
                except StopAsyncIteration:
                    return
                except Exception as ended:
                    said = str(ended.__cause__ or ended)
                    assert said.startswith("Refused: the token"), said
                    return
            pytest.fail(f"a revoked token's subscription was told {more!r}")

    asyncio.run(scenario())


def test_a_token_holds_its_limit_of_subscription_streams_and_no_more(
    redis_url: str, prefix: str, tokens: dict[str, str], tmp_path: Path
) -> None:
    uri = "ledger://sessions/team-a-1/tail"

    async def scenario(where: str) -> None:
        async with AsyncExitStack() as stack:
            viewer = await client_of(stack, where, tokens["viewer"])
            await stack.enter_async_context(viewer.listen(resource_subscriptions=[uri]))
            with pytest.raises(Exception) as refused:  # noqa: PT011  (the SDK's error)
                async with viewer.listen(resource_subscriptions=[uri]):
                    pass
            assert "OverLimit" in str(refused.value), refused.value
            alice = await client_of(stack, where, tokens["alice"])
            async with alice.listen(resource_subscriptions=[uri]):
                pass

    with serving(redis_url, prefix, tmp_path, tokens["file"], "--max-streams", "1") as where:
        asyncio.run(scenario(where))
