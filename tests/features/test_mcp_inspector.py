"""An outside MCP client nobody here wrote: the MCP Inspector's command-line mode (npm
`@modelcontextprotocol/inspector`, from tests/inspector's lockfile, on the Node 22 it needs)
lists the server's tools and calls tail and post, over stdio and over streamable HTTP."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import ledger_bus as lb
from ledger_bus.access.identity import Identity
from ledger_bus.access.tokens import add_token
from ledger_bus.demo.server import free_port
from ledger_bus.store.base import EventStore
from tests.support.events import msg
from tests.support.helpers import ROOT, ledger_cli, ledger_keys, ledger_serving
from tests.support.node import node22

HERE = ROOT / "tests" / "inspector" / "node_modules"
INSPECTOR = HERE / ".bin" / "mcp-inspector"
NODE_22 = node22()  # the Inspector needs 22.19 or newer

pytestmark = [
    pytest.mark.skipif(
        not INSPECTOR.exists(), reason="no MCP Inspector: make test installs it (tests/inspector)"
    ),
    pytest.mark.skipif(
        NODE_22 is None,
        reason="no Node 22.19+ for the Inspector: tests/node22's is for Linux on x86-64 alone",
    ),
]
TOOLS = {
    "sessions",
    "tail",
    "wait",
    "post",
    "open_calls",
    "resolve",
    "dispatch_open",
    "dispatch_close",
    "dispatch_list",
}


def inspector(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`mcp-inspector --cli ARGS`, on Node 22, its catalog and settings under tmp_path."""
    first = Path(str(NODE_22)).parent
    env = {**os.environ, "PATH": f"{first}:{os.environ['PATH']}", "HOME": str(tmp_path)}
    return subprocess.run(
        [str(INSPECTOR), "--cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def answer(done: subprocess.CompletedProcess[str]) -> Any:
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def test_the_inspector_over_stdio_lists_the_tools_and_calls_tail_and_post(
    redis_url: str, prefix: str, redis_store: EventStore, tmp_path: Path
) -> None:
    redis_store.append(lb.StreamId("team-a-1", "plan"), 0, "p1", [msg("review the patch", "lead")])
    env = ["-e", f"LEDGER_BUS_URL={redis_url}", "-e", f"LEDGER_BUS_PREFIX={prefix}"]
    server = [sys.executable, "-m", "ledger_bus", "mcp", "--agent", "inspector"]

    def call(*args: str) -> subprocess.CompletedProcess[str]:
        return inspector(tmp_path, *env, *server, *args)

    listed = answer(call("--method", "tools/list"))
    assert {tool["name"] for tool in listed["tools"]} == TOOLS
    tail = ["--method", "tools/call", "--tool-name", "tail", "--tool-arg"]
    tailed = answer(call(*tail, "session=team-a-1", "n=5"))
    assert tailed["isError"] is False
    assert [e["body"] for e in tailed["structuredContent"]["events"]] == ["review the patch"]
    post = ["--method", "tools/call", "--tool-name", "post"]
    posted = answer(
        call(*post, "--tool-arg", "session=team-a-1", "body=looks good", "append_id=i-1")
    )
    assert posted["structuredContent"]["deduplicated"] is False
    again = answer(
        call(*post, "--tool-arg", "session=team-a-1", "body=looks good", "append_id=i-1")
    )
    assert again["structuredContent"]["deduplicated"] is True
    # A ledger error is the tool's error, one line naming it; the Inspector exits non-zero
    before = ledger_keys(redis_url, prefix)
    refused = call(*post, "--tool-arg", "session=bad name", "body=x")
    assert refused.returncode != 0
    text = json.loads(refused.stdout)["content"][0]["text"]
    assert text.startswith("Error executing tool post: InvalidInput: session id")
    assert "\n" not in text
    assert ledger_keys(redis_url, prefix) == before
    # The record, read back by the command: the post once, as the server's agent
    shown = ledger_cli(redis_url, prefix, "tail", "team-a-1", "-o", "jsonl")
    events = [json.loads(line) for line in shown.stdout.splitlines()]
    assert [(e["agent"], e["body"]) for e in events] == [
        ("lead", "review the patch"),
        ("inspector", "looks good"),
    ]


def test_the_inspector_over_http_with_a_token(
    redis_url: str, prefix: str, redis_store: EventStore, tmp_path: Path
) -> None:
    file = str(tmp_path / "tokens.json")
    token = add_token(file, Identity("alice", "writer", "team-a-*"))
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    command = ["mcp", "--http", "--port", str(port), "--tokens", file]
    with ledger_serving(redis_url, prefix, port, tmp_path / "mcp.log", *command):
        header = ["--header", f"Authorization: Bearer {token}"]
        listed = answer(inspector(tmp_path, url, *header, "--method", "tools/list"))
        assert {tool["name"] for tool in listed["tools"]} == TOOLS
        post = [url, *header, "--method", "tools/call", "--tool-name", "post", "--tool-arg"]
        posted = answer(inspector(tmp_path, *post, "session=team-a-1", "body=from the inspector"))
        assert posted["structuredContent"]["stream"] == "posts-alice"
        tail = [url, *header, "--method", "tools/call", "--tool-name", "tail", "--tool-arg"]
        tailed = answer(inspector(tmp_path, *tail, "session=team-a-1"))
        assert [(e["agent"], e["body"]) for e in tailed["structuredContent"]["events"]] == [
            ("alice", "from the inspector")
        ]
        # without the token: refused before any tool, and nothing written
        before = ledger_keys(redis_url, prefix)
        bare = inspector(
            tmp_path,
            url,
            "--method",
            "tools/call",
            "--tool-name",
            "post",
            "--tool-arg",
            "session=team-a-1",
            "body=x",
        )
        assert bare.returncode != 0
        # (a 401, on which the Inspector would go through OAuth, which needs a person)
        assert json.loads(bare.stderr or bare.stdout)["error"]["code"] == "auth_required"
        assert ledger_keys(redis_url, prefix) == before
