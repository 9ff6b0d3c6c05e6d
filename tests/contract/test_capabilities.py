"""The contract as capabilities: a store that is a log and nothing else passes the log's part of
the shipped suite, and is refused in one line wherever another capability is asked of it."""

from __future__ import annotations

import asyncio
import inspect
import textwrap
from pathlib import Path

import pytest

import ledger_bus as lb
from ledger_bus.agent.tailer import Tailer
from ledger_bus.model.durability import Durability
from ledger_bus.model.ids import StreamId
from ledger_bus.model.prepared import PreparedAppend
from ledger_bus.model.records import AppendResult, RecordedEvent, SessionInfo
from ledger_bus.store.async_store import AsyncStore
from ledger_bus.store.base import CAPABILITIES, capabilities_of, need
from ledger_bus.store.log import Log
from ledger_bus.store.memory import MemoryStore
from ledger_bus.store.steps import Op
from ledger_bus.testing.contract import PARTS, log
from tests.support.helpers import passed_in, pytest_elsewhere


class LogOnlyStore(Log):
    """A log and nothing else: the ten primitives the log asks for (each an operation, as its
    type says), kept by a memory store it holds, so that it has no other capability to offer."""

    tier = "log-only"

    def __init__(self) -> None:
        super().__init__()
        self.kept = MemoryStore()

    def _append(
        self,
        stream: StreamId,
        expected: int | None,
        append_id: str,
        prepared: PreparedAppend,
        durability: Durability,
    ) -> Op[AppendResult]:
        return self.kept._append(stream, expected, append_id, prepared, durability)

    def _read_stream(self, stream: StreamId, after: int, count: int) -> Op[list[RecordedEvent]]:
        return self.kept._read_stream(stream, after, count)

    def _scan(self, session_id: str, after: str | None, count: int) -> Op[list[RecordedEvent]]:
        return self.kept._scan(session_id, after, count)

    def _tail(self, session_id: str, n: int, before: str | None) -> Op[list[RecordedEvent]]:
        return self.kept._tail(session_id, n, before)

    def _wait(
        self, session_id: str, after: str | None, timeout_ms: int, count: int
    ) -> Op[list[RecordedEvent]]:
        return self.kept._wait(session_id, after, timeout_ms, count)

    def _stream_version(self, stream: StreamId) -> Op[int]:
        return self.kept._stream_version(stream)

    def _session_exists(self, session_id: str) -> Op[bool]:
        return self.kept._session_exists(session_id)

    def _artifact(self, session_id: str, sha256: str) -> Op[bytes | None]:
        return self.kept._artifact(session_id, sha256)

    def _session_info(self, session_id: str, append_ids: bool) -> Op[SessionInfo]:
        return self.kept._session_info(session_id, append_ids)

    def _sessions(self, limit: int | None) -> Op[list[tuple[str, int]]]:
        return self.kept._sessions(limit)


THEIRS = """
import pytest
from ledger_bus.testing.contract.log import *  # noqa: F403
from my_store import LogOnlyStore


@pytest.fixture
def store():
    return LogOnlyStore()
"""


def test_a_store_that_is_only_a_log_passes_the_logs_part_of_the_shipped_suite(
    tmp_path: Path,
) -> None:
    # Given a project of its own with a store that implements the log alone
    store_module = "\n".join(
        [
            "from __future__ import annotations",
            "from ledger_bus.model.durability import Durability",
            "from ledger_bus.model.ids import StreamId",
            "from ledger_bus.model.prepared import PreparedAppend",
            "from ledger_bus.model.records import AppendResult, RecordedEvent, SessionInfo",
            "from ledger_bus.store.log import Log",
            "from ledger_bus.store.memory import MemoryStore",
            "from ledger_bus.store.steps import Op",
            "",
            textwrap.dedent(inspect.getsource(LogOnlyStore)),
        ]
    )
    (tmp_path / "my_store.py").write_text(store_module)
    (tmp_path / "test_my_store.py").write_text(THEIRS)
    # When pytest runs the log's part there
    code, said = pytest_elsewhere(tmp_path, "test_my_store.py")
    # Then every test of that part ran and passed
    assert code == 0, said
    assert passed_in(said) >= len(log.__all__) > 15


def test_a_store_declares_its_capabilities_and_ours_have_them_all() -> None:
    assert capabilities_of(LogOnlyStore()) == ["log"]
    assert capabilities_of(lb.connect("memory://")) == [c.what for c in CAPABILITIES]
    assert list(PARTS) == [c.what for c in CAPABILITIES], "a part of the suite per capability"


@pytest.mark.parametrize("capability", [c for c in CAPABILITIES if c is not Log])
def test_a_capability_a_store_lacks_is_refused_in_one_line(capability: type[Log]) -> None:
    with pytest.raises(lb.Unsupported) as refused:
        need(LogOnlyStore(), capability)
    said = str(refused.value)
    assert said == f"this store (log-only) has no {capability.what}: it has log"
    assert "\n" not in said


def test_a_tailer_and_a_recorder_ask_for_what_they_need_and_are_refused_without_it() -> None:
    store = LogOnlyStore()
    with pytest.raises(lb.Unsupported, match=r"has no consumer groups"):
        Tailer(store, "s", "g", "c")  # type: ignore[arg-type]
    with pytest.raises(lb.Unsupported, match=r"has no leases and open attempts"):
        lb.Recorder(store, "s", "planner")  # type: ignore[arg-type]
    # and what the log has works the while
    store.append(
        lb.StreamId("s", "main"), 0, "a", [{"type": "message", "agent": "a", "body": "hi"}]
    )
    assert [e["body"] for e in store.tail("s", 5)] == ["hi"]


def test_archiving_from_a_store_that_is_only_a_log_is_refused_in_one_line() -> None:
    with pytest.raises(lb.Unsupported, match=r"has no leases and open attempts: it has log$"):
        lb.archive_session(LogOnlyStore(), lb.connect("memory://"), "s")  # type: ignore[arg-type]


def test_an_asyncio_store_on_a_log_refuses_a_group_read_in_one_line() -> None:
    async def read() -> None:
        store = AsyncStore(LogOnlyStore())  # type: ignore[arg-type]
        assert await store.stream_version(lb.StreamId("s", "main")) == 0
        await store.group_read("s", "g", "c", 10, None)

    with pytest.raises(lb.Unsupported, match=r"^this store \(log-only\) has no consumer groups"):
        asyncio.run(read())


def test_the_command_line_says_a_missing_capability_is_refused_with_exit_8() -> None:
    from ledger_bus.cli.app import EXIT_BACKEND_REFUSED, exit_code_for

    refused = lb.Unsupported("this store (log-only) has no consumer groups: it has log")
    assert exit_code_for(refused) == EXIT_BACKEND_REFUSED == 8
