"""A session of each adapter, recorded the way that adapter records one (the framework itself, or
its scripted program), for the tests that read every adapter's sessions: the web view's pages
(tests/ui/test_browser_adapters.py) and its AG-UI stream (tests/ui/test_agui.py). Each returns
the ledger session it wrote."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from ledger_bus.agent.recorder import Recorder
from ledger_bus.store.base import EventStore
from tests.support.ui import in_thread


def recorder_session(store: EventStore, session: str = "rec") -> str:
    """A planner's run that calls a model and delegates to a writer, which searches."""
    planner = Recorder(store, session, "planner")
    with planner.run("plan") as run:
        run.call("model", {"model": "m-1"}, lambda model: {"model": model})
        delegation = run.delegate("writer", "Draft it")
        with Recorder(store, session, "writer").run(delegation.child_run_id) as child:
            child.call("search", {"q": "x"}, lambda q: "found")
        run.finish_delegation(delegation, "ok", "done")
    return session


def langgraph_session(store: EventStore, tmp_path: Path, thread: str = "lg-chat") -> str:
    """A graph whose agent node asks for two tools, which its tools node runs."""
    pytest.importorskip("langgraph")
    from ledger_bus.adapters.langgraph import LedgerSaver
    from tests.support.graphs import ask, build

    graph = build(LedgerSaver(store), tmp_path)
    question, config = ask(thread)
    graph.invoke(question, config)
    return thread


def adk_session(store: EventStore) -> str:
    """ADK's Runner on the ledger: four turns of ann's, the third transferred to billing."""
    pytest.importorskip("google.adk")
    from ledger_bus.adapters.adk import LedgerSessionService
    from ledger_bus.adapters.adk.layout import session_of
    from tests.support.adk import APP, scenario
    from tests.support.adk import in_thread as adk_thread

    adk_thread(lambda: scenario(LedgerSessionService(store)))
    return session_of(APP, "ann", "s1")


def agents_sdk_session(store: EventStore, session_id: str = "oa-runs") -> str:
    """Triage handing off to support, which refunds, on a LedgerSession with its run hooks."""
    pytest.importorskip("agents")
    from agents import Agent, Runner, function_tool
    from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

    from ledger_bus.adapters.openai_agents import LedgerSession

    session = LedgerSession(session_id, store)

    @function_tool
    def refund(order: int) -> str:
        """Refund an order."""
        return f"refunded {order}"

    def said(step: str, *output: Any) -> ModelStep:
        return ModelStep(output=list(output), response_id=step)

    support = Agent(
        name="support",
        model=ScriptedModel(
            [
                said("r2", function_call("refund", {"order": 7}, call_id="c-refund")),
                said("r3", assistant_message("refunded")),
            ]
        ),
        tools=list(session.record_tools([refund])),
    )
    triage = Agent(
        name="triage",
        model=ScriptedModel([said("r1", function_call("transfer_to_support", {}, call_id="h1"))]),
        handoffs=[support],
    )

    async def scenario() -> None:
        await Runner.run(triage, "refund order 7", session=session, hooks=session.run_hooks())

    in_thread(scenario)
    return session_id


def agentgo_session(redis_url: str, prefix: str, marks: Path, session: str = "ship") -> str:
    """AgentGo's scripted agent (docs/go.md's wiring): lookup and research, a subagent in a child
    run, then deploy; its run `r1`."""
    from tests.support.gopeer import GO_MODULE, go_program, need_go

    need_go()
    program = go_program(GO_MODULE / "adapters" / "agentgo", "./internal/scripted")
    ran = subprocess.run(
        [str(program), "-url", redis_url, "-prefix", prefix, "-session", session, "-run", "r1",
         "-marks", str(marks)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    return session


def pi_session(
    redis_url: str, prefix: str, store: EventStore, session: str = "pi"
) -> tuple[str, str]:
    """A Pi agent killed inside its deploy tool, the call resolved by an operator, and the Pi
    session opened again, which gives Pi the outcome and goes on to its answer (Node 22): the
    ledger session, and Pi's own session id."""
    from tests.support.helpers import ledger_cli
    from tests.support.node import NodePeer, need_node, node22

    need_node()
    node = node22()
    if node is None:
        pytest.fail("Pi 1.x needs Node 22.19 or newer: `make test` installs it into tests/node22")
    crashed = NodePeer(redis_url, prefix, node)
    try:
        opened = crashed.ask("pi_hang", session=session, call_id="call-7", lease_ms=300)
        crashed.process.kill()
        crashed.process.wait()
    finally:
        crashed.close()
    outcome = '{"deployed": 1}'
    resolved = ledger_cli(redis_url, prefix, "resolve", session, "call-7", "--ok", outcome)
    assert resolved.returncode == 0, resolved.stderr
    deadline = time.monotonic() + 10
    while store.lease_alive(session, f"run-pi.{opened}") and time.monotonic() < deadline:
        time.sleep(0.05)
    with NodePeer(redis_url, prefix, node) as resumed:
        assert resumed.ask("pi_resume", session=session, pi_session=opened)["ran"] == 0
    return session, opened


def a2a_session(store: EventStore) -> str:
    """A task of a2a-sdk's request handler on a LedgerVersionedTaskStore: an agent that counts to
    three, streamed to its client."""
    pytest.importorskip("a2a.server.cluster")
    from a2a.server.context import ServerCallContext
    from a2a.server.request_handlers import DefaultRequestHandler
    from a2a.types import Message, Part, Role, SendMessageRequest

    from ledger_bus.adapters.a2a import (
        LedgerTaskEventStream,
        LedgerVersionedTaskStore,
        session_of,
    )
    from tests.support.a2a_replica import Counter, card

    handler = DefaultRequestHandler(
        agent_executor=Counter("one", ticks=3, tick_s=0.0),
        task_store=LedgerVersionedTaskStore(store, agent="counter"),
        agent_card=card(1),
        event_stream=LedgerTaskEventStream(store),
    )
    asked = Message(role=Role.ROLE_USER, message_id="m-1", parts=[Part(text="count to 3")])

    async def scenario() -> str:
        request = SendMessageRequest(message=asked)
        sent = [e async for e in handler.on_message_send_stream(request, ServerCallContext())]
        return str(sent[0].id)

    return session_of(in_thread(scenario))
