"""Bounded streams (spec 3.12) beyond the contract's part (ledger_bus.testing.contract.bounds):
what trimming drops of artifacts and deliveries, the command."""

from __future__ import annotations

import json

import ledger_bus as lb
from ledger_bus.store.base import EventStore
from tests.support.events import msg
from tests.support.helpers import ledger_here

S = "bound-1"
CHECKPOINTS, MAIN = lb.StreamId(S, "checkpoints"), lb.StreamId(S, "main")


def bodies(events: list[lb.RecordedEvent]) -> list[str]:
    return [e["body"] for e in events]


def test_trimming_drops_artifact_references_and_pending_deliveries(store: EventStore) -> None:
    store.bound_stream(CHECKPOINTS, keep=1)
    store.group_create(S, "g", None)
    old, new = "o" * 100_000, "n" * 100_000
    store.append(CHECKPOINTS, 0, "c1", [msg(old)])
    [delivery] = store.group_read(S, "g", "worker", 10, None)
    assert delivery.event["body"] == old
    store.append(CHECKPOINTS, 1, "c2", [msg(new)])

    assert list(store.artifact_uses(S).values()) == [1]
    assert bodies(store.read_stream(CHECKPOINTS)) == [new]
    assert store.group_stats(S, "g").pending == 0, "the trimmed event is pending with no one"
    assert bodies([d.event for d in store.group_read(S, "g", "worker", 10, None)]) == [new]


def test_the_command_declares_shows_and_lifts_a_bound(cli_url: str, prefix: str) -> None:
    def run(*args: str) -> dict[str, object]:
        done = ledger_here(cli_url, prefix, *args)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)  # type: ignore[no-any-return]

    assert run("bound", S, "checkpoints")["keep"] is None
    declared = run("bound", S, "checkpoints", "--keep", "2", "--dedup-window", "1h")
    assert (declared["keep"], declared["dedup_window_ms"]) == (2, 3_600_000)
    with lb.connect(cli_url, prefix=prefix) as store:
        for n in range(4):
            store.append(CHECKPOINTS, lb.ANY, f"c{n}", [msg(str(n))])
        assert bodies(store.read_stream(CHECKPOINTS)) == ["2", "3"]
    assert run("bound", S, "checkpoints", "--off")["keep"] is None
    assert ledger_here(cli_url, prefix, "bound", S, "checkpoints", "--keep", "0").returncode == 2
    both = ledger_here(cli_url, prefix, "bound", S, "checkpoints", "--keep", "2", "--off")
    assert both.returncode == 2
    assert "--off" in both.stderr
