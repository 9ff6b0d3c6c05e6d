"""Deleting sessions and streams (spec 3.9) beyond the contract's part
(ledger_bus.testing.contract.deletes): with groups and attempts, a rewind, the command, a
deletion cut short."""

from __future__ import annotations

import json
import subprocess

import pytest

import ledger_bus as lb
from ledger_bus.store.base import EventStore
from ledger_bus.store.redis import DELETE_STREAM, RedisStore
from ledger_bus.store.redis.replies import MoreToDelete, delete_stream_reply
from tests.support.events import call, msg, result
from tests.support.helpers import ledger_here

S = "del-1"
MAIN, SIDE = lb.StreamId(S, "main"), lb.StreamId(S, "side")


def fill(store: EventStore) -> None:
    store.append(MAIN, 0, "m1", [msg("one"), call("att-1", "run-1")])
    store.append(SIDE, 0, "s1", [msg("side one")])
    store.append(MAIN, 2, "m2", [msg("three")])


def test_a_group_on_a_session_whose_stream_was_deleted_delivers_only_what_is_left(
    store: EventStore,
) -> None:
    fill(store)
    store.group_create(S, "g", None)
    store.append(MAIN, 3, "m3", [msg("four")])
    store.append(SIDE, 1, "s2", [msg("side two")])
    delivered = store.group_read(S, "g", "c1", 10, None)
    assert len(delivered) == 2

    store.delete_stream(MAIN)

    assert store.group_stats(S, "g").pending == 1
    pending = store.group_pending(S, "g", "c1", 10)
    assert [d.event["body"] for d in pending] == ["side two"]
    assert store.group_stats(S, "g").pending == 1


def test_an_attempt_closed_in_the_new_generation_is_not_open(store: EventStore) -> None:
    store.append(MAIN, 0, "c1", [call("att-9", "run-1")])
    store.delete_session(S)
    assert store.open_attempts(S) == []
    store.append(MAIN, 0, "c2", [call("att-9", "run-1")])
    assert [a.attempt_id for a in store.open_attempts(S)] == ["att-9"]
    store.append(MAIN, 1, "c3", [result("att-9")])
    assert store.open_attempts(S) == []


def test_a_writer_told_of_the_old_generation_writes_the_new_one_and_still_sees_a_rewind(
    redis_url: str, prefix: str
) -> None:
    with (
        lb.connect(redis_url, prefix=prefix) as writer,
        lb.connect(redis_url, prefix=prefix) as admin,
    ):
        writer.append(MAIN, 0, "w1", [msg("one"), msg("two"), msg("three")])
        admin.delete_session(S)

        fresh = writer.append(MAIN, lb.ANY, "w2", [msg("new one")])
        assert (fresh.first_version, fresh.deduplicated) == (1, False)
        # An old append retried now is its old result: it tells nothing of the new generation.
        assert writer.append(
            MAIN, lb.ANY, "w1", [msg("one"), msg("two"), msg("three")]
        ).deduplicated
        writer.append(MAIN, 1, "w3", [msg("new two")])

        # A failover that loses acknowledged events of this generation is still caught.
        assert isinstance(admin, RedisStore)
        admin.client.hset(admin.keys.meta(S), "main", 1)
        with pytest.raises(lb.HistoryRewound):
            writer.append(MAIN, lb.ANY, "w4", [msg("new three")])


def test_the_command_says_what_would_go_and_deletes_only_when_told(
    cli_url: str, prefix: str
) -> None:
    with lb.connect(cli_url, prefix=prefix) as store:
        fill(store)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return ledger_here(cli_url, prefix, *args)

    asked = run("delete", S)
    assert asked.returncode == 0, asked.stderr
    assert json.loads(asked.stdout) == {
        "session": S,
        "stream": None,
        "would_delete_events": 4,
        "streams": "main (3), side (1)",
        "open_attempts": 1,
    }
    assert "--yes" in asked.stderr
    assert json.loads(run("delete", S, "side").stdout)["would_delete_events"] == 1
    assert len(run("scan", S).stdout.splitlines()) == 4, "nothing deleted without --yes"

    # Deleting is safe to retry: what holds nothing deletes 0 events, exit 0, and says so.
    missing_stream = run("delete", S, "sid", "--yes")
    assert missing_stream.returncode == 0, missing_stream.stderr
    assert json.loads(missing_stream.stdout)["deleted_events"] == 0
    assert "nothing to delete" in missing_stream.stderr
    assert run("delete", S, "sid").returncode == 6, "asked without --yes, it names the typo"
    assert "did you mean side" in run("delete", S, "sid").stderr
    assert run("delete", "del-nobody", "--yes").returncode == 0
    assert run("delete", "bad id", "--yes").returncode == 2

    one = run("delete", S, "side", "--yes")
    assert json.loads(one.stdout) == {
        "session": S,
        "stream": "side",
        "deleted_events": 1,
        "generation": 1,
    }
    whole = run("delete", S, "--yes")
    assert json.loads(whole.stdout)["deleted_events"] == 3
    retried = run("delete", S, "--yes")
    assert retried.returncode == 0, retried.stderr
    assert json.loads(retried.stdout)["deleted_events"] == 0
    assert run("tail", S).returncode == 6
    line = json.dumps(msg("after")) + "\n"
    again = ledger_here(
        cli_url,
        prefix,
        "append",
        S,
        "main",
        "--append-id",
        "m9",
        "--expected-version",
        "0",
        stdin=line,
    )
    assert json.loads(again.stdout)["first_version"] == 1, again.stderr


def test_a_consumer_of_a_deleted_session_is_told_its_group_is_gone(store: EventStore) -> None:
    fill(store)
    store.group_create(S, "g", None)
    store.delete_session(S)
    with pytest.raises(lb.NotFound):
        store.group_read(S, "g", "c1", 10, None)


def test_a_stream_deletion_cut_short_is_finished_by_deleting_again(
    redis_url: str, prefix: str
) -> None:
    with lb.connect(redis_url, prefix=prefix) as store:
        assert isinstance(store, RedisStore)
        for k in range(30):
            store.append(MAIN, lb.ANY, f"b{k}", [msg(f"{k}-{j}") for j in range(3)])
        store.append(SIDE, 0, "s1", [msg("side")])
        keys = [
            store.keys.log(S),
            store.keys.meta(S),
            store.keys.stream(S, "main"),
            store.keys.open_attempts(S),
            store.keys.tombstone(S),
        ]
        # One step of the deletion, as a process killed after it would leave the stream.
        step = store.run_op(store._evalsha(DELETE_STREAM, keys, ["main", 4, 0]))
        assert delete_stream_reply(step) == MoreToDelete(12)
        assert [e.version for e in store.read_stream(MAIN)][:1] == [13]
        assert store.stream_version(MAIN) == 90, "the stream keeps its version meanwhile"

        done = store.delete_stream(MAIN)

        assert (done.events, done.generation) == (78, 1)
        assert [e.stream.name for e in store.scan_session(S)] == ["side"]
        assert store.append(MAIN, 0, "again", [msg("new")]).first_version == 1
