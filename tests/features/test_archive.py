"""Archiving sessions from Redis to SQL and reading them through (spec 3.10): on a Redis and a
three-primary cluster, into SQLite and PostgreSQL."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest

import ledger_bus as lb
from ledger_bus.exports.conversation import export_session
from ledger_bus.operations.archiving import STEPS, archive_session
from ledger_bus.store.base import ArchiveSource, ArchiveTarget, ServerAdmin, Tiered, need
from ledger_bus.store.redis import RedisStore
from ledger_bus.store.redis.tiered import TieredStore
from tests.support.events import call, msg, result
from tests.support.helpers import ledger_cli, ledger_here, url_for

S = "arch-1"
MAIN, SIDE = lb.StreamId(S, "main"), lb.StreamId(S, "side")


@pytest.fixture(params=["redis", "cluster"])
def hot_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return url_for(request, tmp_path / "hot.db")


@pytest.fixture(params=["sqlite", "postgresql"])
def cold_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return url_for(request, tmp_path / "archive.db")


@pytest.fixture
def tiered(hot_url: str, cold_url: str, prefix: str) -> Iterator[TieredStore]:
    store = lb.connect(hot_url, prefix=prefix, archive=cold_url)
    assert isinstance(store, TieredStore)
    yield store
    store.close()


def fill(store: lb.EventStore) -> list[lb.AppendResult]:
    return [
        store.append(MAIN, 0, "m1", [msg("one"), call("att-1", "run-1")]),
        store.append(SIDE, 0, "s1", [msg("side one")]),
        store.append(MAIN, 2, "m2", [result("att-1"), msg("three")]),
    ]


def exported(store: lb.EventStore, session: str = S) -> str:
    import io

    out = io.StringIO()
    export_session(store, session, out)
    return out.getvalue()


def redis_keys(store: RedisStore, session: str = S) -> list[str]:
    """Every key of the session still in Redis, across the cluster's nodes."""
    pattern = f"{store.keys.prefix}:{{{session}}}:*"
    return sorted(k.decode() for k in store.client.scan_iter(match=pattern))


def test_an_archived_session_reads_the_same_and_leaves_only_its_tombstone(
    tiered: TieredStore,
) -> None:
    fill(tiered)
    other = lb.StreamId("arch-other", "main")
    tiered.append(other, 0, "o1", [msg("stays in redis")])
    before = exported(tiered)
    tail_before = [e.to_dict() for e in tiered.tail(S, 2)]
    side_before = [e.to_dict() for e in tiered.read_stream(SIDE)]
    info_before = tiered.session_info(S)

    done = archive_session(tiered, tiered.archive, S)

    assert (done.events, done.append_ids, done.moved_before) == (5, 3, False)
    assert redis_keys(tiered) == [tiered.keys.tombstone(S)]
    assert exported(tiered) == before
    assert [e.to_dict() for e in tiered.tail(S, 2)] == tail_before
    assert [e.to_dict() for e in tiered.read_stream(SIDE)] == side_before
    assert tiered.stream_version(MAIN) == 4
    assert tiered.session_exists(S)
    info = tiered.session_info(S)
    assert (info.events, info.streams, info.first_cursor, info.last_cursor) == (
        info_before.events,
        info_before.streams,
        info_before.first_cursor,
        info_before.last_cursor,
    )
    assert [e["body"] for e in tiered.scan_session("arch-other")] == ["stays in redis"]
    assert S not in [s for s, _ in tiered.sessions()]
    assert archive_session(tiered, tiered.archive, S).moved_before, "a second run does nothing"


def test_an_append_to_an_archived_session_is_refused_but_a_retry_deduplicates(
    tiered: TieredStore, hot_url: str
) -> None:
    results = fill(tiered)
    archive_session(tiered, tiered.archive, S)

    with pytest.raises(lb.SessionArchived, match="archived in"):
        tiered.append(MAIN, lb.ANY, "m3", [msg("four")])
    retry = tiered.append(MAIN, 2, "m2", [result("att-1"), msg("three")])
    assert retry.deduplicated
    assert (retry.first_version, retry.last_version, retry.cursor) == (
        results[2].first_version,
        results[2].last_version,
        results[2].cursor,
    )
    with pytest.raises(lb.IdempotencyConflict):
        tiered.append(MAIN, lb.ANY, "m2", [msg("other content")])

    # Without the archive, Redis alone says where the session went.
    plain = lb.connect(hot_url, prefix=tiered.keys.prefix)
    try:
        with pytest.raises(lb.SessionArchived) as refused:
            plain.append(MAIN, lb.ANY, "m2", [result("att-1"), msg("three")])
        assert refused.value.archive == tiered.archive.location
        assert plain.scan_session(S) == []
    finally:
        plain.close()


