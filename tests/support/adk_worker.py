"""Processes that drive LedgerSessionService as an ADK runner does, for the tests that need
several of them at once (tests/adapters/test_adk_shared_state.py):

    python -m tests.support.adk_worker count URL PREFIX SESSION TIMES
        read the session and append an event raising counter, user:counter and app:counter by
        one, TIMES times, reading again after each StaleSessionError; prints how many it was
        refused
    python -m tests.support.adk_worker hold URL PREFIX LEASE_TTL_MS
        a line at a time on stdin, answering a line each (`ok`, `lost ...`, `stale ...`):
        `ask S RUN` (a model event asking for a call: the run's lease taken), `answer S RUN` (its
        response, on the Session the ask left), `make S` (the session made)
    python -m tests.support.adk_worker torn URL PREFIX SESSION
        append an event raising the three counters, killed (SIGKILL) after its shared-state
        intents and before the event itself
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sys
from typing import Any

from google.adk.errors import StaleSessionError
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.sessions.base_session_service import GetSessionConfig
from google.adk.sessions.session import Session
from google.genai import types

import ledger_bus as lb
from ledger_bus.adapters.adk import LedgerSessionService

APP, USER = "counters", "u1"
# How a runner configured to send the model its last event reads: the state whole, the events
# from the tail (a whole read of a long session costs what it holds, and says nothing here).
RECENT = GetSessionConfig(num_recent_events=1)


def raised(session: Session, n: int) -> Event:
    """An event raising the three counters by one from what `session` holds."""
    state = session.state
    delta = {
        "counter": int(state.get("counter", 0)) + 1,
        "user:counter": int(state.get("user:counter", 0)) + 1,
        "app:counter": int(state.get("app:counter", 0)) + 1,
    }
    return Event(
        invocation_id=f"inv-{n}", author="counter", actions=EventActions(state_delta=delta)
    )


async def count(url: str, prefix: str, session_id: str, times: int) -> int:
    """Raise the counters `times` times; how often a stale read was refused."""
    service = LedgerSessionService.from_url(url, prefix=prefix)
    refused = 0
    for n in range(times):
        while True:
            session = await service.get_session(
                app_name=APP, user_id=USER, session_id=session_id, config=RECENT
            )
            assert session is not None
            await asyncio.sleep(random.uniform(0, 0.002))  # a model's think time, shortened
            try:
                await service.append_event(session, raised(session, n))
                break
            except StaleSessionError:
                refused += 1
    await service.close()
    return refused


def call_event(run: str, call_id: str) -> Event:
    asked = types.FunctionCall(id=call_id, name="deploy", args={"to": "prod"})
    content = types.Content(role="model", parts=[types.Part(function_call=asked)])
    return Event(invocation_id=run, author="root", content=content)


def response_event(run: str, call_id: str) -> Event:
    answer = types.FunctionResponse(id=call_id, name="deploy", response={"deployed": True})
    content = types.Content(role="user", parts=[types.Part(function_response=answer)])
    return Event(invocation_id=run, author="root", content=content)


async def hold(url: str, prefix: str, ttl_ms: int) -> None:
    service = LedgerSessionService.from_url(url, prefix=prefix, lease_ttl_ms=ttl_ms)
    held: dict[str, Session] = {}
    loop = asyncio.get_running_loop()
    while line := await loop.run_in_executor(None, sys.stdin.readline):
        verb, session_id, *rest = line.split()
        try:
            if verb == "make":
                await service.create_session(app_name=APP, user_id=USER, session_id=session_id)
            else:
                run = rest[0]
                if verb == "ask":
                    session = await service.get_session(
                        app_name=APP, user_id=USER, session_id=session_id
                    )
                    assert session is not None
                    held[session_id] = session
                    await service.append_event(session, call_event(run, f"{run}-call"))
                else:  # answer
                    session = held.pop(session_id)
                    await service.append_event(session, response_event(run, f"{run}-call"))
            answer = "ok"
        except lb.LeaseLost as err:
            answer = f"lost {err}"
        except StaleSessionError as err:
            answer = f"stale {err}"
        sys.stdout.write(answer + "\n")
        sys.stdout.flush()
    await service.close()


async def torn(url: str, prefix: str, session_id: str) -> None:
    from ledger_bus.adapters.adk import shared as shared_module

    service = LedgerSessionService.from_url(url, prefix=prefix)
    intents = shared_module.SharedState.intents_op

    def then_die(self: Any, *args: Any) -> Any:
        written = yield from intents(self, *args)
        os.kill(os.getpid(), signal.SIGKILL)  # after the intents, before the event
        return written

    shared_module.SharedState.intents_op = then_die  # type: ignore[method-assign,assignment]
    session = await service.get_session(app_name=APP, user_id=USER, session_id=session_id)
    assert session is not None
    await service.append_event(session, raised(session, 0))


if __name__ == "__main__":
    what, *args = sys.argv[1:]
    if what == "count":
        print(asyncio.run(count(args[0], args[1], args[2], int(args[3]))))
    elif what == "hold":
        asyncio.run(hold(args[0], args[1], int(args[2])))
    elif what == "torn":
        asyncio.run(torn(*args))
    else:
        raise SystemExit(f"unknown worker {what}")
