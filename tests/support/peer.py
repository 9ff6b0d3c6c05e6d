"""A process of another language's SDK driven a request a line, for the cross-language tests:
JSON requests in on its stdin, one JSON reply a line out, `{"ok": ...}` or `{"error": <the
error's name>, "message": ...}`. The Node peer (tests/support/node.py) and the Go peer
(tests/support/gopeer.py) are the two."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any, Self


class PeerError(Exception):
    """An error reply: the error's name as the ledger names its kind, and its message."""

    def __init__(self, name: str, message: str):
        super().__init__(f"{name}: {message}")
        self.name = name
        self.message = message


class LinePeer:
    """The process `command` (run in `cwd`), answering a request a line."""

    def __init__(self, command: list[str], cwd: Path | None = None):
        self.command = command
        self.process = subprocess.Popen(
            command, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        # Started and connected before the test goes on.
        self.ask("ping")

    def send(self, op: str, **request: Any) -> None:
        """Send a request without waiting for its reply (`reply()` reads it)."""
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"op": op, **request}) + "\n")
        self.process.stdin.flush()

    def reply(self) -> Any:
        """The next reply's value; PeerError carrying an error reply."""
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line, f"the peer {self.command[0]} ended (exit {self.process.poll()})"
        found = json.loads(line)
        if "error" in found:
            raise PeerError(found["error"], found["message"])
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

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