def test_deleting_an_archived_session_deletes_it_everywhere_and_a_retry_stays_deleted(
    tiered: TieredStore,
) -> None:
    fill(tiered)
    archive_session(tiered, tiered.archive, S)

    gone = tiered.delete_session(S)

    assert gone.events == 5
    assert tiered.scan_session(S) == []
    assert tiered.archive.scan_session(S) == []
    assert not tiered.session_exists(S)
    assert tiered.append(MAIN, 0, "m1", [msg("one"), call("att-1", "run-1")]).deduplicated
    assert tiered.scan_session(S) == [], "a late retry writes nothing back"
    fresh = tiered.append(MAIN, 0, "new-1", [msg("again")])
    assert fresh.first_version == 1
    assert [e["body"] for e in tiered.scan_session(S)] == ["again"]


def test_a_10_mib_tool_result_is_read_archived_read_again_and_deleted(
    tiered: TieredStore,
) -> None:
    big = os.urandom(5 * 1024 * 1024).hex()
    digest = hashlib.sha256(big.encode()).hexdigest()
    tiered.append(MAIN, 0, "c1", [call("att-1", "run-1")])
    written = tiered.append(MAIN, 1, "r1", [result("att-1", value=big)])
    assert tiered.read_stream(MAIN, 1)[0]["result"] == big
    refs = [e.to_dict() for e in tiered.read_stream(MAIN, resolve_artifacts=False)]

    done = archive_session(tiered, tiered.archive, S)

    assert (done.events, done.artifacts) == (2, 1)
    assert redis_keys(tiered) == [tiered.keys.tombstone(S)]
    assert tiered.read_stream(MAIN, 1)[0]["result"] == big
    assert tiered.tail(S, 1)[0]["result"] == big
    assert [e.to_dict() for e in tiered.read_stream(MAIN, resolve_artifacts=False)] == refs
    assert tiered.artifact(S, digest) == big.encode()
    assert tiered.append(MAIN, 1, "r1", [result("att-1", value=big)]).cursor == written.cursor

    tiered.delete_session(S)

    assert tiered.archive.artifact_uses(S) == {}
    with pytest.raises(lb.NotFound):
        tiered.artifact(S, digest)
    assert tiered.append(MAIN, 1, "r1", [result("att-1", value=big)]).deduplicated
    assert tiered.scan_session(S) == []
    assert tiered.artifact_uses(S) == {}


def test_a_session_with_an_open_attempt_is_archived_only_when_forced(tiered: TieredStore) -> None:
    tiered.append(MAIN, 0, "m1", [call("att-open", "run-1")])
    with pytest.raises(lb.Refused, match="open attempt"):
        archive_session(tiered, tiered.archive, S)
    assert tiered.append(MAIN, 1, "m2", [msg("still takes appends")]).first_version == 2
    assert archive_session(tiered, tiered.archive, S, force=True).events == 2


def test_a_live_lease_gives_the_archive_up_and_the_session_takes_appends_again(
    tiered: TieredStore,
) -> None:
    tiered.append(MAIN, 0, "m1", [msg("x", run_id="run-7")])
    assert tiered.acquire_lease(S, "run-run-7", "owner", 60_000)
    with pytest.raises(lb.Refused, match="live lease"):
        archive_session(tiered, tiered.archive, S)
    assert tiered.archive_state(S) == (None, False)
    assert tiered.append(MAIN, 1, "m2", [msg("y")]).first_version == 2


@pytest.mark.parametrize("kill_at", STEPS)
def test_a_sigkill_at_any_step_loses_nothing_duplicates_nothing_and_the_next_run_finishes(
    tiered: TieredStore, hot_url: str, cold_url: str, prefix: str, kill_at: str
) -> None:
    for k in range(12):  # more events than one batch of the copy
        tiered.append(MAIN, lb.ANY, f"b{k}", [msg(f"{k}-{j}") for j in range(100)])
    # An artifact goes over with the events (spec 3.11).
    fill_side = tiered.append(SIDE, 0, "s1", [msg("side one"), msg("w" * 100_000)])
    before = exported(tiered)

    killed = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.support.workers",
            "archive_killed",
            hot_url,
            prefix,
            cold_url,
            S,
            kill_at,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr

    # Whatever the step, what is there reads the same, whole, and nothing is twice.
    assert exported(tiered) == before
    done = archive_session(tiered, tiered.archive, S)
    assert (done.events, done.artifacts) == (1202, 1)
    assert redis_keys(tiered) == [tiered.keys.tombstone(S)]
    assert exported(tiered) == before
    assert exported(tiered.archive) == before
    again = tiered.append(SIDE, 0, "s1", [msg("side one"), msg("w" * 100_000)])
    assert again.cursor == fill_side.cursor


