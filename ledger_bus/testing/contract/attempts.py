"""The attempts' part of the contract (with the log's): a lease is held by one owner at a time,
and a call requested without a result is open until its result (or a resolution) closes it:
what a resumed run and the reconciler work from.

    from ledger_bus.testing.contract.attempts import *  # noqa: F403
"""

from __future__ import annotations

import time

import pytest

import ledger_bus as lb
from ledger_bus.store.buckets import INDEX_BUCKETS
from ledger_bus.testing.events import call, msg, result

S = "att-1"
MAIN = lb.StreamId(S, "main")


def test_a_lease_is_held_by_one_owner_until_released(store: lb.EventStore) -> None:
    mine = store.acquire_lease(S, "run-1", "me", 60_000)
    assert mine >= 1, "a holding draws a token"
    assert store.acquire_lease(S, "run-1", "me", 60_000) == mine, (
        "its owner keeps it, and its token"
    )
    assert store.acquire_lease(S, "run-1", "you", 60_000) == 0
    assert store.lease_alive(S, "run-1")
    assert store.renew_lease(S, "run-1", "you", 60_000) == 0
    assert store.release_lease(S, "run-1", "you") is False
    assert store.renew_lease(S, "run-1", "me", 60_000) == mine
    assert store.release_lease(S, "run-1", "me") is True
    assert not store.lease_alive(S, "run-1")
    yours = store.acquire_lease(S, "run-1", "you", 60_000)
    assert yours > mine, "every new holding draws a greater token"


def test_an_append_under_a_lease_lands_only_while_its_holding_lasts(store: lb.EventStore) -> None:
    # Given a writer holding the lease, and its appends made under it
    mine = lb.Fence("run-1", "me", store.acquire_lease(S, "run-1", "me", 60_000))
    store.append(MAIN, 0, "a1", [msg("one")], fence=mine)
    # When another process takes the lease over (the first stopped past its TTL: released here)
    assert store.release_lease(S, "run-1", "me")
    yours = lb.Fence("run-1", "you", store.acquire_lease(S, "run-1", "you", 60_000))
    # Then the first writer's next append is refused, whatever version it names, and writes nothing
    for expected in (1, 0, lb.ANY):
        with pytest.raises(lb.LeaseLost) as lost:
            store.append(MAIN, expected, "a2", [msg("zombie")], fence=mine)
        assert lost.value.token == yours.token
    assert [e.get("body") for e in store.read_stream(MAIN)] == ["one"]
    # And the rightful holder writes on, at the version it read
    assert store.append(MAIN, 1, "a2", [msg("two")], fence=yours).last_version == 2
    # And even a retry of an append recorded under the first holding is told the holding is
    # over (a zombie's append_id may be one the next holder used at the same version)
    with pytest.raises(lb.LeaseLost):
        store.append(MAIN, 0, "a1", [msg("one")], fence=mine)
    with pytest.raises(lb.LeaseLost):
        store.append(MAIN, 1, "a2", [msg("two")], fence=mine)
    assert store.append(MAIN, 1, "a2", [msg("two")], fence=yours).deduplicated


def test_an_append_under_an_expired_lease_is_refused(store: lb.EventStore) -> None:
    token = store.acquire_lease(S, "run-1", "me", 100)
    time.sleep(0.3)  # past the TTL; nobody took the lease
    with pytest.raises(lb.LeaseLost):
        store.append(MAIN, 0, "a1", [msg("late")], fence=lb.Fence("run-1", "me", token))
    assert store.stream_version(MAIN) == 0
    # Taken again by the same owner, it is a new holding: the old token stays refused
    again = store.acquire_lease(S, "run-1", "me", 60_000)
    assert again > token
    with pytest.raises(lb.LeaseLost):
        store.append(MAIN, 0, "a1", [msg("late")], fence=lb.Fence("run-1", "me", token))
    store.append(MAIN, 0, "a1", [msg("now")], fence=lb.Fence("run-1", "me", again))
    assert store.stream_version(MAIN) == 1


def test_a_fence_that_is_no_fence_is_invalid_input(store: lb.EventStore) -> None:
    for fence in ("run-1", lb.Fence("run-1", "me", 0), lb.Fence("run 1", "me", 1)):
        with pytest.raises(lb.InvalidInput):
            store.append(MAIN, 0, "a1", [msg("x")], fence=fence)  # type: ignore[arg-type]
    assert store.stream_version(MAIN) == 0


def test_a_requested_call_is_open_until_its_result_closes_it(store: lb.EventStore) -> None:
    store.append(MAIN, 0, "a1", [msg("go"), call("c-1", "run-1", "search"), call("c-2", "run-1")])

    open_ = store.open_attempts(S)
    assert [(a.attempt_id, a.tool, a.run_id, a.stream) for a in open_] == [
        ("c-1", "search", "run-1", "main"),
        ("c-2", "deploy", "run-1", "main"),
    ]
    assert open_[0].cursor < open_[1].cursor, "oldest first"
    assert S in dict(store.sessions_with_open_attempts())
    assert S in dict(store.sessions_with_open_attempts(range(INDEX_BUCKETS)))

    store.append(MAIN, 3, "a2", [result("c-1", "search")])

    assert [a.attempt_id for a in store.open_attempts(S)] == ["c-2"]
    assert store.open_attempts_of([S, "never-written"]) == {
        S: store.open_attempts(S),
        "never-written": [],
    }


def test_a_session_with_nothing_open_is_forgotten_by_the_index(store: lb.EventStore) -> None:
    store.append(MAIN, 0, "a1", [call("c-1")])
    assert store.forget_idle_session(S, store.now_ms() + 1) is False, "c-1 is open"
    store.append(MAIN, 1, "a2", [result("c-1")])
    assert store.forget_idle_session(S, store.now_ms() + 1) is True
    assert S not in dict(store.sessions_with_open_attempts())


def test_a_tool_is_unsafe_to_replay_unless_its_run_declared_it(store: lb.EventStore) -> None:
    assert store.safe_to_replay(S, None, "deploy") is False
    assert store.safe_to_replay(S, "run-1", "deploy") is False


# What `from ledger_bus.testing.contract.attempts import *` brings: the tests alone.
__all__ = [name for name in list(globals()) if name.startswith("test_")]
