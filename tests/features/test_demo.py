"""The demo run whole: eight tasks done, a worker SIGKILLed mid-call and its task taken over, the
reconciler flagging the call it left open."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_the_demo_runs_to_completion_and_a_killed_worker_is_taken_over() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("LEDGER_BUS_URL", "LEDGER_BUS_PREFIX")}
    done = subprocess.run(
        [sys.executable, "-m", "ledger_bus", "demo", "--no-live", "--private"],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr + done.stdout
    assert "8/8 tasks done" in done.stdout
    assert "SIGKILL" in done.stdout
    assert "was killed mid-call; another worker took over its task" in done.stdout
    assert "the reconciler flagged" in done.stdout
    assert done.stdout.count("reconcile.unresolved") == 1