def test_the_command_archives_named_or_idle_sessions_and_reads_them_through(
    hot_url: str, cold_url: str, prefix: str
) -> None:
    with lb.connect(hot_url, prefix=prefix) as store:
        fill(store)
        store.append(lb.StreamId("arch-busy", "main"), 0, "b1", [call("att-open", "run-2")])
        before = exported(store)

    def run(*args: str, archive: str | None = None) -> subprocess.CompletedProcess[str]:
        extra = ["--archive", archive] if archive else []
        return ledger_here(hot_url, prefix, *extra, *args)

    assert run("archive", S).returncode == 2  # where to?
    assert run("archive", S, "--idle-after", "1d", "--to", cold_url).returncode == 2
    assert run("archive", "arch-nobody", "--to", cold_url).returncode == 6
    busy = run("archive", "arch-busy", "--to", cold_url)
    assert (busy.returncode, "open attempt" in busy.stderr) == (1, True)

    done = run("archive", S, "--to", cold_url)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["events"] == 5

    unread = run("tail", S)
    assert unread.returncode == 6
    assert "is archived in" in unread.stderr
    assert "--archive" in unread.stderr
    assert run("export", S, archive=cold_url).stdout == before
    appended = ledger_here(
        hot_url, prefix, "append", S, "main", "--append-id", "m9", stdin=json.dumps(msg("late"))
    )
    assert appended.returncode == 1
    assert "archived in" in appended.stderr

    idle = run("archive", "--idle-after", "0s", "--to", cold_url)
    assert idle.returncode == 0, idle.stderr
    lines = [json.loads(line) for line in idle.stdout.splitlines()]
    assert [line["session"] for line in lines] == ["arch-busy"]
    assert "open attempt" in lines[0]["skipped"]
    assert run("archive", "--idle-after", "7x", "--to", cold_url).returncode == 2

    listed = run("sessions", "--archived", archive=cold_url)
    assert [json.loads(line)["session"] for line in listed.stdout.splitlines()] == [S]
    assert json.loads(listed.stdout)["events"] == 5
    assert [json.loads(line)["session"] for line in run("sessions").stdout.splitlines()] == [
        "arch-busy"
    ]
    assert run("sessions", "--archived").returncode == 2

    gone = run("delete", S, "--yes", archive=cold_url)
    assert json.loads(gone.stdout)["deleted_events"] == 5
    assert run("tail", S, archive=cold_url).returncode == 6


def test_the_reconciler_archives_idle_sessions_as_it_goes(
    hot_url: str, cold_url: str, prefix: str, tmp_path: Path
) -> None:
    with lb.connect(hot_url, prefix=prefix) as store:
        fill(store)
        store.append(lb.StreamId("arch-busy", "main"), 0, "b1", [call("att-open", "run-2")])
        before = exported(store)

    def reconcile(*args: str) -> subprocess.CompletedProcess[str]:
        beat = str(tmp_path / "beat")
        return ledger_cli(hot_url, prefix, "reconcile", "--once", "--heartbeat", beat, *args)

    done = reconcile("--archive-idle-after", "0s", "--archive-to", cold_url)
    assert done.returncode == 0, done.stderr
    actions = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    archived = {a["session"]: a for a in actions if a["action"] == "archive"}
    assert archived[S]["events"] == 5
    assert "open attempt" in archived["arch-busy"]["skipped"]
    with lb.connect(hot_url, prefix=prefix, archive=cold_url) as tiered:
        assert exported(tiered) == before
        assert [s for s, _ in tiered.sessions()] == ["arch-busy"]

    assert reconcile("--archive-to", cold_url).returncode == 2
    assert reconcile("--archive-idle-after", "1d").returncode == 2  # where to?


def test_du_shows_what_each_session_takes_by_kind_and_the_largest_first(
    hot_url: str, prefix: str
) -> None:
    with lb.connect(hot_url, prefix=prefix) as store:
        store.append(lb.StreamId("du-big", "main"), 0, "a", [msg("x" * 2000) for _ in range(50)])
        store.append(lb.StreamId("du-big", "tools"), 0, "c", [call("att-1", "run-1")])
        store.append(lb.StreamId("du-small", "main"), 0, "a", [msg("y")])
        store.delete_stream(lb.StreamId("du-small", "main"))  # its append_ids stay
        store.append(lb.StreamId("du-small", "side"), 0, "b", [msg("z")])
        assert isinstance(store, RedisStore)
        measured = store.memory_of(["du-big", "du-small"])

    big, small = measured["du-big"], measured["du-small"]
    assert big["log"] > 100_000 > small["log"] > 0
    assert big["attempts"] > 0 == small["attempts"]
    assert small["append_ids"] > 0  # the deleted stream's records are counted too
    assert all(value > 0 for value in (big["streams"], big["append_ids"], big["other"]))

    shown = ledger_here(hot_url, prefix, "du")
    assert shown.returncode == 0, shown.stderr
    rows = [json.loads(line) for line in shown.stdout.splitlines()]
    assert [row["session"] for row in rows] == ["du-big", "du-small"]
    assert rows[0]["bytes"] == sum(big.values())
    one = ledger_here(hot_url, prefix, "--output", "table", "du", "du-small")
    assert "du-small" in one.stdout
    assert "du-big" not in one.stdout
    assert ledger_here(hot_url, prefix, "du", "du-nobody").returncode == 6


