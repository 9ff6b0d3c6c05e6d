"""Google ADK's shared state (`app:`, `user:`) under concurrent writers and crashes, and the
run's lease fencing the session's appends: LedgerSessionService loses no update of any scope,
shows an event and its shared-state change together or not at all, and a process stopped past
its lease writes nothing more."""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from google.adk.errors import StaleSessionError
from google.adk.errors.session_not_found_error import SessionNotFoundError

import ledger_bus as lb
from ledger_bus.adapters.adk import LedgerSessionService
from ledger_bus.adapters.adk.layout import EVENTS, session_of
from ledger_bus.store.base import EventStore
from tests.support.adk_worker import APP, RECENT, USER, raised
from tests.support.lines import LineProcess

ROOT = Path(__file__).resolve().parents[2]
WORKER = "tests.support.adk_worker"
WRITERS, TIMES = 4, 200


def worker(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", WORKER, *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )


def counters(service: LedgerSessionService, session_id: str) -> tuple[Any, Any, Any]:
    session = asyncio.run(service.get_session(app_name=APP, user_id=USER, session_id=session_id))
    assert session is not None
    s = session.state
    return s.get("counter"), s.get("user:counter"), s.get("app:counter")


@pytest.mark.parametrize("store", ["memory", "redis"], indirect=True)
def test_four_tasks_raising_every_scope_lose_no_update(store: EventStore) -> None:
    # Given a session, and four tasks that each read it and raise a counter of every scope
    service = LedgerSessionService(store)

    async def writer(n: int) -> None:
        for turn in range(TIMES):
            while True:
                session = await service.get_session(
                    app_name=APP, user_id=USER, session_id="s", config=RECENT
                )
                assert session is not None
                await asyncio.sleep(random.uniform(0, 0.002))
                try:
                    await service.append_event(session, raised(session, n * TIMES + turn))
                    break
                except StaleSessionError:
                    continue

    async def run() -> None:
        await service.create_session(app_name=APP, user_id=USER, session_id="s")
        await asyncio.gather(*(writer(n) for n in range(WRITERS)))

    # When they run at once
    asyncio.run(run())
    # Then every raise of every scope counts
    assert counters(service, "s") == (WRITERS * TIMES,) * 3


@pytest.mark.slow
def test_four_processes_raising_every_scope_lose_no_update(redis_url: str, prefix: str) -> None:
    service = LedgerSessionService.from_url(redis_url, prefix=prefix)
    asyncio.run(service.create_session(app_name=APP, user_id=USER, session_id="p"))
    writers = [worker("count", redis_url, prefix, "p", str(TIMES)) for _ in range(WRITERS)]
    refused = [int(w.communicate()[0]) for w in writers]
    assert all(w.returncode == 0 for w in writers)
    assert sum(refused) > 0, "the writers met: the test shows nothing otherwise"
    assert counters(service, "p") == (WRITERS * TIMES,) * 3
    asyncio.run(service.close())


def test_a_reader_between_an_event_and_its_shared_change_sees_neither(
    redis_url: str, prefix: str
) -> None:
    # Given writer A, held inside its append_event right after the append's first write
    a = LedgerSessionService.from_url(redis_url, prefix=prefix)
    b = LedgerSessionService.from_url(redis_url, prefix=prefix)
    asyncio.run(a.create_session(app_name=APP, user_id=USER, session_id="h"))
    reached, go = threading.Event(), threading.Event()
    real = a.store.append_op
    holding = threading.Event()

    def append_op(*args: Any, **kwargs: Any) -> Any:
        done = yield from real(*args, **kwargs)
        if holding.is_set():
            holding.clear()
            reached.set()
            go.wait(30)
        return done

    a.store.append_op = append_op  # type: ignore[method-assign]

    async def scenario() -> tuple[Any, int]:
        session = await a.get_session(app_name=APP, user_id=USER, session_id="h")
        assert session is not None
        holding.set()
        first = asyncio.create_task(a.append_event(session, raised(session, 1)))
        await asyncio.to_thread(reached.wait, 30)
        # When B reads meanwhile, and raises the counters on what it read
        seen = await b.get_session(app_name=APP, user_id=USER, session_id="h")
        assert seen is not None
        view = (
            seen.state.get("counter"),
            seen.state.get("user:counter"),
            seen.state.get("app:counter"),
        )
        landed = 0
        try:
            await b.append_event(seen, raised(seen, 2))
            landed += 1
        except StaleSessionError:
            pass  # B read a change still pending (A is held between its two steps)
        finally:
            go.set()
        with contextlib.suppress(StaleSessionError):
            await first
            landed += 1
        return view, landed

    view, landed = asyncio.run(scenario())
    # Then B saw A's event with its shared change, or neither
    assert view in ((None, None, None), (1, 1, 1))
    # And every scope counts the appends that landed, no more, no less
    assert counters(b, "h") == ((landed or None),) * 3
    asyncio.run(a.close())
    asyncio.run(b.close())


def test_a_writer_killed_between_its_intents_and_its_event_leaves_neither_seen(
    redis_url: str, prefix: str
) -> None:
    service = LedgerSessionService.from_url(redis_url, prefix=prefix)
    asyncio.run(service.create_session(app_name=APP, user_id=USER, session_id="k"))
    # Given a writer killed after its shared-state intents, before its event
    torn = worker("torn", redis_url, prefix, "k")
    torn.communicate()
    assert torn.returncode == -signal.SIGKILL
    # Then no reader sees its change in any scope
    assert counters(service, "k") == (None, None, None)
    other = asyncio.run(service.get_user_state(app_name=APP, user_id=USER))
    assert "counter" not in other
    # And the next writer, reading again after each refusal, is refused while the dead one's
    # change is younger than the patience a writer has for it, then aborts it and lands
    refused = 0
    while True:
        session = asyncio.run(service.get_session(app_name=APP, user_id=USER, session_id="k"))
        assert session is not None
        try:
            asyncio.run(service.append_event(session, raised(session, 1)))
            break
        except StaleSessionError:
            refused += 1
            assert refused < 1_000, "the dead writer's change is never aborted"
            time.sleep(0.05)
    assert refused > 0
    assert counters(service, "k") == (1, 1, 1)
    asyncio.run(service.close())


def test_a_reader_never_sees_a_change_another_session_built_on_without_its_event(
    memory_store: EventStore,
) -> None:
    # Given reader R, held right after it read session S's events
    service = LedgerSessionService(memory_store)
    held, go = threading.Event(), threading.Event()
    real = memory_store.read_stream_op
    holding = threading.Event()
    s_events = lb.StreamId(session_of(APP, USER, "S"), EVENTS)

    def read_stream_op(stream: lb.StreamId, *args: Any, **kwargs: Any) -> Any:
        found = yield from real(stream, *args, **kwargs)
        if stream == s_events and holding.is_set():
            holding.clear()
            held.set()
            go.wait(30)
        return found

    memory_store.read_stream_op = read_stream_op  # type: ignore[method-assign]

    async def scenario() -> tuple[int, Any]:
        s = await service.create_session(app_name=APP, user_id=USER, session_id="S")
        await service.create_session(app_name=APP, user_id=USER, session_id="T")
        holding.set()
        reader = asyncio.create_task(
            service.get_session(app_name=APP, user_id=USER, session_id="S")
        )
        await asyncio.to_thread(held.wait, 30)
        # When S's writer changes the app's state, and T's writer builds on that change
        try:
            await service.append_event(s, raised(s, 1))
            t = await service.get_session(app_name=APP, user_id=USER, session_id="T")
            assert t is not None
            await service.append_event(t, raised(t, 2))
        finally:
            go.set()
        seen = await reader
        assert seen is not None
        return len(seen.events), seen.state.get("app:counter")

    # Then R sees S's event with the app's state after it (and T's), or neither
    assert asyncio.run(scenario()) in ((0, None), (1, 2))


@pytest.mark.parametrize("store", ["memory", "redis"], indirect=True)
def test_a_sessions_deletion_keeps_its_committed_change_and_blocks_no_writer(
    store: EventStore,
) -> None:
    service = LedgerSessionService(store)

    async def scenario() -> tuple[Any, Any]:
        # Given a session whose event changed the app's state (its intent last in the scope)
        made = await service.create_session(app_name=APP, user_id=USER, session_id="gone")
        await service.append_event(made, raised(made, 1))
        # When the session is deleted, its old Session still held by a runner
        await service.delete_session(app_name=APP, user_id=USER, session_id="gone")
        other = await service.create_session(app_name=APP, user_id=USER, session_id="other")
        seen = other.state.get("app:counter")
        # Then an event on the old Session is refused, its intents taken back, and the next
        # writer of the app's state builds on the committed change without waiting for it
        with pytest.raises(SessionNotFoundError):
            await service.append_event(made, raised(made, 2))
        await service.append_event(other, raised(other, 3))
        after = await service.get_session(app_name=APP, user_id=USER, session_id="other")
        assert after is not None
        return seen, after.state.get("app:counter")

    assert asyncio.run(scenario()) == (1, 2)


# -- the run's lease fences the session's appends --------------------------------------------

ROUNDS = 50
TTL_MS = 300  # long enough that a loaded machine does not let it lapse before the stop


@contextlib.contextmanager
def holders(redis_url: str, prefix: str) -> Iterator[tuple[LineProcess, LineProcess]]:
    zombie = LineProcess(WORKER, "hold", redis_url, prefix, str(TTL_MS))
    heir = LineProcess(WORKER, "hold", redis_url, prefix, "10000")
    try:
        yield zombie, heir
    finally:
        zombie.close()
        heir.close()


def events_of(store: EventStore, session_id: str) -> list[str]:
    """The ADK events' authors and kinds of call: what a session holds, briefly."""
    found = []
    for record in store.read_stream(lb.StreamId(session_of(APP, USER, session_id), EVENTS)):
        event = record.fields.get("event")
        if event is not None:
            part = event["content"]["parts"][0]
            found.append(next(iter(k for k in part if k.startswith("function"))))
    return found


def drill(redis_url: str, prefix: str, takeover: bool) -> int:
    """ROUNDS rounds of a stopped service's queued answer; how many were refused."""
    store = lb.connect(redis_url, prefix=prefix)
    refused = 0
    with holders(redis_url, prefix) as (zombie, heir):
        for n in range(ROUNDS):
            session, run = f"f{takeover:d}-{n}", f"run-{n}"
            assert zombie.ask(f"make {session}") == "ok"
            # Given a service whose run asked for a call (the run's lease held while it is out)
            assert zombie.ask(f"ask {session} {run}") == "ok"
            # When it is stopped past the lease, then continued with the call's answer queued
            zombie.stop()
            time.sleep(2 * TTL_MS / 1000)  # past the lease, however late its last renewal
            if takeover:  # another process's runner asks for the run's call again (and holds it)
                assert heir.ask(f"ask {session} {run}") == "ok"
            zombie.queue(f"answer {session} {run}")
            zombie.cont()
            # Then the answer is refused and nothing of it is stored
            answer = zombie.answer()
            assert answer.startswith("lost "), f"round {n}: {answer}"
            refused += 1
            if takeover:
                # And the rightful holder answers
                assert heir.ask(f"answer {session} {run}") == "ok", f"round {n}"
                expected = ["function_call", "function_call", "function_response"]
            else:
                expected = ["function_call"]
            assert events_of(store, session) == expected, f"round {n}"
    store.close()
    return refused


@pytest.mark.slow
def test_a_service_stopped_past_its_runs_lease_writes_nothing_more(
    redis_url: str, prefix: str
) -> None:
    # The two drills side by side (their waits overlap): nobody takes the run over, or another
    # process's runner does.
    with ThreadPoolExecutor(2) as pool:
        drills = [pool.submit(drill, redis_url, prefix, takeover) for takeover in (False, True)]
        assert [d.result() for d in drills] == [ROUNDS, ROUNDS]
