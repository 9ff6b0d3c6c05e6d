"""One replica of an A2A server on the ledger, for the tests that kill one (a process of its own):
a2a-sdk's JSON-RPC routes, the ledger's request handler (a LedgerVersionedTaskStore and a
LedgerTaskEventStream on one Redis), and a scripted agent that counts.

    python -m tests.support.a2a_replica --port P --url redis://... --prefix X --name a

The agent (`Counter`) says it is working, then for each tick from the first it has not made yet
(read from the task: a replica that takes a task over goes on where the task stands) makes the
artifact `tick-<n>` and a status update saying `tick <n>`, one every `--tick-s` seconds; after
`--ticks` it completes. It prints `ready <port>` once it serves.
"""

from __future__ import annotations

import argparse
import asyncio
import re

import uvicorn
from a2a.helpers.proto_helpers import new_task_from_user_message
from a2a.server.agent_execution.agent_executor import AgentExecutor
from a2a.server.agent_execution.context import RequestContext
from a2a.server.events.event_queue import EventQueue
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks.task_updater import TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Part,
    Task,
    TaskState,
)
from starlette.applications import Starlette

from ledger_bus import aio
from ledger_bus.adapters.a2a import LedgerRequestHandler, LedgerVersionedTaskStore

TICK = re.compile(r"tick-(\d+)")


def done_ticks(task: Task | None) -> int:
    """The last tick the task holds an artifact of (0: none)."""
    if task is None:
        return 0
    found = [int(m.group(1)) for a in task.artifacts if (m := TICK.fullmatch(a.artifact_id))]
    return max(found, default=0)


class Counter(AgentExecutor):
    def __init__(self, name: str, ticks: int, tick_s: float):
        self.name, self.ticks, self.tick_s = name, ticks, tick_s

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        updater = TaskUpdater(
            event_queue, str(context.task_id or ""), str(context.context_id or "")
        )
        if context.current_task is None:
            assert context.message is not None
            await event_queue.enqueue_event(new_task_from_user_message(context.message))
        first = done_ticks(context.current_task) + 1
        await updater.start_work(
            message=updater.new_agent_message([Part(text=f"[{self.name}] from tick {first}")])
        )
        for n in range(first, self.ticks + 1):
            await asyncio.sleep(self.tick_s)
            await updater.add_artifact(
                [Part(text=f"tick {n} by {self.name}")], artifact_id=f"tick-{n}", name=f"tick {n}"
            )
            await updater.update_status(
                TaskState.TASK_STATE_WORKING,
                message=updater.new_agent_message([Part(text=f"tick {n}")]),
            )
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        return  # a cancel is the store's: the running agent's next save is refused


def card(port: int) -> AgentCard:
    return AgentCard(
        name="counter",
        description="Counts, slowly, so that a replica can be killed in the middle.",
        version="1.0.0",
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        default_input_modes=["text"],
        default_output_modes=["text"],
        skills=[AgentSkill(id="count", name="count", description="counts", tags=["test"])],
        supported_interfaces=[
            AgentInterface(
                protocol_binding="JSONRPC",
                protocol_version="1.0",
                url=f"http://127.0.0.1:{port}/a2a/jsonrpc",
            )
        ],
    )


async def serve(args: argparse.Namespace) -> None:
    store = await aio.connect(args.url, prefix=args.prefix)
    handler = LedgerRequestHandler(
        agent_executor=Counter(args.name, args.ticks, args.tick_s),
        task_store=LedgerVersionedTaskStore(store, agent="counter"),
        agent_card=card(args.port),
    )
    app = Starlette(
        routes=[
            *create_jsonrpc_routes(request_handler=handler, rpc_url="/a2a/jsonrpc"),
            *create_agent_card_routes(agent_card=card(args.port)),
        ]
    )
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=args.port, log_level="warning")
    )
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.02)
    print(f"ready {args.port}", flush=True)
    await task


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--url", required=True)
    parser.add_argument("--prefix", default="")
    parser.add_argument("--name", default="replica")
    parser.add_argument("--ticks", type=int, default=12)
    parser.add_argument("--tick-s", type=float, default=0.25)
    asyncio.run(serve(parser.parse_args()))


if __name__ == "__main__":
    main()