def test_an_archive_that_differs_is_found_out_and_nothing_is_removed(tiered: TieredStore) -> None:
    fill(tiered)
    before = exported(tiered)
    # The archive already holds the session's cursors, one event with other content.
    events = tiered.scan_session(S)
    altered = dataclasses.replace(events[2], fields={**events[2].fields, "body": "forged"})
    tiered.archive.restore_moved([*events[:2], altered, *events[3:]])

    with pytest.raises(lb.Refused, match="differing from event 1 on"):
        archive_session(tiered, tiered.archive, S)

    assert tiered.archive_state(S) == (None, False), "the archive is given up"
    assert exported(tiered) == before
    assert tiered.append(MAIN, 4, "m3", [msg("still here")]).first_version == 5


def test_the_gauges_count_sessions_by_tier_and_show_redis_memory(tiered: TieredStore) -> None:
    from ledger_bus.operations.metrics import StoreGauges

    fill(tiered)
    tiered.append(lb.StreamId("arch-other", "main"), 0, "o1", [msg("stays")])
    archive_session(tiered, tiered.archive, S)

    found = {
        (sample.name, tuple(sample.labels.items())): sample.value
        for family in StoreGauges(tiered).collect()
        for sample in family.samples
    }
    assert found[("ledger_sessions", (("tier", "redis"),))] == 1
    assert found[("ledger_sessions", (("tier", "archive"),))] == 1
    # On a cluster, the primary nearest its maxmemory (here none has one: the one using most).
    used, limit = tiered.memory_info()
    assert found[("ledger_redis_used_memory_bytes", ())] == pytest.approx(used, rel=0.2)
    assert used > 0
    assert found[("ledger_redis_maxmemory_bytes", ())] == limit == 0


def test_stores_say_what_they_offer_and_the_commands_refuse_a_store_without_it(
    tmp_path: Path, prefix: str, hot_url: str
) -> None:
    """Callers ask a store for its archiving, archive and server sides as for any capability;
    a store without the one a command needs is refused with exit 2, and nothing is written."""
    sqlite = f"sqlite:///{tmp_path / 'cold.db'}"
    families = [ArchiveSource, ArchiveTarget, ServerAdmin, Tiered]
    memory = lb.connect("memory://")
    with (
        lb.connect(hot_url, prefix=prefix) as hot,
        lb.connect(sqlite) as cold,
        lb.connect(hot_url, prefix=prefix, archive=sqlite) as tiered,
    ):
        has = {
            name: [f.__name__ for f in families if isinstance(store, f)]
            for name, store in [("redis", hot), ("sql", cold), ("tiered", tiered), ("mem", memory)]
        }
        assert has == {
            "redis": ["ArchiveSource", "ServerAdmin"],
            "sql": ["ArchiveTarget"],
            "tiered": ["ArchiveSource", "ServerAdmin", "Tiered"],
            "mem": [],
        }
        assert need(hot, ServerAdmin) is cast(object, hot)
        with pytest.raises(lb.Unsupported) as lacking:
            need(memory, ServerAdmin)
        assert str(lacking.value) == (
            "this store (memory) has no server to watch (memory, indexes): it has log, leases"
            " and open attempts, consumer groups, bounded streams, deletion, restore"
        )
        with pytest.raises(lb.InvalidInput, match="not a redis store"):
            archive_session(hot, hot, S)
        with pytest.raises(lb.InvalidInput, match="do not move out of a sql store"):
            archive_session(cold, cold, S)
    for args in (["du"], ["archive", "s1", "--to", sqlite], ["sessions", "--archived"]):
        refused = ledger_here("memory://", prefix, *args)
        assert refused.returncode == 2, (args, refused.stderr)
        assert len(refused.stderr.strip().splitlines()) == 1
    to_redis = ledger_here(hot_url, prefix, "archive", "s1", "--to", hot_url)
    assert to_redis.returncode == 2
    assert "an archive is a SQL store" in to_redis.stderr
    assert not (tmp_path / "cold.db").exists() or not lb.connect(sqlite).sessions()
