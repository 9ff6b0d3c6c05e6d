"""Fenced leases, as a crash and a stop-the-world pause exercise them: a process stopped past its
lease (SIGSTOP), then continued (SIGCONT) with its next write already queued, writes nothing,
whether another process took the run over meanwhile or nobody did; and the rightful holder is
never refused for what the stopped one tried.

The Python recorder here, and the recorded calls the LangGraph and Agents SDK adapters make
(adapters/calls.py); the TypeScript and Go SDKs have drills of their own in their test suites.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import pytest

import ledger_bus as lb
from ledger_bus.adapters.calls import CallLedger, ToolStep
from ledger_bus.agent.recorder import OutcomeNotRecorded
from ledger_bus.store.base import EventStore
from tests.support.lines import LineProcess

ROUNDS = 50
ZOMBIE_TTL_MS = 250  # the stopped process's lease: short, so that a round is short, and long
# enough that a loaded machine does not let it lapse before the stop
HOLDER_TTL_MS = 10_000  # the new holder's: it must not lapse while a round looks on
HOLDER = "tests.support.lease_holder"


@contextmanager
def holders(redis_url: str, prefix: str, session: str) -> Iterator[tuple[LineProcess, LineProcess]]:
    zombie = LineProcess(HOLDER, redis_url, prefix, session, str(ZOMBIE_TTL_MS))
    heir = LineProcess(HOLDER, redis_url, prefix, session, str(HOLDER_TTL_MS))
    try:
        yield zombie, heir
    finally:
        zombie.close()
        heir.close()


def bodies(store: EventStore, session: str, run: str) -> list[str]:
    return [
        str(e.get("body") or e.get("kind"))
        for e in store.read_stream(lb.StreamId(session, f"run-{run}"))
    ]


def drill(redis_url: str, prefix: str, takeover: bool) -> int:
    """ROUNDS rounds of a stopped run's queued write; how many were refused."""
    # Given a process whose run holds a short lease, and another that may take the run over
    session = f"fenced-{takeover}"
    store = lb.connect(redis_url, prefix=prefix)
    refused = 0
    with holders(redis_url, prefix, session) as (zombie, heir):
        for n in range(ROUNDS):
            run = f"r{n}"
            zombie.ok(f"start {run}")
            zombie.ok(f"say {run} before")
            # When it is stopped past its lease
            zombie.stop()
            time.sleep(2 * ZOMBIE_TTL_MS / 1000)  # past the lease, however late its last renewal
            # the heir holds the lease now: in even rounds it has written nothing yet, in odd
            # ones its run.resumed holds the very append id the zombie's next write will use
            wrote_first = takeover and n % 2 == 1
            if takeover:
                heir.ok(f"take {run}")
            if wrote_first:
                heir.ok(f"go {run}")
            # and continued with its next write already queued
            zombie.queue(f"say {run} zombie")
            zombie.cont()
            # Then that write is refused, and nothing of it is stored
            answer = zombie.answer()
            assert answer.startswith("lost "), f"round {n}: {answer}"
            refused += 1
            zombie.ok(f"drop {run}")
            assert "zombie" not in bodies(store, session, run), f"round {n}"
            if takeover:
                # And the rightful holder writes on
                if not wrote_first:
                    heir.ok(f"go {run}")
                heir.ok(f"say {run} heir")
                heir.ok(f"end {run}")
                assert bodies(store, session, run) == [
                    "run.started",
                    "before",
                    "run.resumed",
                    "heir",
                    "run.finished",
                ], f"round {n}"
            else:
                assert bodies(store, session, run) == ["run.started", "before"], f"round {n}"
    store.close()
    return refused


@pytest.mark.slow
def test_a_recorder_stopped_past_its_lease_writes_nothing_more(redis_url: str, prefix: str) -> None:
    # The two drills side by side (their waits overlap): nobody takes the run over, or the heir
    # does (and, every other round, writes before the stopped process's write arrives).
    with ThreadPoolExecutor(2) as pool:
        drills = [pool.submit(drill, redis_url, prefix, takeover) for takeover in (False, True)]
        assert [d.result() for d in drills] == [ROUNDS, ROUNDS]


def test_a_recorded_call_whose_lease_another_took_records_no_outcome(
    store: EventStore,
) -> None:
    # Given a framework's call begun (its request recorded under the call's lease)
    ledger = CallLedger(store, agent="graph", lease_ttl_ms=60_000)
    thread = lb.StreamId("calls-1", "thread")
    done, begun = store.run_op(
        ledger.begin_op(thread, ToolStep("call-1", "deploy", {"to": "prod"}, False))
    )
    assert not done
    # When another process takes the call's lease over (this one was stopped past it)
    lease = f"run-{begun.run_id}"
    assert store.release_lease("calls-1", lease, begun.owner)
    assert store.acquire_lease("calls-1", lease, "another-process", 60_000)
    # Then this process's outcome is not recorded, and says why
    with pytest.raises(OutcomeNotRecorded) as raised:
        store.run_op(ledger.end_op(begun, "ok", {"deployed": True}))
    assert isinstance(raised.value.__cause__, lb.LeaseLost)
    assert [e.type for e in store.read_stream(thread)] == ["tool_call"]
