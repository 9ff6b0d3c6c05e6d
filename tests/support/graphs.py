"""A LangGraph agent for the adapter's tests: plain-function nodes, a tool node, and a fake chat
model scripted by the conversation, so a process that resumes the thread gets the same replies.

Run as a program it invokes the graph on a thread and hangs inside the `lookup` tool, for the
test to kill it there: `python -m tests.support.graphs URL PREFIX THREAD DIR`.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Send

import ledger_bus as lb
from ledger_bus.adapters.langgraph import LedgerSaver

CALLS = [
    {"name": "charge", "args": {"amount": 5}, "id": "call_charge", "type": "tool_call"},
    {"name": "lookup", "args": {"key": "order-7"}, "id": "call_lookup", "type": "tool_call"},
]


def reply_to(messages: list[Any]) -> AIMessage:
    """What the scripted model says: the two calls to a question, a summary to their results."""
    last = messages[-1]
    said = sum(len(str(m.content)) for m in messages)
    cost: dict[str, Any] = {
        "usage_metadata": {"input_tokens": said, "output_tokens": 30, "total_tokens": said + 30},
        "response_metadata": {"model_name": "scripted-1"},
    }
    if isinstance(last, HumanMessage):
        return AIMessage(content="", tool_calls=CALLS, **cost)
    results = sorted(str(m.content) for m in messages if isinstance(m, ToolMessage))
    return AIMessage(content="done: " + "; ".join(results), **cost)


def build(
    saver: LedgerSaver,
    ran: Path,
    *,
    hang: bool = False,
    safe: tuple[str, ...] = (),
    as_subgraph: bool = False,
) -> Any:
    """The graph; each tool run appends a line to `ran/<tool>`; with `hang`, lookup never
    returns once it has started. `as_subgraph`: compiled to be a node of another graph (the
    outer graph's checkpointer keeps it)."""

    @tool
    def charge(amount: int) -> str:
        """Charge the customer."""
        with (ran / "charge").open("a") as f:
            f.write(f"{amount}\n")
        return f"charged {amount}"

    @tool
    def lookup(key: str) -> str:
        """Look an order up."""
        with (ran / "lookup").open("a") as f:
            f.write(f"{key}\n")
        if hang:
            (ran / "lookup.started").touch()
            time.sleep(3600)
        return f"{key} shipped"

    def plan(state: MessagesState) -> dict[str, Any]:
        return {"messages": []}

    def agent(state: MessagesState) -> dict[str, Any]:
        model = GenericFakeChatModel(messages=iter([reply_to(state["messages"])]))
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("plan", plan)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([charge, lookup], **saver.record_tools(safe_to_replay=safe)))
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile() if as_subgraph else builder.compile(checkpointer=saver)


def saying(node: str, text: str, ids: str) -> Any:
    """A compiled graph of one node, `node`, that says `text` (its messages' ids `<ids>-<n>`,
    n the messages before it): a subgraph for a graph to run."""

    def say(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(text, id=f"{ids}-{len(state['messages'])}")]}

    builder = StateGraph(MessagesState)
    builder.add_node(node, say)
    builder.add_edge(START, node)
    return builder.compile()


def delegating(saver: LedgerSaver) -> Any:
    """A graph whose node `plan` sends two parts to `worker` (Send) and runs `delegate`, a
    subgraph of one node, `inner_model`."""

    inner = saying("inner_model", "inner", "in")

    def plan(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage("plan", id="plan-1")]}

    def fan_out(state: MessagesState) -> list[Any]:
        parts = [Send("worker", {"messages": [HumanMessage(f"part {n}")]}) for n in (1, 2)]
        return [*parts, "delegate"]

    def worker(state: MessagesState) -> dict[str, Any]:
        part = state["messages"][-1].text
        return {"messages": [AIMessage(f"did {part}", id=f"did-{part}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("plan", plan)
    builder.add_node("worker", worker)
    builder.add_node("delegate", inner)
    builder.add_edge(START, "plan")
    builder.add_conditional_edges("plan", fan_out, ["worker", "delegate"])
    return builder.compile(checkpointer=saver)


def ask(thread: str) -> tuple[dict[str, Any], RunnableConfig]:
    """The input and config of a question on `thread`."""
    config: RunnableConfig = {"configurable": {"thread_id": thread}}
    return {"messages": [HumanMessage("charge and look up order-7")]}, config


if __name__ == "__main__":
    url, prefix, thread, where = sys.argv[1:5]
    saver = LedgerSaver(lb.connect(url, prefix=prefix), lease_ttl_ms=1000)
    graph = build(saver, Path(where), hang=True)
    question, config = ask(thread)
    graph.invoke(question, config)


def echoing(saver: LedgerSaver, before_reply: Any = None) -> Any:
    """A graph of one node that replies to the last message (`before_reply()` first, if given:
    a test holds the run there)."""

    def reply(state: MessagesState) -> dict[str, Any]:
        if before_reply is not None:
            before_reply()
        return {"messages": [AIMessage(f"re: {state['messages'][-1].text}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    return builder.compile(checkpointer=saver)


def echo_turn(url: str, prefix: str, thread: str, text: str) -> None:
    """One turn of `echoing` on a thread, as a process of its own would run it."""
    store = lb.connect(url, prefix=prefix)
    config: RunnableConfig = {"configurable": {"thread_id": thread}}
    echoing(LedgerSaver(store)).invoke({"messages": [HumanMessage(text)]}, config)
    store.close()
