"""LedgerSaver held to LangGraph's reference saver: the same graphs, driven the same way (tool
calls, interrupts resumed with Command, update_state forks at several depths, subgraphs), give
the same states and the same histories on LedgerSaver as on InMemorySaver, branch by branch."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph")

from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver

import ledger_bus as lb
from ledger_bus import ANY
from ledger_bus.adapters.langgraph import LedgerSaver
from tests.support.graph_scenarios import (
    forks_at_several_depths,
    history,
    interrupts_and_subgraphs,
    tool_graph,
)
from tests.support.helpers import ROOT


@pytest.fixture(params=["memory", "redis", "sqlite"])
def ledger(request: pytest.FixtureRequest, tmp_path: Path) -> lb.EventStore:
    if request.param == "redis":
        return request.getfixturevalue("redis_store")  # type: ignore[no-any-return]
    if request.param == "sqlite":
        return lb.connect(f"sqlite:///{tmp_path / 'diff.db'}")
    return lb.connect("memory://")


@pytest.mark.parametrize("script", [forks_at_several_depths, interrupts_and_subgraphs])
def test_the_ledger_saver_gives_the_states_and_histories_of_langgraphs_own(
    ledger: lb.EventStore, script: Callable[[BaseCheckpointSaver[Any]], list[Any]]
) -> None:
    # Given the same script driven on the reference saver and on the ledger
    expected = script(InMemorySaver())
    got = script(LedgerSaver(ledger))
    # Then every state and every history, at every point, is the same
    assert len(got) == len(expected)
    for n, (mine, theirs) in enumerate(zip(got, expected, strict=True)):
        assert mine == theirs, f"point {n} of the script differs"


def test_a_fork_leaves_the_branch_it_came_from_as_it_was(ledger: lb.EventStore) -> None:
    # Given a thread with two questions answered
    graph = tool_graph(LedgerSaver(ledger))
    config: RunnableConfig = {"configurable": {"thread_id": "t-fork"}}
    graph.invoke({"messages": [HumanMessage("where is order 1?")]}, config)
    graph.invoke({"messages": [HumanMessage("and order 2?")]}, config)
    before = history(graph, config)
    # When an early checkpoint is forked
    step_3 = [s for s in graph.get_state_history(config) if s.metadata["step"] == 3][-1]
    graph.update_state(step_3.config, {"messages": [HumanMessage("actually, never mind")]})
    # Then every checkpoint that was there reads as it did, its next included
    after = history(graph, config)
    assert len(after) == len(before) + 1
    assert [(h["values"], h["next"], h["alone"]) for h in after[1:]] == [
        (h["values"], h["next"], h["alone"]) for h in before
    ]


def test_a_thread_written_with_whole_number_versions_reads_and_goes_on(
    ledger: lb.EventStore,
) -> None:
    # Given a thread of one question as this saver wrote it when it numbered versions 1, 2, 3
    # (its events kept in tests/data as that saver appended them)
    lines = (ROOT / "tests" / "data" / "langgraph_thread_v1.jsonl").read_text().splitlines()
    for n, line in enumerate(lines):
        event = json.loads(line)
        ledger.append(lb.StreamId("t-old", event.pop("stream")), ANY, f"old-{n}", [event])
    config: RunnableConfig = {"configurable": {"thread_id": "t-old"}}
    reference = tool_graph(InMemorySaver())
    reference.invoke({"messages": [HumanMessage("where is order 1?")]}, config)
    # When today's saver reads it, and the thread goes on
    graph = tool_graph(LedgerSaver(ledger))
    assert [h["values"] for h in history(graph, config)] == [
        h["values"] for h in history(reference, config)
    ]
    graph.invoke({"messages": [HumanMessage("and order 2?")]}, config)
    reference.invoke({"messages": [HumanMessage("and order 2?")]}, config)
    # Then it holds what the reference holds for the same two questions, step by step
    assert history(graph, config) == history(reference, config)
