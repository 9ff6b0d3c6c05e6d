"""A real agent framework on `ledger-bus mcp`, as its users wire it: an OpenAI Agents SDK agent,
its model scripted (no network), given the server through the SDK's own MCP support, over stdio
and over streamable HTTP with a token. It tails a session, posts to it, and the record it leaves
is read back by `ledger-bus tail`."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents")
pytest.importorskip("mcp")

from agents import Agent, Runner, set_tracing_disabled
from agents.mcp import MCPServer, MCPServerStdio, MCPServerStreamableHttp
from agents.testing import ScriptedModel, assistant_message, function_call

import ledger_bus as lb
from ledger_bus.access.identity import Identity
from ledger_bus.access.tokens import add_token
from ledger_bus.demo.server import free_port
from ledger_bus.store.base import EventStore
from tests.support.events import msg
from tests.support.helpers import cli_env, ledger_cli, ledger_keys, ledger_serving

set_tracing_disabled(True)  # no trace export: these runs have no OpenAI account


def _outputs(model: ScriptedModel) -> dict[str, str]:
    """The tool outputs the model was given, by call id, from the last request it saw (an
    output of text parts, as the SDK gives an MCP tool's content, joined)."""
    last = model.last_call
    assert last is not None
    found = {}
    for item in last.input:
        if isinstance(item, dict) and item.get("type") == "function_call_output":
            output = item["output"]
            if isinstance(output, list):
                output = "".join(part["text"] for part in output if part["type"] == "input_text")
            found[item["call_id"]] = output
    return found


async def _work(server: MCPServer, steps: list[Any]) -> ScriptedModel:
    """A run of an agent that has the server's tools and a model that takes `steps`."""
    model = ScriptedModel([*steps, [assistant_message("done")]])
    agent = Agent(name="support", model=model, mcp_servers=[server])
    result = await Runner.run(agent, "join the release session and report")
    assert result.final_output == "done"
    assert model.remaining_steps == 0
    return model


def _seeded(store: EventStore) -> None:
    store.append(
        lb.StreamId("team-a-1", "plan"), 0, "p1", [msg("ship once the tests pass", "lead")]
    )


def _tailed(url: str, prefix: str) -> list[dict[str, Any]]:
    done = ledger_cli(url, prefix, "tail", "team-a-1", "-n", "10", "-o", "jsonl")
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_an_agents_sdk_agent_over_stdio_tails_then_posts_as_its_agent(
    redis_url: str, prefix: str, redis_store: EventStore
) -> None:
    _seeded(redis_store)
    server = MCPServerStdio(
        params={
            "command": sys.executable,
            "args": ["-m", "ledger_bus", "mcp", "--agent", "support", "--sessions", "team-a-*"],
            "env": cli_env(redis_url, prefix),
        },
        name="ledger",
        client_session_timeout_seconds=30,
    )
    steps = [
        [function_call("tail", {"session": "team-a-1", "n": 20}, call_id="c-tail")],
        [
            function_call(
                "post",
                {"session": "team-a-1", "body": "tests pass: shipping", "append_id": "s-1"},
                call_id="c-post",
            )
        ],
    ]

    async def scenario() -> ScriptedModel:
        async with server:
            return await _work(server, steps)

    model = asyncio.run(scenario())
    # The model read the session through the tail: the lead's message reached it
    outputs = _outputs(model)
    assert "ship once the tests pass" in outputs["c-tail"]
    posted = json.loads(outputs["c-post"])
    assert (posted["stream"], posted["first_version"], posted["deduplicated"]) == (
        "posts-support",
        1,
        False,
    )
    # and what it posted is on the ledger as the server's agent, after the lead's message
    tailed = _tailed(redis_url, prefix)
    assert [(e["agent"], e["type"], e["body"]) for e in tailed] == [
        ("lead", "message", "ship once the tests pass"),
        ("support", "message", "tests pass: shipping"),
    ]


def test_an_agents_sdk_agent_over_http_posts_as_its_token_and_is_refused_elsewhere(
    redis_url: str, prefix: str, redis_store: EventStore, tmp_path: Path
) -> None:
    _seeded(redis_store)
    file = str(tmp_path / "tokens.json")
    token = add_token(file, Identity("alice", "writer", "team-a-*"))
    port = free_port()
    command = ["mcp", "--http", "--port", str(port), "--tokens", file]
    steps = [
        [function_call("tail", {"session": "team-a-1"}, call_id="c-tail")],
        [
            function_call(
                "post",
                {"session": "team-a-1", "kind": "release.approved", "fields": {"by": "qa"}},
                call_id="c-post",
            )
        ],
        # another team's session: the model is told, in one line, and nothing is written
        [function_call("post", {"session": "team-b-1", "body": "hello"}, call_id="c-other")],
    ]
    with ledger_serving(redis_url, prefix, port, tmp_path / "mcp.log", *command):
        server = MCPServerStreamableHttp(
            params={
                "url": f"http://127.0.0.1:{port}/mcp",
                "headers": {"Authorization": f"Bearer {token}"},
            },
            name="ledger",
            client_session_timeout_seconds=30,
        )

        async def scenario() -> ScriptedModel:
            async with server:
                return await _work(server, steps)

        before_other = ledger_keys(redis_url, prefix)
        model = asyncio.run(scenario())
    outputs = _outputs(model)
    assert "ship once the tests pass" in outputs["c-tail"]
    assert "Refused: session 'team-b-1' is outside alice's sessions" in outputs["c-other"]
    assert "\n" not in outputs["c-other"].strip()
    tailed = _tailed(redis_url, prefix)
    assert [(e["agent"], e["type"]) for e in tailed] == [("lead", "message"), ("alice", "mutation")]
    assert tailed[1]["kind"] == "release.approved"
    assert tailed[1]["by"] == "qa"
    # the refused post wrote nothing: the only keys that changed are team a's
    after = ledger_keys(redis_url, prefix)
    assert not [k for k in set(after) - set(before_other) if b"team-b" in k]
