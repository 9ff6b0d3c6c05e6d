"""LedgerSaver held to LangGraph's reference saver: the same graphs, driven the same way (tool
calls, interrupts resumed with Command, update_state forks at several depths, subgraphs), give
the same states and the same histories on LedgerSaver as on InMemorySaver, branch by branch."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypedDict

import pytest

pytest.importorskip("langgraph")

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command, Interrupt, interrupt

import ledger_bus as lb
from ledger_bus import ANY
from ledger_bus.adapters.langgraph import LedgerSaver


@tool
def lookup(key: str) -> str:
    """Look an order up."""
    return f"{key} shipped"


def _model(messages: Sequence[BaseMessage]) -> AIMessage:
    """A scripted model: a call of lookup for each question, a summary of what came back."""
    last = messages[-1]
    if isinstance(last, HumanMessage):
        n = sum(isinstance(m, HumanMessage) for m in messages)
        call = {"name": "lookup", "args": {"key": f"order-{n}"}, "id": f"call_{n}"}
        return AIMessage(content="", tool_calls=[{**call, "type": "tool_call"}], id=f"ai-{n}")
    results = [str(m.content) for m in messages if isinstance(m, ToolMessage)]
    return AIMessage(content="done: " + "; ".join(results), id=f"ai-done-{len(messages)}")


class Approval(TypedDict, total=False):
    messages: list[str]
    approved: str
    inner: str


def tool_graph(saver: BaseCheckpointSaver[Any]) -> Any:
    """Messages, a model, a tool node (recorded on the ledger, plain on the reference)."""

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [_model(state["messages"])]}

    wrappers = saver.record_tools() if isinstance(saver, LedgerSaver) else {}
    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([lookup], **wrappers))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=saver)


def approval_graph(saver: BaseCheckpointSaver[Any]) -> Any:
    """A node that interrupts for a decision, then a subgraph that interrupts again."""

    def ask(state: Approval) -> dict[str, Any]:
        answer = interrupt({"question": "approve?", "seen": len(state.get("messages", []))})
        return {"approved": str(answer), "messages": [*state.get("messages", []), "asked"]}

    def inner_step(state: Approval) -> dict[str, Any]:
        detail = interrupt("detail?")
        return {"inner": f"detail={detail}", "messages": [*state["messages"], "inner"]}

    sub = StateGraph(Approval)
    sub.add_node("inner_step", inner_step)
    sub.add_edge(START, "inner_step")

    builder = StateGraph(Approval)
    builder.add_node("ask", ask)
    builder.add_node("sub", sub.compile())
    builder.add_edge(START, "ask")
    builder.add_edge("ask", "sub")
    return builder.compile(checkpointer=saver)


def _plain(value: Any) -> Any:
    """A state's values in a form two runs can be compared in: messages without the ids that
    LangGraph mints afresh in each run."""
    if isinstance(value, BaseMessage):
        return {
            "type": value.type,
            "content": value.content,
            "tool_calls": [
                (c["name"], c["args"], c["id"]) for c in getattr(value, "tool_calls", [])
            ],
            "tool_call_id": getattr(value, "tool_call_id", None),
            "status": getattr(value, "status", None),
        }
    if isinstance(value, Interrupt):
        return {"interrupt": _plain(value.value)}  # its id follows from a checkpoint's id
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def history(graph: Any, config: RunnableConfig) -> list[dict[str, Any]]:
    """Every checkpoint of the thread, newest first, with ids replaced by positions."""
    snapshots = list(graph.get_state_history(config))
    position = {s.config["configurable"]["checkpoint_id"]: n for n, s in enumerate(snapshots)}
    out = []
    for s in snapshots:
        parent = s.parent_config["configurable"]["checkpoint_id"] if s.parent_config else None
        out.append(
            {
                "values": _plain(s.values),
                "next": s.next,
                "source": s.metadata.get("source") if s.metadata else None,
                "step": s.metadata.get("step") if s.metadata else None,
                "parent": position.get(parent) if parent else None,
                "tasks": [(t.name, _plain(list(t.interrupts))) for t in s.tasks],
                # The same checkpoint read by its own config: a branch reads its own values.
                "alone": _plain(graph.get_state(s.config).values),
            }
        )
    return out


Script = Callable[[Callable[[BaseCheckpointSaver[Any]], Any], BaseCheckpointSaver[Any]], Any]


def forks_at_several_depths(saver: BaseCheckpointSaver[Any]) -> list[Any]:
    """Two questions, then a fork at each of three depths, each continued, one forked again."""
    graph = tool_graph(saver)
    config: RunnableConfig = {"configurable": {"thread_id": "thread/forks"}}
    seen = [history(graph, config)]
    graph.invoke({"messages": [HumanMessage("where is order 1?")]}, config)
    graph.invoke({"messages": [HumanMessage("and order 2?")]}, config)
    seen.append(history(graph, config))
    past = list(graph.get_state_history(config))
    for depth in (2, 4, 6):
        fork = graph.update_state(
            past[depth].config, {"messages": [HumanMessage(f"actually, never mind ({depth})")]}
        )
        seen.append(history(graph, config))
        graph.invoke(None, fork)
        seen.append(history(graph, config))
    again = list(graph.get_state_history(config))[3]
    graph.update_state(again.config, {"messages": [AIMessage("forked twice", id="twice")]})
    seen.append(history(graph, config))
    seen.append(_plain(graph.get_state(config).values))
    return seen


def interrupts_and_subgraphs(saver: BaseCheckpointSaver[Any]) -> list[Any]:
    """An interrupt resumed with Command, one inside a subgraph, and a fork of the decision."""
    graph = approval_graph(saver)
    config: RunnableConfig = {"configurable": {"thread_id": "thread-approval"}}
    seen: list[Any] = []
    seen.append(_plain(graph.invoke({"messages": ["start"]}, config)))
    seen.append(history(graph, config))
    state = graph.get_state(config, subgraphs=True)
    seen.append([(t.name, [i.value for i in t.interrupts]) for t in state.tasks])
    seen.append(_plain(graph.invoke(Command(resume="yes"), config)))
    inner = graph.get_state(config, subgraphs=True)
    seen.append(
        [
            (t.name, t.state.values if t.state is not None and hasattr(t.state, "values") else None)
            for t in inner.tasks
        ]
    )
    seen.append(_plain(graph.invoke(Command(resume="blue"), config)))
    seen.append(history(graph, config))
    # Back to the first decision, decided the other way: a branch beside the first one.
    first = next(s for s in graph.get_state_history(config) if s.next == ("ask",))
    seen.append(_plain(graph.invoke(Command(resume="no"), first.config)))
    seen.append(_plain(graph.invoke(Command(resume="red"), config)))
    seen.append(history(graph, config))
    return seen


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
    lines = (Path(__file__).parent / "data" / "langgraph_thread_v1.jsonl").read_text().splitlines()
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
