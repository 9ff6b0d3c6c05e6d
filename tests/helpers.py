"""What several test modules do alike: run the command, start a recorded run to crash."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The keys every JSONL event line starts with, in this order (spec/ledger-v1.md).
LEDGER_KEYS = ["session", "stream", "version", "cursor", "type", "agent", "event_id", "recorded_at"]


def cli_env(url: str, prefix: str) -> dict[str, str]:
    return {**os.environ, "LEDGER_BUS_URL": url, "LEDGER_BUS_PREFIX": prefix}


def ledger_cli(
    url: str, prefix: str, *args: str, stdin: str = "", timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """`ledger-bus ARGS` as a user runs it, against `url` with key prefix `prefix`."""
    return subprocess.run(
        [sys.executable, "-m", "ledger_bus", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=cli_env(url, prefix),
        timeout=timeout,
        check=False,
    )


def start_recorded(
    url: str, prefix: str, folder: Path, safe: str
) -> tuple[subprocess.Popen[str], Path]:
    """A recorded run (session "crash", run "r1") stopped inside its second call, unresolved;
    returns the process and the file where its tools note their side effects."""
    marker = folder / "effects.txt"
    args = ["recorded", url, prefix, "crash", "r1", str(marker), safe]
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.workers", *args], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "calling the slow tool"
    deadline = time.monotonic() + 30
    while "deploy prod started" not in (marker.read_text() if marker.exists() else ""):
        assert time.monotonic() < deadline, "the slow call never started"
        time.sleep(0.05)
    return proc, marker


def kill(proc: subprocess.Popen[str]) -> None:
    """SIGKILL, as a crash: no handler runs, nothing is flushed."""
    proc.kill()
    proc.wait()
    if proc.stdout:
        proc.stdout.close()
