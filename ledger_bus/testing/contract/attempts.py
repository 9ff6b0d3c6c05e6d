"""The attempts' part of the contract (with the log's): a lease is held by one owner at a time,
and a call requested without a result is open until its result (or a resolution) closes it:
what a resumed run and the reconciler work from.

    from ledger_bus.testing.contract.attempts import *  # noqa: F403
"""

from __future__ import annotations

import ledger_bus as lb
from ledger_bus.store.buckets import INDEX_BUCKETS
from ledger_bus.testing.events import call, msg, result

S = "att-1"
MAIN = lb.StreamId(S, "main")


def test_a_lease_is_held_by_one_owner_until_released(store: lb.EventStore) -> None:
    assert store.acquire_lease(S, "run-1", "me", 60_000) is True
    assert store.acquire_lease(S, "run-1", "me", 60_000) is True, "its owner keeps it"
    assert store.acquire_lease(S, "run-1", "you", 60_000) is False
    assert store.lease_alive(S, "run-1")
    assert store.renew_lease(S, "run-1", "you", 60_000) is False
    assert store.release_lease(S, "run-1", "you") is False
    assert store.renew_lease(S, "run-1", "me", 60_000) is True
    assert store.release_lease(S, "run-1", "me") is True
    assert not store.lease_alive(S, "run-1")
    assert store.acquire_lease(S, "run-1", "you", 60_000) is True


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
