"""The Agents SDK's own session tests, from its sdist (fetched by `make test`), pointed at
LedgerSession: each builds its session with `SQLiteSession(session_id, db_path, ...)`, which here
gives a LedgerSession on a SQLite ledger at that path (or the memory store for an in-memory one).
Every test of the Session protocol passes; those named `test_sqlite_session_*` test the SQLite
session's own machinery (its worker threads' connections, its file lock, rows corrupted by hand,
rollbacks and cancellations inside its transactions) and are not the protocol's."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.support.suites import run_suite

pytest.importorskip("agents")
pytest.importorskip("pytest_asyncio")

SDIST = Path(sys.prefix) / "agents-sdist"
SUITES = ("tests/memory/test_session.py", "tests/memory/test_session_limit.py")
CONFTEST = """
import pytest

import ledger_bus as lb
from ledger_bus.adapters.openai_agents import LedgerSession


def ledger_session(session_id, db_path=":memory:", *, session_settings=None, **options):
    url = "memory://" if str(db_path) == ":memory:" else f"sqlite:///{db_path}"
    return LedgerSession(session_id, lb.connect(url), session_settings=session_settings)


@pytest.fixture(autouse=True)
def _sessions_on_the_ledger(monkeypatch, request):
    monkeypatch.setattr(request.module, "SQLiteSession", ledger_session, raising=False)
"""


def test_the_sdk_s_own_session_tests_pass_on_ledger_session(tmp_path: Path) -> None:
    found = sorted(SDIST.glob("openai_agents-*/tests/memory/test_session.py"))
    if not found:
        pytest.skip(f"the Agents SDK's sdist is not at {SDIST}: `make test` fetches it")
    root = found[-1].parents[2]
    (root / "tests" / "memory" / "conftest.py").write_text(CONFTEST, encoding="utf-8")
    outcome, output = run_suite(root, list(SUITES), {}, tmp_path)
    protocol = {n: o for n, o in outcome.items() if not n.startswith("test_sqlite_session_")}
    assert len(protocol) >= 45, output[-2000:]  # 47 in the 0.24 sdist
    assert {n for n, o in protocol.items() if o != "passed"} == set(), output[-3000:]
