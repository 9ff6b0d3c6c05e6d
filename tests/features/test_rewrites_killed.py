"""A process SIGKILLed inside a rewrite (an Agents SDK session's clear, a LangGraph thread's
prune or delete_for_runs) leaves the old state or the new one, and a stream that keeps what is
written to it afterwards: never a bound that goes on trimming."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph")
pytest.importorskip("agents")

from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig

import ledger_bus as lb
from ledger_bus.adapters.langgraph import LedgerSaver
from ledger_bus.adapters.openai_agents import LedgerSession
from tests.support.graph_scenarios import history, tool_graph
from tests.support.helpers import ROOT, url_for

THREAD: RunnableConfig = {"configurable": {"thread_id": "rewritten"}}


@pytest.fixture(params=["redis", "sqlite"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return url_for(request, tmp_path / "rewrites.db")


def killed(url: str, prefix: str, what: str, kill_before: int, *runs: str) -> None:
    """Run the rewrite in a process of its own, killed before its n-th write."""
    done = subprocess.run(
        [
            *(sys.executable, "-m", "tests.support.workers", "rewrite_killed"),
            *(url, prefix, what, str(kill_before), *runs),
        ],
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert done.returncode == -9, "the kill must land inside the rewrite"


def items(url: str, prefix: str) -> list[Any]:
    async def read() -> list[Any]:
        return await LedgerSession("rewritten", lb.connect(url, prefix=prefix)).get_items()

    return asyncio.run(read())


def add(url: str, prefix: str, *texts: str) -> None:
    async def write() -> None:
        session = LedgerSession("rewritten", lb.connect(url, prefix=prefix))
        await session.add_items([{"role": "user", "content": t} for t in texts])

    asyncio.run(write())


# The writes of a clear: the bound (1), the marker (2), the bound lifted (3).
@pytest.mark.parametrize("kill_before", [2, 3])
def test_a_clear_killed_at_any_step_leaves_a_session_that_keeps_what_comes_after(
    url: str, kill_before: int
) -> None:
    # Given a session of three items, cleared by a process killed inside the clear
    prefix = f"rw{uuid.uuid4().hex[:10]}"
    add(url, prefix, "a", "b", "c")
    killed(url, prefix, "clear", kill_before)
    # When three items are added afterwards
    add(url, prefix, "d", "e", "f")
    # Then a fresh reader sees them all, after the old ones or without them, and no fewer
    found = [i["content"] for i in items(url, prefix)]
    assert found in (["a", "b", "c", "d", "e", "f"], ["d", "e", "f"])


def ask(graph: Any, question: str) -> str:
    """Ask on the thread, in a graph run of its own; its run id."""
    run = str(uuid.uuid4())
    graph.invoke({"messages": [HumanMessage(question)]}, {**THREAD, "metadata": {"run_id": run}})
    return run


def thread(url: str, prefix: str) -> tuple[Any, list[str]]:
    """A thread of three questions on a ledger of its own; the graph run id of each."""
    graph = tool_graph(LedgerSaver(lb.connect(url, prefix=prefix)))
    return graph, [ask(graph, f"where is order {n}?") for n in range(3)]


def rewrite(saver: LedgerSaver, what: str, runs: list[str]) -> None:
    if what == "prune":
        saver.prune(["rewritten"], strategy="keep_latest")
    else:
        saver.delete_for_runs(runs)


# The writes of a rewrite: the bound (1), its appends of two events (2, ...), the bound lifted.
@pytest.mark.parametrize(
    ("what", "kill_before"),
    [
        ("prune", 2),
        ("prune", 3),
        ("delete_for_runs", 2),
        ("delete_for_runs", 3),
        ("delete_for_runs", 5),
    ],
)
def test_a_rewrite_of_a_thread_killed_at_any_step_leaves_the_old_state_or_the_new(
    url: str, what: str, kill_before: int
) -> None:
    # Given the same thread three times: left as it is, rewritten, and rewritten by a process
    # killed inside the rewrite
    untouched, _ = thread(url, f"u{uuid.uuid4().hex[:10]}")
    clean, clean_runs = thread(url, f"c{uuid.uuid4().hex[:10]}")
    rewrite(clean.checkpointer, what, clean_runs[:1])
    prefix = f"k{uuid.uuid4().hex[:10]}"
    _, runs = thread(url, prefix)
    killed(url, prefix, what, kill_before, *runs[:1])
    # When each thread goes on with one more question
    victim = tool_graph(LedgerSaver(lb.connect(url, prefix=prefix)))
    for graph in (untouched, clean, victim):
        ask(graph, "and order 9?")
    # Then the killed one reads as the thread left as it was or as the one rewritten, every
    # checkpoint of it, the new ones included
    assert history(victim, THREAD) in (history(untouched, THREAD), history(clean, THREAD))
