"""`ledger_bus.testing` as a project outside this repository uses it: its own test module, its own
`store` fixture, nothing of this repository's tests or conftest."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ledger_bus.testing import contract

THEIRS = """
import pytest
import ledger_bus
from ledger_bus.testing.contract import *  # noqa: F403


@pytest.fixture
def store():
    return ledger_bus.connect("memory://")
"""


def test_a_store_written_elsewhere_runs_the_contract_suite_with_its_own_fixture(
    tmp_path: Path,
) -> None:
    # Given a project of its own: a test module, a `store` fixture, no conftest of ours
    (tmp_path / "test_my_store.py").write_text(THEIRS)
    # When pytest runs it there
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_my_store.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    # Then every test of the suite ran there and passed
    assert done.returncode == 0, done.stdout[-3000:]
    collected = int(done.stdout.strip().splitlines()[-1].split()[0])
    assert collected >= len(contract.__all__) > 20
