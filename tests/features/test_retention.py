"""Retention for the adapters: idle threads and sessions deleted or archived whole, through the
life cycle; a session with an open attempt kept; other sessions never touched."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

pytest.importorskip("langgraph")
pytest.importorskip("agents")

from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig

import ledger_bus as lb
from ledger_bus import aio
from ledger_bus.adapters.langgraph import LedgerSaver
from ledger_bus.adapters.openai_agents import LedgerSession
from ledger_bus.agent.recorder import Recorder
from ledger_bus.model.errors import InvalidInput
from ledger_bus.operations.retention import Retention
from ledger_bus.store.base import EventStore
from tests.support.graphs import echoing
from tests.support.helpers import wait_for

IDLE = 0.4  # seconds


def turn(saver: LedgerSaver, thread: str) -> None:
    config: RunnableConfig = {"configurable": {"thread_id": thread}}
    echoing(saver).invoke({"messages": [HumanMessage("hello")]}, config)


def test_idle_threads_go_whole_and_the_busy_the_open_and_the_others_stay(
    redis_store: EventStore,
) -> None:
    saver = LedgerSaver(redis_store, retention=Retention(idle_after=IDLE, every=3600))
    for thread in ("idle-1", "idle-2", "busy"):
        turn(saver, thread)
    # An idle thread with a call open (a process died in it): kept for the reconciler.
    redis_store.append(
        lb.StreamId("idle-open", "lg.ckpt"),
        0,
        "a1",
        [{"type": "mutation", "agent": "langgraph", "kind": "note"}],
    )
    redis_store.append(
        lb.StreamId("idle-open", "lg.tools"),
        0,
        "a2",
        [{"type": "tool_call", "agent": "langgraph", "tool": "t", "args": {}, "attempt_id": "x"}],
    )
    with Recorder(redis_store, "not-a-thread", "worker").run("r1") as run:  # idle, not ours
        run.message("hi")
    time.sleep(IDLE + 0.2)
    turn(saver, "busy")

    assert saver.retention is not None
    said = {d["session"]: d for d in saver.retention.sweep()}
    assert set(said) == {"idle-1", "idle-2", "idle-open"}
    assert said["idle-1"]["deleted"] > 0
    assert "open attempt" in said["idle-open"]["skipped"]
    assert not redis_store.session_exists("idle-1")
    assert not redis_store.session_exists("idle-2")
    for kept in ("busy", "idle-open", "not-a-thread"):
        assert redis_store.session_exists(kept)
    # A thread deleted is a new thread when used again.
    turn(saver, "idle-1")
    config: RunnableConfig = {"configurable": {"thread_id": "idle-1"}}
    assert [m.text for m in echoing(saver).get_state(config).values["messages"]] == [
        "hello",
        "re: hello",
    ]


def test_a_write_starts_a_sweep_when_one_is_due_off_the_writer_s_path(
    redis_store: EventStore,
) -> None:
    saver = LedgerSaver(redis_store, retention=Retention(idle_after=IDLE, every=0))
    turn(saver, "old")
    time.sleep(IDLE + 0.2)
    turn(saver, "new")  # its puts start a sweep on a thread of its own
    wait_for(lambda: not redis_store.session_exists("old"), "the idle thread was not swept")
    assert redis_store.session_exists("new")
    assert saver.retention is not None
    assert saver.retention.failed is None


def test_idle_threads_are_archived_whole_with_archive_to(
    redis_store: EventStore, tmp_path: Path
) -> None:
    cold = lb.connect(f"sqlite:///{tmp_path / 'archive.db'}")
    saver = LedgerSaver(redis_store, retention=Retention(idle_after=IDLE, archive_to=cold))
    turn(saver, "to-archive")
    events = redis_store.session_info("to-archive").events
    time.sleep(IDLE + 0.2)
    assert saver.retention is not None
    (done,) = saver.retention.sweep()
    assert done["session"] == "to-archive"
    assert cold.session_info("to-archive").events == events
    assert not redis_store.session_exists("to-archive")


def test_idle_agents_sdk_sessions_go_whole_on_an_asyncio_store(redis_url: str, prefix: str) -> None:
    async def scenario() -> tuple[bool, bool]:
        store = await aio.connect(redis_url, prefix=prefix)
        old = LedgerSession("old-chat", store, retention=Retention(idle_after=IDLE, every=0))
        await old.add_items([{"role": "user", "content": "hi"}])
        await asyncio.sleep(IDLE + 0.2)
        new = LedgerSession("new-chat", store, retention=Retention(idle_after=IDLE, every=0))
        await new.add_items([{"role": "user", "content": "hello"}])  # starts a sweep: a task
        deadline = time.monotonic() + 10
        while await store.session_exists("old-chat"):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        kept = await store.session_exists("new-chat")
        items = await old.get_items()
        await store.aclose()
        return kept, items == []

    assert asyncio.run(scenario()) == (True, True)


def test_a_retention_that_cannot_work_is_refused_at_once(redis_url: str, prefix: str) -> None:
    with pytest.raises(InvalidInput, match="idle_after"):
        Retention(idle_after=0)
    with pytest.raises(InvalidInput, match="every"):
        Retention(idle_after=1, every=-1)

    async def on_asyncio() -> None:
        store = await aio.connect(redis_url, prefix=prefix)
        try:
            archive = lb.connect("memory://")
            LedgerSession("s", store, retention=Retention(idle_after=1, archive_to=archive))
        finally:
            await store.aclose()

    with pytest.raises(InvalidInput, match="blocking store"):
        asyncio.run(on_asyncio())
