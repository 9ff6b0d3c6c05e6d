"""The live demo: an orchestrator and three workers, separate processes, one ledger.

The orchestrator hands out tasks as mutations; workers receive them through one consumer group,
call deterministic local tools through the recorder (request committed before each call), and
report. The demo kills one worker with SIGKILL in the middle of a slow call; another worker takes
over the task it had not acked. Nothing but the ledger connects the processes.

    python -m ledger_bus.demo.agents orchestrator SESSION TASKS
    python -m ledger_bus.demo.agents worker SESSION NAME
"""

from __future__ import annotations

import hashlib
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any, Final

import ledger_bus
from ledger_bus.agent.recorder import Recorder
from ledger_bus.agent.tailer import Tailer, TailerOptions, render_context
from ledger_bus.model.ids import CURSOR_ZERO
from ledger_bus.model.jsontext import JSONObject
from ledger_bus.model.records import RecordedEvent
from ledger_bus.store.base import EventStore

WORKER_GROUP: Final = "workers"
SLOW_TOOL: Final = "summarize_archive"
TAKEOVER_IDLE_MS: Final = 1500


# -- deterministic local tools: no network, no model service --------------------------------------


def word_count(text: str) -> dict[str, int]:
    return {"words": len(text.split()), "characters": len(text)}


def checksum(text: str) -> dict[str, str]:
    return {"sha256": hashlib.sha256(text.encode()).hexdigest()[:16]}


def primes_below(limit: int) -> JSONObject:
    sieve = bytearray([1]) * limit
    sieve[:2] = b"\x00\x00"
    for n in range(2, int(limit**0.5) + 1):
        if sieve[n]:
            sieve[n * n :: n] = bytearray(len(sieve[n * n :: n]))
    found = [n for n in range(limit) if sieve[n]]
    return {"count": len(found), "largest": found[-1] if found else None}


def summarize_archive(text: str, seconds: float) -> JSONObject:
    """The slow one: long enough for the demo to kill a worker in the middle of it."""
    time.sleep(seconds)
    words = text.split()
    return {"summary": " ".join(words[:6]) + " ...", "words": len(words)}


TOOLS: Final[dict[str, Callable[..., dict[str, Any]]]] = {
    "word_count": word_count,
    "checksum": checksum,
    "primes_below": primes_below,
    SLOW_TOOL: summarize_archive,
}

TEXT: Final = (
    "Agents in many processes on many hosts work on one task and need one shared append-only"
    " record of everything that happened"
)


def plan(tasks: int) -> list[JSONObject]:
    """The orchestrator's tasks: cheap ones, and two slow ones so that a kill lands mid-call."""
    shapes: list[tuple[str, JSONObject]] = [
        ("word_count", {"text": TEXT}),
        ("checksum", {"text": TEXT}),
        (SLOW_TOOL, {"text": TEXT, "seconds": 2.5}),
        ("primes_below", {"limit": 50_000}),
    ]
    return [
        {
            "task_id": f"t{i + 1}",
            "tool": shapes[i % len(shapes)][0],
            "args": shapes[i % len(shapes)][1],
        }
        for i in range(tasks)
    ]


# -- the processes --------------------------------------------------------------------------------


def orchestrator(store: EventStore, session: str, tasks: int) -> None:
    """Hand out the tasks, wait until every one is reported done, then say so."""
    recorder = Recorder(store, session, "orchestrator")
    with recorder.run("orchestrator") as run:
        run.message(f"Splitting the job into {tasks} tasks for the workers")
        todo = plan(tasks)
        for task in todo:
            run.mutate("task.assigned", **task)
        pending = {str(task["task_id"]) for task in todo}
        cursor = CURSOR_ZERO  # the whole session: a task may be done before this loop starts
        deadline = time.monotonic() + 120
        while pending and time.monotonic() < deadline:
            for event in store.wait_session(session, cursor, timeout_ms=1000):
                cursor = event.cursor
                if event.type == "mutation" and event["kind"] == "task.done":
                    pending.discard(event["task_id"])
        if pending:
            run.message(f"Gave up waiting for {sorted(pending)}")
            return
        run.message(f"All {tasks} tasks are done")
        run.mutate("session.complete", tasks=tasks)


def worker(store: EventStore, session: str, name: str) -> None:
    """Take tasks from the group, call the tool through the recorder, report; until stopped."""
    recorder = Recorder(store, session, name, lease_ttl_ms=3000)
    options = TailerOptions(types={"mutation"}, claim_idle_ms=TAKEOVER_IDLE_MS, block_ms=500)
    tailer = Tailer(store, session, WORKER_GROUP, name, options)
    context = tailer.join(10)
    logging.getLogger("demo").info("%s joined with context:\n%s", name, render_context(context))

    def handle(event: RecordedEvent) -> None:
        if event["kind"] != "task.assigned":
            return
        task_id = event["task_id"]
        with recorder.run(f"{name}-{task_id}-{event.cursor[-6:]}", parents=[event.event_id]) as run:
            run.message(f"{name} takes {task_id}: {event['tool']}")
            result = run.call(event["tool"], event["args"], TOOLS[event["tool"]])
            run.mutate("task.done", task_id=task_id, by=name, result=result)

    tailer.run(handle)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str]) -> None:
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    signal.signal(signal.SIGTERM, _interrupt)
    role, session, arg = argv
    # The demo command hands its URL and prefix down through the environment.
    store = ledger_bus.connect(prefix=os.environ.get("LEDGER_BUS_PREFIX", "lb"))
    try:
        if role == "orchestrator":
            orchestrator(store, session, int(arg))
        else:
            worker(store, session, arg)
    except KeyboardInterrupt:
        pass
    finally:
        store.close()


if __name__ == "__main__":
    main(sys.argv[1:])
