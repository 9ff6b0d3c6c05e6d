"""The LangGraph adapter: the framework's own conformance suite on every store, and graphs of
plain-function nodes and a tool node driven by a fake chat model, killed and resumed."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph.checkpoint.conformance")

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.conformance import checkpointer_test, validate

import ledger_bus as lb
from ledger_bus import aio
from ledger_bus.adapters.langgraph import LedgerSaver
from ledger_bus.agent.recorder import UnresolvedAttempt
from ledger_bus.operations.reconciler import Reconciler, ReconcilerConfig
from tests.support.graphs import ask, build
from tests.support.helpers import kill_when_ready, ledger_here, runs_of, url_for


@pytest.fixture(params=["redis", "valkey", "cluster", "sqlite", "postgresql", "memory"])
def ledger_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return url_for(request, tmp_path / "graph.db")


def test_the_checkpointer_passes_langgraphs_conformance_suite(
    ledger_url: str, request: pytest.FixtureRequest
) -> None:
    kind = request.node.callspec.params["ledger_url"]

    @checkpointer_test(name=f"LedgerSaver({kind})")
    async def saver() -> AsyncGenerator[LedgerSaver, None]:
        # A fresh ledger for each capability's tests, as the suite asks.
        store = await aio.connect(ledger_url, prefix=f"lg{uuid.uuid4().hex[:10]}")
        yield LedgerSaver(store)
        await store.aclose()

    report = asyncio.run(validate(saver))
    report.print_report()
    failures = {name: r.failures for name, r in report.results.items() if r.failures}
    assert report.passed_all(), failures
    assert report.conformance_level() == "FULL"
    assert all(r.detected for r in report.results.values()), report.to_dict()


# -- graphs -----------------------------------------------------------------------------------


def test_a_graph_runs_records_its_tool_calls_and_resumes_from_its_checkpoints(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    store = lb.connect(redis_url, prefix=prefix)
    saver = LedgerSaver(store)
    graph = build(saver, tmp_path)
    question, config = ask("t1")
    final = graph.invoke(question, config)
    assert final["messages"][-1].content == "done: charged 5; order-7 shipped"
    assert ran(tmp_path) == {"charge": 1, "lookup": 1}

    calls = store.read_stream(lb.StreamId("t1", "lg.tools"))
    assert [(e.type, e.step_id) for e in calls if e.step_id == "call_charge"] == [
        ("tool_call", "call_charge"),
        ("tool_result", "call_charge"),
    ]
    assert store.open_attempts("t1") == []
    # The graph's state is read back from the ledger, by a saver in another process as here.
    state = build(LedgerSaver(lb.connect(redis_url, prefix=prefix)), tmp_path).get_state(config)
    assert state.values["messages"][-1].content.startswith("done")
    assert len(list(saver.list(config))) >= 4
    store.close()


def run_until_killed_inside_lookup(url: str, prefix: str, thread: str, where: Path) -> None:
    """Run the graph in a process of its own, and SIGKILL it once it is inside `lookup` and
    `charge`'s result is recorded."""
    with lb.connect(url, prefix=prefix) as store:

        def ready() -> bool:
            calls = store.read_stream(lb.StreamId(thread, "lg.tools"))
            started = (where / "lookup.started").exists()
            return started and any(e.type == "tool_result" for e in calls)

        args = ["tests.support.graphs", url, prefix, thread, str(where)]
        kill_when_ready(args, ready, "the graph process")


