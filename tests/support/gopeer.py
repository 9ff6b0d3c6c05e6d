"""A Go process of the Go SDK (go/internal/peer), driven a request a line, for the
cross-language tests: the same requests and replies as the Node peer's (tests/support/node.py)."""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tests.support.helpers import ROOT

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
def peer_binary() -> Path:
    """The peer, built once a run (go's build cache makes a rebuild of the same source quick)."""
    target = Path(tempfile.mkdtemp(prefix="lb-gopeer-")) / "peer"
    built = subprocess.run(
        ["go", "build", "-o", str(target), "./internal/peer"],
        cwd=GO_MODULE,
        capture_output=True,
        text=True,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    return target


class GoPeer:
    """`peer URL PREFIX`: requests as JSON lines in, replies as JSON lines out."""

    def __init__(self, url: str, prefix: str):
        self.process = subprocess.Popen(
            [str(peer_binary()), url, prefix],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.ask("ping")  # connected before the test goes on

    def send(self, op: str, **request: Any) -> None:
        """Send a request without waiting for its reply (`reply()` reads it)."""
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"op": op, **request}) + "\n")
        self.process.stdin.flush()

    def reply(self) -> Any:
        """The next reply's value; GoError carrying an error reply."""
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line, f"the go peer ended (exit {self.process.poll()})"
        found = json.loads(line)
        if "error" in found:
            raise GoError(found["error"], found["message"])
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

    def __enter__(self) -> GoPeer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class GoError(Exception):
    """An error reply: the ledger's name of the error's kind (or the Go type) and its message."""

    def __init__(self, name: str, message: str):
        super().__init__(f"{name}: {message}")
        self.name = name
        self.message = message
