"""The conversation-log mirror: a file that follows a session, killed and restarted, the same
as a fresh export."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import ledger_bus as lb
from tests.support.helpers import cli_env
from tests.support.helpers import ledger_cli as ledger


def test_the_mirror_survives_sigkill_and_restart_identical_to_a_fresh_export(
    cli_url: str, prefix: str, tmp_path: Path
) -> None:
    env = cli_env(cli_url, prefix)
    store = lb.connect(cli_url, prefix=prefix)
    ref = lb.StreamId("mirrored", "main")

    def write(start: int, count: int) -> None:
        for i in range(start, start + count):
            store.append(
                ref, lb.ANY, str(i), [{"type": "message", "agent": "a", "body": f"line {i}\nnext"}]
            )

    write(0, 50)
    mirror = [sys.executable, "-m", "ledger_bus", "mirror", "mirrored", "--dir", str(tmp_path)]
    path = tmp_path / "mirrored" / "conversation.jsonl"
    first = subprocess.Popen(mirror, env=env)
    writer_done = False
    try:
        deadline = time.monotonic() + 30
        while not path.exists() or path.read_text().count("\n") < 50:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        write(50, 100)
        writer_done = True
        first.send_signal(signal.SIGKILL)
        first.wait()
        write(150, 50)  # committed while no mirror runs
        with open(path, "a", encoding="utf-8") as out:
            out.write('{"session":"mirrored","cursor":"17959')  # as if killed mid-write

        second = subprocess.Popen(mirror, env=env)
        try:
            export = ledger(cli_url, prefix, "export", "mirrored").stdout
            assert export.count("\n") == 200
            deadline = time.monotonic() + 30
            while path.read_text() != export:
                assert time.monotonic() < deadline, "the mirror never matched the export"
                time.sleep(0.05)
        finally:
            second.terminate()
            assert second.wait(timeout=10) == 0
    finally:
        if first.poll() is None:
            first.kill()
        store.close()
    assert writer_done
    assert [json.loads(line)["body"] for line in path.read_text().splitlines()][
        -1
    ] == "line 199\nnext"