def test_a_graph_killed_inside_a_tool_is_flagged_and_its_resume_runs_no_recorded_tool_again(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    run_until_killed_inside_lookup(redis_url, prefix, "t2", tmp_path)
    assert ran(tmp_path) == {"charge": 1, "lookup": 1}
    store = lb.connect(redis_url, prefix=prefix)
    (attempt,) = store.open_attempts("t2")
    assert (attempt.tool, attempt.attempt_id) == ("lookup", "call_lookup")

    # Its lease (1 s) expires with the process; the reconciler then flags the attempt.
    time.sleep(1.2)
    reconciler = Reconciler(store, ReconcilerConfig(grace_s=0, sessions=("t2",)))
    assert reconciler.run_pass().flagged == 1

    # Resumed: charge's recorded result is returned, lookup's unfinished call stops the graph.
    saver = LedgerSaver(store)
    _, config = ask("t2")
    with pytest.raises(UnresolvedAttempt, match="call_lookup"):
        build(saver, tmp_path).invoke(None, config)
    assert ran(tmp_path) == {"charge": 1, "lookup": 1}

    # Declared safe to replay, lookup runs again; charge still does not.
    final = build(saver, tmp_path, safe=("lookup",)).invoke(None, config)
    assert final["messages"][-1].content == "done: charged 5; order-7 shipped"
    assert ran(tmp_path) == {"charge": 1, "lookup": 2}
    store.close()


@pytest.mark.parametrize(
    ("flag", "value", "content", "status"),
    [
        ("--ok", '"order-7 shipped by hand"', "order-7 shipped by hand", "success"),
        ("--ok", '{"eta": 3}', '{"eta": 3}', "success"),
        ("--error", '"the courier lost it"', "the courier lost it", "error"),
    ],
)
def test_an_outcome_an_operator_resolves_is_the_tool_message_the_resumed_graph_gets(
    redis_url: str,
    prefix: str,
    tmp_path: Path,
    flag: str,
    value: str,
    content: str,
    status: str,
) -> None:
    # Given a graph killed inside lookup, and an operator who learned what lookup did
    run_until_killed_inside_lookup(redis_url, prefix, "t-res", tmp_path)
    resolved = ledger_here(redis_url, prefix, "resolve", "t-res", "call_lookup", flag, value)
    assert resolved.returncode == 0, resolved.stderr
    # When the thread is resumed
    store = lb.connect(redis_url, prefix=prefix)
    _, config = ask("t-res")
    final = build(LedgerSaver(store), tmp_path).invoke(None, config)
    # Then lookup did not run again, and the graph got the decided outcome as lookup's message
    assert ran(tmp_path) == {"charge": 1, "lookup": 1}
    (message,) = [m for m in final["messages"] if getattr(m, "tool_call_id", "") == "call_lookup"]
    assert (message.content, message.status, message.name) == (content, status, "lookup")
    assert store.open_attempts("t-res") == []
    store.close()


def test_a_deleted_thread_is_written_again_from_nothing(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    store = lb.connect(redis_url, prefix=prefix)
    saver = LedgerSaver(store)
    question, config = ask("t3")
    build(saver, tmp_path).invoke(question, config)
    saver.delete_thread("t3")
    assert saver.get_tuple(config) is None
    assert not store.session_exists("t3")

    # The same thread id, the same tool call ids: a new thread, whose calls run and are kept.
    final = build(saver, tmp_path).invoke(question, config)
    assert final["messages"][-1].content.startswith("done")
    assert ran(tmp_path) == {"charge": 2, "lookup": 2}
    results = [
        e for e in store.read_stream(lb.StreamId("t3", "lg.tools")) if e.type == "tool_result"
    ]
    assert len(results) == 2
    store.close()


def test_two_processes_write_one_thread_at_once_and_every_checkpoint_is_kept(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    writers = [
        subprocess.Popen([sys.executable, str(script), redis_url, prefix, f"w{n}"])
        for n in range(2)
    ]
    assert [w.wait(120) for w in writers] == [0, 0]
    saver = LedgerSaver(lb.connect(redis_url, prefix=prefix))
    config: RunnableConfig = {"configurable": {"thread_id": "shared"}}
    found = list(saver.list(config))
    metadata: list[dict[str, Any]] = [dict(t.metadata) for t in found]
    assert sorted(m["writer"] for m in metadata) == ["w0"] * 30 + ["w1"] * 30
    for t, m in zip(found, metadata, strict=True):
        assert t.checkpoint["channel_values"] == {"n": m["step"], "by": m["writer"]}


WRITER = """
import sys
import ledger_bus as lb
from langgraph.checkpoint.base import empty_checkpoint
from ledger_bus.adapters.langgraph import LedgerSaver

url, prefix, writer = sys.argv[1:4]
saver = LedgerSaver(lb.connect(url, prefix=prefix))
config = {"configurable": {"thread_id": "shared", "checkpoint_ns": ""}}
for step in range(30):
    cp = empty_checkpoint()
    cp["channel_values"] = {"n": step, "by": writer}
    cp["channel_versions"] = {"n": f"{writer}.{step}", "by": f"{writer}.{step}"}
    meta = {"source": "loop", "step": step, "writer": writer}
    saver.put(config, cp, meta, cp["channel_versions"])
"""


def ran(where: Path) -> dict[str, int]:
    return runs_of(where, "charge", "lookup")


def test_an_async_graph_on_an_asyncio_store_records_and_resumes_the_same_way(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    async def main() -> None:
        store = await aio.connect(redis_url, prefix=prefix)
        saver = LedgerSaver(store)
        question, config = ask("t4")
        final = await build(saver, tmp_path).ainvoke(question, config)
        assert final["messages"][-1].content == "done: charged 5; order-7 shipped"
        # The thread again, from its last checkpoint: nothing is left to run.
        await build(saver, tmp_path).ainvoke(None, config)
        assert ran(tmp_path) == {"charge": 1, "lookup": 1}
        with pytest.raises(lb.InvalidInput, match="async methods"):
            saver.get_tuple(config)
        tools = await store.read_stream(lb.StreamId("t4", "lg.tools"))
        assert sorted(e.type for e in tools) == ["tool_call"] * 2 + ["tool_result"] * 2
        await store.aclose()

    asyncio.run(main())


def test_a_large_channel_value_is_one_artifact_however_many_checkpoints_hold_it(
    redis_url: str, prefix: str
) -> None:
    store = lb.connect(redis_url, prefix=prefix, resolve_artifacts=False)
    saver = LedgerSaver(store)
    document = "x" * 300_000  # a retrieved document the graph carries from step to step
    config: RunnableConfig = {"configurable": {"thread_id": "big", "checkpoint_ns": ""}}
    for step in range(3):
        cp = empty_checkpoint()
        cp["channel_values"] = {"doc": document, "step": step}
        cp["channel_versions"] = {"doc": step + 1, "step": step + 1}
        config = saver.put(config, cp, {"step": step}, cp["channel_versions"])

    found = saver.get_tuple({"configurable": {"thread_id": "big"}})
    assert found is not None
    assert found.checkpoint["channel_values"] == {"doc": document, "step": 2}
    (uses,) = store.artifact_uses("big").values()
    assert uses == 3, "three checkpoints, one artifact"
    # The ledger read without resolving shows references where the values were.
    (first, *_) = store.read_stream(lb.StreamId("big", "lg.ckpt"))
    assert any(isinstance(v, lb.ArtifactRef) for v in first.fields.values())
    store.close()
