"""A Node process of the TypeScript SDK (typescript/test/support/peer.ts), driven a request a
line, for the cross-language tests."""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any

import pytest

from tests.support.helpers import ROOT

TYPESCRIPT = ROOT / "typescript"


def node_ready() -> str | None:
    """Why the TypeScript SDK cannot run here, or None when it can."""
    if shutil.which("node") is None:
        return "no node on PATH"
    if not (TYPESCRIPT / "node_modules" / "ioredis").is_dir():
        return "typescript/node_modules is missing: `make test` runs `npm ci` there first"
    if not (TYPESCRIPT / "lua" / "append.lua").is_file():
        return "typescript/lua is missing: `npm run lua` (make test runs it)"
    return None


def need_node() -> None:
    why = node_ready()
    if why is not None:
        pytest.skip(f"THE TYPESCRIPT SDK IS NOT TESTED: {why}")


class NodePeer:
    """`node peer.ts URL PREFIX`: requests as JSON lines in, replies as JSON lines out."""

    def __init__(self, url: str, prefix: str):
        self.process = subprocess.Popen(
            ["node", "--import", "tsx", "test/support/peer.ts", url, prefix],
            cwd=TYPESCRIPT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        # Started (tsx compiles the SDK as it loads) and connected before the test goes on.
        self.ask("ping")

    def send(self, op: str, **request: Any) -> None:
        """Send a request without waiting for its reply (`reply()` reads it)."""
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"op": op, **request}) + "\n")
        self.process.stdin.flush()

    def reply(self) -> Any:
        """The next reply's value; AssertionError carrying an error reply."""
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line, f"the node peer ended (exit {self.process.poll()})"
        found = json.loads(line)
        if "error" in found:
            raise NodeError(found["error"], found["message"])
        return found["ok"]

    def ask(self, op: str, **request: Any) -> Any:
        self.send(op, **request)
        return self.reply()

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()

    def __enter__(self) -> NodePeer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class NodeError(Exception):
    """An error reply: the TypeScript error's class name and message."""

    def __init__(self, name: str, message: str):
        super().__init__(f"{name}: {message}")
        self.name = name
        self.message = message
