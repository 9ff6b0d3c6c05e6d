"""`ledger_bus.testing` as a project outside this repository uses it: its own test module, its own
`store` fixture, nothing of this repository's tests or conftest."""

from __future__ import annotations

from pathlib import Path

from ledger_bus.testing import contract
from tests.support.helpers import passed_in, pytest_elsewhere

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
    code, said = pytest_elsewhere(tmp_path, "test_my_store.py")
    # Then every test of the suite ran there and passed
    assert code == 0, said
    collected = passed_in(said)
    assert collected >= len(contract.__all__) > 20
