"""LangGraph graphs and the scripts that drive them, for holding LedgerSaver to the reference
saver (InMemorySaver): a tool graph with a scripted model, an approval graph that interrupts (in a
subgraph too), and a thread's history in a form two runs compare in."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypedDict

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command, Interrupt, interrupt

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
