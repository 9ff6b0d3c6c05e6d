"""Large fields kept as content-addressed artifacts (spec 3.11), on every store: written and read
whole, stored once per session, deduplicated on retry, deleted with what references them."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

import ledger_bus as lb
from ledger_bus.model.artifacts import JSON, TEXT, ArtifactRef
from ledger_bus.model.batch import Limits, prepare_append
from ledger_bus.store.base import EventStore
from ledger_bus.store.redis import ARTIFACT_CHUNK, RedisStore
from ledger_bus.store.steps import Op
from tests.support.events import call, msg, result
from tests.support.helpers import ledger_here, redis_client

S = "art-1"
MAIN, SIDE = lb.StreamId(S, "main"), lb.StreamId(S, "side")
BIG = os.urandom(5 * 1024 * 1024).hex()  # 10 MiB of text, no two chunks alike


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_a_10_mib_tool_result_is_written_and_read_whole_and_kept_once(store: EventStore) -> None:
    store.append(MAIN, 0, "c1", [call("att-1", "run-1")])
    written = store.append(MAIN, 1, "r1", [result("att-1", value=BIG)])

    [event] = store.read_stream(MAIN, 1)
    assert event["result"] == BIG
    assert event.event.result == BIG  # the model validates it: it is the value, not a reference
    assert [e["result"] for e in store.scan_session(S) if e.type == "tool_result"] == [BIG]
    assert store.tail(S, 1)[0]["result"] == BIG
    assert store.artifact(S, sha(BIG)) == BIG.encode()
    assert store.artifact_uses(S) == {sha(BIG): 1}
    assert store.open_attempts(S) == []  # the result closed its call, as any result does

    [ref_event] = store.read_stream(MAIN, 1, resolve_artifacts=False)
    assert ref_event["result"] == ArtifactRef(sha(BIG), len(BIG), TEXT)
    assert ref_event["result"].to_dict() == {
        "artifact": f"sha256:{sha(BIG)}",
        "size": 10 * 1024 * 1024,
        "media_type": "text/plain; charset=utf-8",
    }
    assert store.resolve(ref_event) == event

    # A retry of the append, with the event as given, is the same append.
    again = store.append(MAIN, lb.ANY, "r1", [result("att-1", value=BIG)])
    assert again.deduplicated
    assert again.cursor == written.cursor
    with pytest.raises(lb.IdempotencyConflict):
        store.append(MAIN, lb.ANY, "r1", [result("att-1", value=BIG + "x")])
    # The same bytes in another event, of another stream: stored once, referenced twice.
    store.append(SIDE, 0, "s1", [msg(BIG)])
    assert store.artifact_uses(S) == {sha(BIG): 2}
    assert store.scan_session(S)[-1]["body"] == BIG


def test_json_fields_come_back_equal_and_small_events_are_left_alone(store: EventStore) -> None:
    rows = [{"n": n, "name": f"row {n}", "ok": n % 2 == 0} for n in range(5000)]
    args = {"rows": rows}
    store.append(MAIN, 0, "c1", [call("att-1", "run-1", rows=rows), msg("small")])

    big, small = store.read_stream(MAIN)
    assert big["args"] == args
    assert small["body"] == "small"
    raw_big, raw_small = store.read_stream(MAIN, resolve_artifacts=False)
    assert raw_big["args"].media_type == JSON
    assert raw_small.fields == small.fields
    assert store.open_attempts(S)[0].attempt_id == "att-1"
    assert len(store.artifact_uses(S)) == 1


def test_deleting_a_stream_drops_the_artifacts_only_it_referenced(store: EventStore) -> None:
    other = "y" * 100_000
    store.append(MAIN, 0, "m1", [msg(BIG), msg(other)])
    store.append(SIDE, 0, "s1", [msg(BIG)])

    store.delete_stream(MAIN)

    assert store.artifact_uses(S) == {sha(BIG): 1}
    with pytest.raises(lb.NotFound):
        store.artifact(S, sha(other))
    assert store.read_stream(SIDE)[0]["body"] == BIG

    store.delete_session(S)
    assert store.artifact_uses(S) == {}
    with pytest.raises(lb.NotFound):
        store.artifact(S, sha(BIG))
    # A retry of an old append is still answered, and brings no artifact back.
    assert store.append(SIDE, lb.ANY, "s1", [msg(BIG)]).deduplicated
    assert store.artifact_uses(S) == {}


def test_the_threshold_is_configurable_and_limits_are_checked_before_writing(
    store: EventStore,
) -> None:
    store.limits = Limits(artifact_threshold=1000, max_artifact_bytes=50_000)
    store.append(MAIN, 0, "m1", [msg("z" * 2000)])
    assert store.read_stream(MAIN, resolve_artifacts=False)[0]["body"].size == 2000

    with pytest.raises(lb.InvalidEvent, match="limit of an artifact is 50000") as caught:
        store.append(MAIN, 1, "m2", [msg("ok"), msg("z" * 60_000)])
    assert (caught.value.index, caught.value.field) == (1, "body")
    store.limits = Limits(artifact_threshold=None)
    with pytest.raises(lb.InvalidEvent, match="canonical JSON"):
        store.append(MAIN, 1, "m3", [msg("z" * 2_000_000)])
    assert store.stream_version(MAIN) == 1
    assert len(store.artifact_uses(S)) == 1


def test_artifacts_move_in_chunks_and_an_unreferenced_upload_expires(
    redis_store: RedisStore,
) -> None:
    store = redis_store
    store.append(MAIN, 0, "m1", [msg(BIG)])
    key = store.keys.artifact(S, sha(BIG))
    assert redis_client(store).ttl(key) == -1  # referenced: kept
    assert store.client.hlen(key) == len(BIG) // ARTIFACT_CHUNK == 10

    # An append refused takes its artifact away; one whose writer dies before the script runs
    # leaves it to expire, unread meanwhile.
    lost = "q" * 200_000
    with pytest.raises(lb.VersionConflict):
        store.append(MAIN, 0, "m2", [msg(lost)])
    assert not store.client.exists(store.keys.artifact(S, sha(lost)))
    prepared = prepare_append(S, "main", "m3", [msg(lost)], store.limits)
    store.run_op(store._put_artifacts(S, prepared.artifacts, again=False))
    assert redis_client(store).pttl(store.keys.artifact(S, sha(lost))) > 0
    with pytest.raises(lb.NotFound):
        store.artifact(S, sha(lost))
    assert sha(lost) not in store.artifact_uses(S)


def test_an_artifact_gone_before_the_script_runs_is_written_again(
    redis_store: RedisStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = redis_store
    put = store._put_artifacts
    calls = []

    def put_then_lose(session: str, artifacts: tuple[object, ...], again: bool) -> Op[None]:
        yield from put(session, artifacts, again)  # type: ignore[arg-type]
        calls.append(again)
        if len(calls) == 1:  # as a deletion of the session between the two would
            store.client.delete(store.keys.artifact(session, sha(BIG)))

    monkeypatch.setattr(store, "_put_artifacts", put_then_lose)
    store.append(MAIN, 0, "m1", [msg(BIG)])

    assert calls == [False, True]
    assert store.read_stream(MAIN)[0]["body"] == BIG


def test_the_command_line_shows_values_or_references_and_writes_an_artifact_out(
    cli_url: str, prefix: str, tmp_path: Path
) -> None:
    body = "report line\n" * 10_000
    with lb.connect(cli_url, prefix=prefix) as store:
        store.append(MAIN, 0, "m1", [msg(body), msg("small")])

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        done = ledger_here(cli_url, prefix, *args)
        assert done.returncode == 0, done.stderr
        return done

    whole = [json.loads(line) for line in run("tail", S).stdout.splitlines()]
    assert [e["body"] for e in whole] == [body, "small"]
    ref = {"artifact": f"sha256:{sha(body)}", "size": len(body), "media_type": TEXT}
    for command in (["tail", S], ["scan", S], ["read", S, "main"], ["export", S]):
        shown = [json.loads(line) for line in run(*command, "--refs").stdout.splitlines()]
        assert [e["body"] for e in shown] == [ref, "small"], command
    assert "sha256:" in run("--output", "table", "tail", S, "--refs").stdout

    out = tmp_path / "body.txt"
    run("artifact", S, f"sha256:{sha(body)}", str(out))
    assert out.read_bytes() == body.encode()
    assert run("artifact", S, sha(body)).stdout == body
    missing = ledger_here(cli_url, prefix, "artifact", S, "0" * 64)
    assert missing.returncode == 6
    assert ledger_here(cli_url, prefix, "artifact", S, "not-a-sha").returncode == 2


def test_a_store_opened_for_references_reads_references_unless_a_read_says(
    redis_url: str, prefix: str
) -> None:
    with lb.connect(redis_url, prefix=prefix, resolve_artifacts=False) as store:
        store.append(MAIN, 0, "m1", [msg(BIG)])
        assert store.tail(S, 1)[0]["body"] == ArtifactRef(sha(BIG), len(BIG), TEXT)
        assert store.tail(S, 1, resolve_artifacts=True)[0]["body"] == BIG


def test_a_64_mib_artifact_goes_a_mib_per_command_each_way(redis_store: RedisStore) -> None:
    store = redis_store
    largest = "z" * (64 * 1024 * 1024)  # the largest text an artifact takes

    def calls(command: str) -> int:
        found = redis_client(store).info("commandstats").get(f"cmdstat_{command}", {})
        return int(found.get("calls", 0))

    before = {name: calls(name) for name in ("hset", "hmget")}
    store.append(MAIN, 0, "m1", [msg(largest)])
    assert store.read_stream(MAIN)[0]["body"] == largest

    # Written as 64 chunks of a MiB, one HSET each, read back four chunks an HMGET (besides
    # them, the append script writes its version and its append_id, and reads its tombstone).
    assert calls("hset") - before["hset"] == 64 + 2
    assert calls("hmget") - before["hmget"] == 16 + 1
    assert store.client.hlen(store.keys.artifact(S, sha(largest))) == 64
    with pytest.raises(lb.InvalidEvent, match="limit of an artifact"):
        store.append(MAIN, 1, "m2", [msg(largest + "z")])
