"""Consumer groups beyond the contract's part (ledger_bus.testing.contract.groups, which
tests/contract/ runs on every backend): one-shot tailers, a read whose reply was lost, the
commands."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import ledger_bus as lb
from ledger_bus.agent.tailer import Tailer, TailerOptions
from ledger_bus.demo.server import LocalServer
from ledger_bus.model.ids import CURSOR_ZERO
from ledger_bus.model.records import Delivery
from ledger_bus.store.base import EventStore
from tests.support.proxy import DropProxy


def put(store: EventStore, session: str, *bodies: str) -> None:
    events = [{"type": "message", "agent": "w", "body": body} for body in bodies]
    store.append(lb.StreamId(session, "feed"), lb.ANY, f"put-{bodies[0]}", events)


def bodies(deliveries: list[Delivery]) -> list[str]:
    return [d.event["body"] for d in deliveries]


def test_one_shot_consumers_coming_and_going_do_not_pile_up(store: EventStore) -> None:
    # Given 200 processes that each follow once under a name of their own
    put(store, "g10", "first")
    for n in range(200):
        options = TailerOptions(block_ms=1, forget_idle_ms=0)
        tailer = Tailer(store, "g10", "workers", f"proc-{n}", options)
        tailer.ack(tailer.poll())
    # Then the group keeps no more than the last of them
    stats = store.group_stats("g10", "workers", idle_ms=0)
    assert stats.consumers + stats.idle_consumers <= 2
    assert stats.pending == 0


@pytest.fixture
def proxied(redis_server: LocalServer, prefix: str) -> Iterator[tuple[EventStore, DropProxy]]:
    proxy = DropProxy(redis_server.port)
    store = lb.connect(f"redis://127.0.0.1:{proxy.port}/0", prefix=prefix, timeout=5)
    yield store, proxy
    store.close()
    proxy.close()


@pytest.mark.parametrize("claim_idle_ms", [None, 60_000])
def test_events_delivered_by_a_read_whose_reply_was_lost_reach_the_handler(
    proxied: tuple[EventStore, DropProxy], claim_idle_ms: int | None
) -> None:
    # Given a running consumer that has polled once (its start-up recovery is behind it)
    store, proxy = proxied
    tailer = Tailer(
        store, "lost", "g", "c", TailerOptions(block_ms=200, claim_idle_ms=claim_idle_ms)
    )
    tailer.join(0)
    assert tailer.poll() == []
    put(store, "lost", *[f"e{n}" for n in range(5)])

    # When the reply to the read that delivers the five events is lost
    proxy.drop_next_reply_to(b"XREADGROUP")
    batch = tailer.poll()

    # Then the retried read hands them to the consumer all the same, once each
    assert proxy.dropped == 1
    assert bodies(batch) == [f"e{n}" for n in range(5)]
    tailer.ack(batch)
    assert tailer.stats().pending == 0
    assert tailer.poll() == []


# -- administering groups ------------------------------------------------------------------------


def test_groups_from_the_command_line(redis_url: str, prefix: str) -> None:
    import json

    from tests.support.helpers import ledger_here

    with lb.connect(redis_url, prefix=prefix) as direct:
        put(direct, "gc", "poison", "fine")
        direct.group_create("gc", "workers", CURSOR_ZERO)
        poison, _ = direct.group_read("gc", "workers", "w1", 10, None)
        direct.group_dead_letter("gc", "workers", poison, "kept failing")

    def run(*args: str) -> list[dict[str, object]]:
        done = ledger_here(redis_url, prefix, *args)
        assert done.returncode == 0, done.stderr
        return [json.loads(line) for line in done.stdout.splitlines()]

    (listed,) = run("groups", "gc")
    assert (listed["group"], listed["pending"], listed["dead_letters"]) == ("workers", 1, 1)
    (held,) = run("groups", "pending", "gc", "workers")
    assert (held["consumer"], held["deliveries"]) == ("w1", 1)
    (letter,) = run("groups", "dead-letters", "gc", "workers")
    assert letter["reason"] == "kept failing"
    assert run("groups", "dead-letters", "gc", "workers", "--replay")[0]["replayed"] == 1
    assert run("groups", "reset", "gc", "workers", "--to", "0")[0]["after"] == CURSOR_ZERO
    # Without --yes, a dry run as `delete` does: what would go, and nothing deleted.
    (before,) = run("groups", "gc")
    dry = ledger_here(redis_url, prefix, "groups", "delete", "gc", "workers", "-o", "jsonl")
    assert dry.returncode == 0, dry.stderr
    said = json.loads(dry.stdout)
    assert (said["would_delete"], said["pending"]) == (True, before["pending"])
    assert "nothing deleted" in dry.stderr
    assert [g["group"] for g in run("groups", "gc")] == ["workers"]
    assert ledger_here(redis_url, prefix, "groups", "delete", "gc", "nobody").returncode == 6
    assert run("groups", "delete", "gc", "workers", "--yes")[0]["deleted"] is True
    missing = ledger_here(redis_url, prefix, "groups", "delete", "gc", "workers", "--yes")
    assert missing.returncode == 6
    assert run("groups", "gc") == []
