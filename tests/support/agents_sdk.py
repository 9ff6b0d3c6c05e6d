"""An Agents SDK agent for the adapter's tests, driven by the SDK's ScriptedModel: it asks for
`refund` and then `notify`, and says it is done. Each tool run appends a line to `DIR/<tool>`.

Run as a program it runs the agent and hangs inside `notify`, for the test to kill it there:
`python -m tests.support.agents_sdk URL PREFIX SESSION DIR`.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

from agents import Agent, Runner, Tool, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

import ledger_bus as lb
from ledger_bus.adapters.openai_agents import LedgerSession

set_tracing_disabled(True)  # no trace export: these runs have no OpenAI account


def build(
    session: LedgerSession,
    ran: Path,
    *,
    calls: str = "c",
    hang: bool = False,
    safe: tuple[str, ...] = (),
) -> tuple[Agent[Any], ScriptedModel]:
    """The agent and its model; `calls` names the model's call ids (a new run after a crash
    gets new ones from a real model)."""

    @function_tool
    def refund(order: int) -> str:
        """Refund an order."""
        with (ran / "refund").open("a") as f:
            f.write(f"{order}\n")
        return f"refunded {order}"

    @function_tool
    def notify(order: int) -> str:
        """Tell the customer."""
        with (ran / "notify").open("a") as f:
            f.write(f"{order}\n")
        if hang:
            (ran / "notify.started").touch()
            time.sleep(3600)
        return f"notified about {order}"

    model = ScriptedModel(
        [
            [function_call("refund", {"order": 7}, call_id=f"{calls}-refund")],
            [function_call("notify", {"order": 7}, call_id=f"{calls}-notify")],
            [assistant_message("refunded and notified")],
        ]
    )
    tools: list[Tool] = [*session.record_tools([refund, notify], safe_to_replay=safe)]
    return Agent(name="support", model=model, tools=tools), model


async def run(agent: Agent[Any], session: LedgerSession) -> str:
    result = await Runner.run(agent, "refund order 7", session=session)
    return str(result.final_output)


if __name__ == "__main__":
    url, prefix, session_id, where = sys.argv[1:5]
    session = LedgerSession(session_id, lb.connect(url, prefix=prefix), lease_ttl_ms=1000)
    agent, _ = build(session, Path(where), hang=True)
    asyncio.run(run(agent, session))


def handed_off(session: LedgerSession) -> str:
    """`triage` hands "refund order 7" off to `support`, which answers; run with the session
    and its run hooks. What the run said last."""
    support = Agent(name="support", model=ScriptedModel([[assistant_message("refunded")]]))
    triage = Agent(
        name="triage",
        model=ScriptedModel([[function_call("transfer_to_support", {}, call_id="h1")]]),
        handoffs=[support],
    )

    async def scenario() -> str:
        result = await Runner.run(
            triage, "refund order 7", session=session, hooks=session.run_hooks()
        )
        return str(result.final_output)

    return asyncio.run(scenario())
