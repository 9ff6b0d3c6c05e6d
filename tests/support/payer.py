"""Agents that charge the example payment service (examples/payments.py) once, for the
exactly-once drill (tests/features/test_exactly_once.py): the plain recorder, a LangGraph graph
and an Agents SDK agent, each killed by SIGKILL at a point the drill picks.

Run as a program it is a fork server: it imports everything once, then for each request line on
stdin forks an agent process, waits for it and answers how it ended, so that each of hundreds of
agent processes costs a fork, not an interpreter's start and the frameworks' imports.

    python -m tests.support.payer
    {"kind": "recorder", "url": ..., "prefix": ..., "session": ..., "run": ..., "payments": ...,
     "kill_at": "none" | "before_request" | "after_send" | "after_reply" | "after_result",
     "amount": 5, "out": FILE}
    -> {"killed": true} | {"exit": 0} (its result in FILE) | {"exit": 1} (its error in FILE)
"""

from __future__ import annotations

import ast
import asyncio
import http.client
import json
import os
import signal
import sys
import traceback
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from agents import Agent, Runner, Tool, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

import ledger_bus as lb
from ledger_bus.adapters.langgraph import LedgerSaver
from ledger_bus.adapters.openai_agents import LedgerSession

set_tracing_disabled(True)
LEASE_MS = 600
KILL_POINTS = ("none", "before_request", "after_send", "after_reply", "after_result")


def die() -> None:
    """A crash: SIGKILL, no handler runs, nothing is flushed."""
    os.kill(os.getpid(), signal.SIGKILL)


def charging(payments: str, kill_at: str) -> Any:
    """The charge tool, with the payment service's protocol (examples/payments.py) spelled out
    so that the process can die between sending the request and reading its reply."""

    def charge(amount: int, to: str) -> dict[str, Any]:
        """Charge an account."""
        key = lb.current_call().idempotency_key
        if kill_at == "before_request":
            die()
        where = urlsplit(payments)
        connection = http.client.HTTPConnection(where.hostname or "", where.port, timeout=10)
        body = json.dumps({"amount": amount, "to": to})
        connection.request(
            "POST", "/charges", body, {"Content-Type": "application/json", "Idempotency-Key": key}
        )
        if kill_at == "after_send":
            die()  # the request is on the wire; its reply is never read
        reply = connection.getresponse()
        found: dict[str, Any] = json.loads(reply.read())
        if reply.status not in (200, 201):
            raise RuntimeError(f"the payment service answered {reply.status}: {found}")
        if kill_at == "after_reply":
            die()
        return found

    return charge


def with_recorder(request: dict[str, Any], store: lb.EventStore) -> Any:
    recorder = lb.Recorder(store, request["session"], "payer", lease_ttl_ms=LEASE_MS)
    charge = charging(request["payments"], request["kill_at"])
    with recorder.run(request["run"], resume=True, lease_wait_ms=10_000) as run:
        paid = run.call("charge", {"amount": request["amount"], "to": request["session"]}, charge)
        if request["kill_at"] == "after_result":
            die()
    return paid


def with_langgraph(request: dict[str, Any], store: lb.EventStore) -> Any:
    charge = tool(charging(request["payments"], request["kill_at"]))
    saver = LedgerSaver(store, lease_ttl_ms=LEASE_MS)
    amount = request["amount"]

    def agent(state: MessagesState) -> dict[str, Any]:
        last = state["messages"][-1]
        if isinstance(last, HumanMessage):
            args = {"amount": amount, "to": request["session"]}
            call = {"name": "charge", "args": args, "id": "call_pay"}
            reply = AIMessage(content="", tool_calls=[{**call, "type": "tool_call"}])
        else:
            if request["kill_at"] == "after_result":
                die()  # the tool's result is recorded; the model never answers
            assert isinstance(last, ToolMessage)
            reply = AIMessage(content=f"paid: {last.content}")
        model = GenericFakeChatModel(messages=iter([reply]))
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([charge], **saver.record_tools()))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    graph = builder.compile(checkpointer=saver)
    config: RunnableConfig = {"configurable": {"thread_id": request["session"]}}
    begun = bool(graph.get_state(config).values)
    question: Any = None if begun else {"messages": [HumanMessage(f"pay {amount}")]}
    final = graph.invoke(question, config)
    content = str(final["messages"][-1].content)
    return json.loads(content.removeprefix("paid: "))


def with_agents_sdk(request: dict[str, Any], store: lb.EventStore) -> Any:
    session = LedgerSession(request["session"], store, lease_ttl_ms=LEASE_MS)
    charge = function_tool(
        charging(request["payments"], request["kill_at"]), name_override="charge"
    )
    amount = request["amount"]

    async def run() -> Any:
        items = await session.get_items()
        outputs = [
            i for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"
        ]
        # A model answers what it sees: a charge it already has the output of is not asked for
        # again; one it never saw answered is (under a new call id, as a real model's would be).
        script: list[Any] = []
        if not outputs:
            call_id = f"pay-{os.getpid()}"
            args = {"amount": amount, "to": request["session"]}
            script.append([function_call("charge", args, call_id=call_id)])
        script.append([assistant_message("paid")])
        model = ScriptedModel(script)
        tools: list[Tool] = [*session.record_tools([charge])]
        agent: Agent[Any] = Agent(name="payer", model=model, tools=tools)

        if request["kill_at"] == "after_result":
            record = session.add_items

            async def then_die(new: list[Any]) -> None:
                await record(new)
                if any(
                    isinstance(i, dict) and i.get("type") == "function_call_output" for i in new
                ):
                    die()  # the tool's output is recorded; the model never answers

            session.add_items = then_die  # type: ignore[method-assign,assignment]
        await Runner.run(agent, f"pay {amount}", session=session)
        found = [
            i
            for i in await session.get_items()
            if isinstance(i, dict) and i.get("type") == "function_call_output"
        ]
        (output,) = found
        return parsed(str(output["output"]))

    return asyncio.run(run())


def parsed(text: str) -> Any:
    """A tool's output as the SDK gave it to the model: JSON, or the Python text of a dict."""
    try:
        return json.loads(text)
    except ValueError:
        return ast.literal_eval(text)


AGENTS = {"recorder": with_recorder, "langgraph": with_langgraph, "agents_sdk": with_agents_sdk}


def one(request: dict[str, Any]) -> None:
    """The agent process: run, write what it got (or what stopped it), exit."""
    out = Path(request["out"])
    try:
        store = lb.connect(request["url"], prefix=request["prefix"])
        paid = AGENTS[request["kind"]](request, store)
        out.write_text(json.dumps({"paid": paid}))
        code = 0
    except BaseException as err:
        out.write_text(
            json.dumps(
                {"error": type(err).__name__, "message": str(err), "trace": traceback.format_exc()}
            )
        )
        code = 1
    os._exit(code)


def serve() -> None:
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            one(request)
        _, status = os.waitpid(pid, 0)
        if os.WIFSIGNALED(status):
            reply: dict[str, Any] = {"killed": os.WTERMSIG(status) == signal.SIGKILL}
        else:
            reply = {"exit": os.WEXITSTATUS(status)}
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    serve()
