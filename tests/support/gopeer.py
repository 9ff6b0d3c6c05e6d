"""A Go process of the Go SDK (go/internal/peer), driven a request a line (tests/support/peer.py),
for the cross-language tests: the same requests and replies as the Node peer's."""

from __future__ import annotations

import functools
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.support.helpers import ROOT
from tests.support.peer import LinePeer

GO_MODULE = ROOT / "go"


def go_ready() -> str | None:
    """Why the Go SDK cannot run here, or None when it can."""
    if shutil.which("go") is None:
        return "no go on PATH (the Go SDK needs Go 1.26 or newer)"
    return None


def need_go() -> None:
    why = go_ready()
    if why is not None:
        pytest.skip(f"THE GO SDK IS NOT TESTED: {why}")


@functools.cache
def go_program(module: Path, package: str) -> Path:
    """The program `package` of the Go module in `module`, built once a run (go's build cache
    makes a rebuild of the same source quick)."""
    target = Path(tempfile.mkdtemp(prefix="lb-go-")) / Path(package).name
    built = subprocess.run(
        ["go", "build", "-o", str(target), package],
        cwd=module,
        capture_output=True,
        text=True,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    return target


def peer_binary() -> Path:
    """The peer."""
    return go_program(GO_MODULE, "./internal/peer")


class GoPeer(LinePeer):
    """`peer URL PREFIX`: the Go SDK, a request a line."""

    def __init__(self, url: str, prefix: str):
        super().__init__([str(peer_binary()), url, prefix])
