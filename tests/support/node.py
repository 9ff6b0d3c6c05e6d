"""A Node process of the TypeScript SDK (typescript/test/support/peer.ts), driven a request a
line, for the cross-language tests."""

from __future__ import annotations

import shutil

import pytest

from tests.support.helpers import ROOT
from tests.support.peer import LinePeer

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


class NodePeer(LinePeer):
    """`node peer.ts URL PREFIX`: the TypeScript SDK, a request a line (tsx compiles the SDK as
    it loads)."""

    def __init__(self, url: str, prefix: str):
        super().__init__(
            ["node", "--import", "tsx", "test/support/peer.ts", url, prefix], cwd=TYPESCRIPT
        )
