"""A test's program in a process of its own, told what to do a line at a time on stdin and
answering a line each on stdout, that a test may stop (SIGSTOP) and continue: what the fencing
drills drive (tests.support.lease_holder, tests.support.adk_worker's `hold`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


class LineProcess:
    """`python -m MODULE ARGS...`, a command and its answer at a time."""

    def __init__(self, module: str, *args: str):
        self.process = subprocess.Popen(
            [sys.executable, "-m", module, *args],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def queue(self, command: str) -> None:
        """Write a command without waiting for its answer (the process may be stopped)."""
        assert self.process.stdin is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()

    def answer(self) -> str:
        assert self.process.stdout is not None
        line = self.process.stdout.readline().strip()
        assert line, f"the process ended (exit {self.process.poll()})"
        return line

    def ask(self, command: str) -> str:
        self.queue(command)
        return self.answer()

    def ok(self, command: str) -> str:
        """ask, the answer held to be `ok ...`."""
        answer = self.ask(command)
        assert answer.startswith("ok"), f"{command}: {answer}"
        return answer

    def stop(self) -> None:
        os.kill(self.process.pid, signal.SIGSTOP)

    def cont(self) -> None:
        os.kill(self.process.pid, signal.SIGCONT)

    def close(self) -> None:
        self.cont()
        self.process.kill()
        self.process.communicate()  # waits, and closes its pipes
