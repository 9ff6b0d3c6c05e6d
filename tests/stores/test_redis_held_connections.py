"""The connection an append runs on, held by its thread (store/redis/held.py): what the pool gave
each command must still hold (threads, fork, health checks, re-authentication, a connection the
server dropped, Redis Cluster's redirections), and idempotency records in either form."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from redis.auth.token import SimpleToken

import ledger_bus as lb
from ledger_bus import aio
from ledger_bus.demo.server import LocalServer
from ledger_bus.store.redis import RedisStore
from tests.support.cluster import LocalCluster
from tests.support.events import call, msg
from tests.support.helpers import cluster_client, redis_client


def _do(client: Any, *args: object) -> Any:
    """A raw command (redis-py's execute_command has no types)."""
    return client.execute_command(*args)


def _owner(client: redis.Redis, slot: int) -> int | None:
    """The port of the node `client`'s server says serves `slot`."""
    for first, last, primary, *_ in _do(client, "CLUSTER", "SLOTS"):
        if first <= slot <= last:
            return int(primary[1])
    return None


def _settle(
    clients: dict[int, redis.Redis], slot: int, port: int, node_id: str, wait: float = 10.0
) -> None:
    """Wait until every node says the node on `port` (`node_id`) serves `slot`; a node still
    saying otherwise after a second is told again, with the target's config epoch bumped, as
    `redis-cli --cluster fix` does."""
    deadline = time.monotonic() + wait
    told = time.monotonic()
    while stale := [c for c in clients.values() if _owner(c, slot) != port]:
        assert time.monotonic() < deadline, f"the nodes never agreed that {port} serves {slot}"
        if time.monotonic() - told > 1:
            _do(clients[port], "CLUSTER", "BUMPEPOCH")
            for client in stale:
                _do(client, "CLUSTER", "SETSLOT", slot, "NODE", node_id)
            told = time.monotonic()
        time.sleep(0.05)


def _calls(client: redis.Redis, command: str) -> int:
    stats = client.info("commandstats").get(f"cmdstat_{command}", {})
    return int(stats.get("calls", 0))


def test_threads_share_the_stores_connections_and_the_pool_has_them_back_when_it_closes(
    redis_server: LocalServer, prefix: str
) -> None:
    store = lb.connect(redis_server.url, prefix=prefix)
    assert isinstance(store, RedisStore)
    threads, appends = 8, 150
    failures: list[BaseException] = []
    start = threading.Barrier(threads)

    def write(n: int) -> None:
        ref = lb.StreamId("threads", f"t{n}")
        start.wait()
        try:
            for version in range(appends):
                result = store.append(ref, version, f"a{version}", [msg(f"{n}:{version}")])
                assert result.last_version == version + 1
        except BaseException as err:
            failures.append(err)

    workers = [threading.Thread(target=write, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert failures == []
    for n in range(threads):
        bodies = [e.fields["body"] for e in store.read_stream(lb.StreamId("threads", f"t{n}"))]
        assert bodies == [f"{n}:{v}" for v in range(appends)]
    # The threads are gone; the store keeps what they used (never more than one a thread at
    # once), and a thread that lives for one append takes one of those, not a new one.
    pool = redis_client(store).connection_pool
    kept = len(pool._in_use_connections)
    assert 1 <= kept <= threads
    for n in range(20):
        one = threading.Thread(
            target=store.append, args=(lb.StreamId("one", f"t{n}"), 0, "a", [msg("x")])
        )
        one.start()
        one.join()
    assert len(pool._in_use_connections) == kept
    store.close()
    assert len(pool._in_use_connections) == 0


class _Interrupted(BaseException):
    """What a KeyboardInterrupt or a cancelled thread would raise while a reply is on its way."""


def test_a_command_cut_short_leaves_no_reply_for_the_next_one_on_its_connection(
    redis_store: RedisStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Given an append interrupted after it was sent and before its reply was read, the next
    append on the store's kept connection reads its own reply, not the one left behind."""
    ref = lb.StreamId("cut", "main")
    redis_store.append(ref, 0, "a0", [msg("one")])
    read = redis.connection.Connection.read_response

    def interrupted(self: Any, *args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(redis.connection.Connection, "read_response", read)
        raise _Interrupted

    monkeypatch.setattr(redis.connection.Connection, "read_response", interrupted)
    with pytest.raises(_Interrupted):
        redis_store.append(ref, 1, "a1", [msg("two")])  # sent, and it lands; its reply is not read
    result = redis_store.append(ref, 2, "a2", [msg("three")])
    assert (result.first_version, result.last_version) == (3, 3)
    assert [e.fields["body"] for e in redis_store.read_stream(ref)] == ["one", "two", "three"]


@pytest.mark.parametrize("kind", [redis.ConnectionPool, redis.BlockingConnectionPool])
def test_a_pool_with_a_cap_is_never_starved_by_threads_holding_its_connections(
    redis_server: LocalServer, prefix: str, kind: type[redis.ConnectionPool]
) -> None:
    """Given a client whose pool hands out at most four connections, when more threads than
    that have appended and live on, every thread's appends and reads still get a connection:
    threads hold half the pool at most (redis-py's pools hold 100 unless told otherwise)."""
    pool = kind.from_url(redis_server.url, max_connections=4, protocol=2)
    if isinstance(pool, redis.BlockingConnectionPool):
        pool.timeout = 1
    store = RedisStore(redis.Redis(connection_pool=pool), prefix=prefix, timeout=3)
    threads = 6
    appended, done = threading.Barrier(threads + 1), threading.Event()
    failures: list[BaseException] = []

    def write(n: int) -> None:
        try:
            for version in range(3):
                ref = lb.StreamId("capped", f"t{n}")
                store.append(ref, version, f"a{version}", [msg(f"{n}:{version}")])
        except BaseException as err:
            failures.append(err)
        appended.wait()
        done.wait(10)  # alive, as a worker of a thread pool is between its tasks

    workers = [threading.Thread(target=write, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    try:
        appended.wait(10)
        assert failures == []
        # Every thread is alive and has appended: this one still appends and reads.
        store.append(lb.StreamId("capped", "main"), 0, "a0", [msg("main")])
        assert len(store.scan_session("capped")) == threads * 3 + 1
    finally:
        done.set()
        for worker in workers:
            worker.join()
        store.close()
        pool.disconnect()  # the client was given the pool: it is not the client's to close


def test_the_urls_max_connections_sizes_the_pool_of_either_driver(
    redis_server: LocalServer, prefix: str
) -> None:
    """docs/deploy.md, "Connections": a process that waits for many agents at once raises the
    pool's cap in the URL, for the blocking store and the asyncio one alike."""
    url = f"{redis_server.url}?max_connections=500"
    with lb.connect(url, prefix=prefix) as store:
        assert isinstance(store, RedisStore)
        assert redis_client(store).connection_pool.max_connections == 500

    async def main() -> int:
        async with await aio.connect(url, prefix=prefix) as opened:
            assert opened.client is not None
            return int(opened.client.connection_pool.max_connections)

    assert asyncio.run(main()) == 500


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:1/0?max_connections=many",
        "redis+cluster://127.0.0.1:1/0?max_connections=many",
        "redis+sentinel://127.0.0.1:1/ledger/0?max_connections=many",
        "redis+sentinel://127.0.0.1:1/ledger/0?max_connections=-3",
    ],
)
def test_a_cap_that_is_no_number_is_invalid_input_for_either_driver(url: str) -> None:
    # Refused as the URL is read, before any connection is tried (nothing listens on port 1).
    with pytest.raises(lb.InvalidInput, match="max_connections"):
        lb.connect(url, timeout=0.5)

    async def main() -> None:
        await aio.connect(url, timeout=0.5)

    with pytest.raises(lb.InvalidInput, match="max_connections"):
        asyncio.run(main())


def test_a_forked_child_appends_on_its_own_connection_while_the_parent_goes_on(
    redis_store: RedisStore,
) -> None:
    parent_ref, child_ref = lb.StreamId("fork", "parent"), lb.StreamId("fork", "child")
    redis_store.append(parent_ref, 0, "p0", [msg("before the fork")])  # the parent holds one now
    pid = os.fork()
    if pid == 0:  # the child: the same store object, its parent's connection in it
        code = 1
        try:
            for version in range(200):
                redis_store.append(child_ref, version, f"c{version}", [msg(f"child {version}")])
            code = 0
        finally:
            os._exit(code)
    for version in range(1, 201):  # at the same time as the child
        result = redis_store.append(parent_ref, version, f"p{version}", [msg(f"parent {version}")])
        assert result.last_version == version + 1
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert len(redis_store.read_stream(child_ref)) == 200
    assert len(redis_store.read_stream(parent_ref)) == 201
    redis_store.append(parent_ref, 201, "p201", [msg("after the child")])


def test_a_held_connection_still_pings_when_idle_past_the_health_check_interval(
    redis_server: LocalServer, prefix: str
) -> None:
    client = redis.Redis.from_url(redis_server.url, protocol=2, health_check_interval=1)
    store = RedisStore(client, prefix=prefix)
    watch = redis.Redis.from_url(redis_server.url)
    ref = lb.StreamId("health", "main")
    store.append(ref, 0, "a0", [msg("one")])
    before = _calls(watch, "ping")
    time.sleep(1.2)  # idle past the interval: the next command is preceded by a PING
    # A retry, which commits nothing and so sends nothing but the script: the PING is the held
    # connection's.
    assert store.append(ref, 0, "a0", [msg("one")]).deduplicated
    assert _calls(watch, "ping") == before + 1
    store.close()
    watch.close()


def test_a_held_connection_takes_a_new_token_the_pool_hands_out(
    redis_server: LocalServer, prefix: str
) -> None:
    admin = redis.Redis.from_url(redis_server.url)
    user = f"{prefix}-user"
    _do(admin, "ACL", "SETUSER", user, "on", ">first", ">second", "~*", "&*", "+@all")
    try:
        url = f"redis://{user}:first@127.0.0.1:{redis_server.port}/0"
        store = lb.connect(url, prefix=prefix)
        assert isinstance(store, RedisStore)
        ref = lb.StreamId("reauth", "main")
        store.append(ref, 0, "a0", [msg("one")])  # the store's first: as any command goes
        store.append(ref, 1, "a1", [msg("two")])  # held from here on
        assert len(store.read_stream(ref)) == 2  # and the pool has a connection of its own
        # What a streaming credential provider does when its token is renewed: the pool's idle
        # connections authenticate at once, those in use once their command is done.
        now = time.time() * 1000
        token = SimpleToken("second", now + 60_000, now, {"oid": user})
        redis_client(store).connection_pool.re_auth_callback(token)
        before = _calls(admin, "auth")
        store.append(ref, 2, "a2", [msg("three")])
        assert _calls(admin, "auth") == before + 1
        # The first password is withdrawn; the held connection, authenticated with the second,
        # goes on appending.
        _do(admin, "ACL", "SETUSER", user, "<first")
        store.append(ref, 3, "a3", [msg("four")])
        assert len(store.read_stream(ref)) == 4
        store.close()
    finally:
        _do(admin, "ACL", "DELUSER", user)
        admin.close()


def test_an_append_after_the_server_dropped_the_held_connection_lands_once(
    redis_store: RedisStore, redis_server: LocalServer
) -> None:
    ref = lb.StreamId("dropped", "main")
    redis_store.append(ref, 0, "a0", [msg("one")])  # the store's first, as any command goes
    redis_store.append(ref, 1, "a1", [msg("one")])  # held from here on
    admin = redis.Redis.from_url(redis_server.url)
    assert redis_store._held is not None
    ((held,),) = redis_store._held._kept.idle.values()
    held.send_command("CLIENT", "ID")
    _do(admin, "CLIENT", "KILL", "ID", held.read_response())
    result = redis_store.append(ref, 2, "a2", [msg("two")])
    assert (result.first_version, result.deduplicated) == (3, False)
    assert [e.fields["body"] for e in redis_store.read_stream(ref)] == ["one", "one", "two"]
    admin.close()


def _warned(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The failed calls logged on this thread (where the test's store calls Redis, its event
    loop included): a thread another test left running on the same server (a lease renewer
    meeting BUSY too) logs its own, which this store did not count."""
    here = threading.get_ident()
    return [
        r.getMessage()
        for r in caplog.records
        if "a call to redis failed" in r.getMessage() and r.thread == here
    ]


@contextlib.contextmanager
def busy_for(url: str, seconds: float) -> Iterator[None]:
    """The server busy in a script that never ends, answering BUSY to every other call, until
    SCRIPT KILL `seconds` later: a failure on a connection that passes."""
    admin = redis.Redis.from_url(url)
    threshold = str(admin.config_get("busy-reply-threshold")["busy-reply-threshold"])
    admin.config_set("busy-reply-threshold", 20)

    def loop() -> None:
        with contextlib.suppress(redis.ResponseError):  # "Script killed by user"
            admin.eval("while true do end", 0)

    looping = threading.Thread(target=loop)
    looping.start()
    killer = redis.Redis.from_url(url)
    time.sleep(0.1)  # the script has run past the threshold: calls are answered BUSY

    def kill() -> None:
        time.sleep(seconds)
        killer.script_kill()

    killing = threading.Thread(target=kill)
    killing.start()
    try:
        yield
    finally:
        killing.join()
        looping.join()
        killer.config_set("busy-reply-threshold", threshold)
        killer.close()
        admin.close()


def test_a_failed_call_on_the_fast_connection_is_named_and_counted_and_the_append_lands_once(
    redis_store: RedisStore, redis_server: LocalServer, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a store whose thread holds a connection
    ref = lb.StreamId("fast-busy", "main")
    redis_store.append(ref, 0, "a0", [msg("one")])
    before = redis_store.call_failures
    caplog.clear()
    # When the next append's call is answered BUSY for a while (a failure worth another try)
    with (
        caplog.at_level(logging.INFO, logger="ledger_bus.store"),
        busy_for(redis_server.url, 0.3),
    ):
        result = redis_store.append(ref, 1, "a1", [msg("two")])
    # Then each failure is logged with its kind and counted, and the append lands once
    warned = _warned(caplog)
    assert warned
    assert all("ResponseError: BUSY" in w for w in warned), warned
    assert redis_store.call_failures == before + len(warned)
    assert (result.first_version, result.deduplicated) == (2, False)
    assert [e.fields["body"] for e in redis_store.read_stream(ref)] == ["one", "two"]


def test_a_server_that_lost_its_scripts_is_given_them_on_the_same_route_and_nothing_failed(
    redis_store: RedisStore, redis_server: LocalServer, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a server that lost its scripts (a restart, a failover to a node that never ran them)
    ref = lb.StreamId("fast-flushed", "main")
    redis_store.append(ref, 0, "a0", [msg("one")])
    with redis.Redis.from_url(redis_server.url) as admin:
        admin.script_flush()
        admin.config_resetstat()
        before = redis_store.call_failures
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="ledger_bus.store"):
            result = redis_store.append(ref, 1, "a1", [msg("two")])
        sent = admin.info("commandstats")["cmdstat_evalsha"]
    # Then the append loaded the script and ran it, no failure to tell: one EVALSHA refused,
    # the script loaded, one EVALSHA more
    assert (redis_store.call_failures, _warned(caplog)) == (before, [])
    assert (result.first_version, result.deduplicated) == (2, False)
    assert sent["calls"] + sent.get("rejected_calls", 0) == 2, sent


def test_a_failed_call_on_the_event_loops_client_is_named_and_counted_too(
    redis_server: LocalServer, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    ref = lb.StreamId("fast-aio", "main")

    async def main() -> tuple[int, int]:
        async with await aio.connect(redis_server.url, prefix=prefix) as store:
            assert isinstance(store.core, RedisStore)
            await store.append(ref, 0, "a0", [msg("one")])
            before = store.core.call_failures
            caplog.clear()
            with busy_for(redis_server.url, 0.3):
                result = await store.append(ref, 1, "a1", [msg("two")])
            return store.core.call_failures - before, result.first_version

    with caplog.at_level(logging.INFO, logger="ledger_bus.store"):
        failed, version = asyncio.run(main())
    assert version == 2
    assert failed == len(_warned(caplog)) > 0


def test_idempotency_records_of_the_older_form_still_deduplicate(redis_store: RedisStore) -> None:
    ref = lb.StreamId("older", "main")
    events = [call("att-1"), msg("and a note")]
    first = redis_store.append(ref, 0, "a1", events)
    key = redis_store.keys.idempotency("older", "main")
    digest = redis_store.run_op(redis_store._run(lambda c: c.hget(key, "a1")))[:32].hex()
    cursor = first.cursor.split("-")
    older = f"{digest} 1 2 {int(cursor[0])}-{int(cursor[1])}"  # no generation: the first
    redis_store.run_op(redis_store._run(lambda c: c.hset(key, "a1", older)))
    again = redis_store.append(ref, 0, "a1", events)
    assert again.deduplicated
    assert (again.first_version, again.last_version, again.cursor) == (1, 2, first.cursor)
    with pytest.raises(lb.IdempotencyConflict):
        redis_store.append(ref, 0, "a1", [msg("other content")])
    records = list(redis_store.iter_append_ids("older"))
    assert [(r.append_id, r.digest, r.first_version, r.last_version) for r in records] == [
        ("a1", digest, 1, 2)
    ]
    second = redis_store.append(ref, 2, "a2", [msg("three")])
    (record,) = [r for r in redis_store.iter_append_ids("older") if r.append_id == "a2"]
    assert (record.first_version, record.last_version, record.cursor) == (3, 3, second.cursor)


def test_held_connections_on_a_cluster_follow_ask_and_moved() -> None:
    with LocalCluster(3) as cluster:
        store = lb.connect(cluster.url, prefix="held")
        assert isinstance(store, RedisStore)
        session = "moving"
        ref = lb.StreamId(session, "main")
        store.append(ref, 0, "a0", [call("att-1")])
        slot = cluster_client(store).keyslot(store.keys.log(session))
        clients = {node.port: redis.Redis(port=node.port) for node in cluster.nodes}
        ids = {port: _do(c, "CLUSTER", "MYID").decode() for port, c in clients.items()}
        owner = cluster_client(store).nodes_manager.get_node_from_slot(slot).port
        target_port = next(port for port in clients if port != owner)
        source, target = clients[owner], clients[target_port]
        # While a slot migrates, a command of several keys runs only where all of them are
        # (elsewhere: TRYAGAIN, retried): every key an append names exists before the move.
        source.hset(store.keys.safe_tools(session), "r\x1ft", 1)
        source.hset(store.keys.tombstone(session), "generation", 0)
        # The slot migrates, its keys moved, not yet handed over: the source answers ASK.
        _do(target, "CLUSTER", "SETSLOT", slot, "IMPORTING", ids[owner])
        _do(source, "CLUSTER", "SETSLOT", slot, "MIGRATING", ids[target_port])
        keys = _do(source, "CLUSTER", "GETKEYSINSLOT", slot, 100)
        _do(source, "MIGRATE", "127.0.0.1", target_port, "", 0, 5000, "KEYS", *keys)
        store.append(ref, 1, "a1", [msg("asked")])
        assert _calls(target, "asking") >= 1
        # Handed over: the held connection to the source is answered MOVED. The target is told
        # first, as Redis's docs order it (the source told first would send a client to a
        # target still importing, which sends it back), and every node must agree before the
        # next append, or a node's stale view gossiped back can bounce a client between them.
        others = [port for port in clients if port not in (owner, target_port)]
        for port in [target_port, owner, *others]:
            _do(clients[port], "CLUSTER", "SETSLOT", slot, "NODE", ids[target_port])
        # And the target's config epoch the greatest (as `redis-cli --cluster fix` makes it): the
        # nodes of a new cluster settle their equal epochs by gossip meanwhile, and a node that
        # heard the source's claim at a greater epoch than the target's would never take the
        # target's (the failure seen: "the nodes never agreed").
        _do(target, "CLUSTER", "BUMPEPOCH")
        _settle(clients, slot, target_port, ids[target_port])
        store.append(ref, 2, "a2", [msg("moved")])
        rejected = source.info("commandstats")["cmdstat_evalsha"]["rejected_calls"]
        assert rejected >= 2  # the ASK and the MOVED
        for version in range(3, 6):  # straight to the target from now on
            store.append(ref, version, f"a{version}", [msg(f"there {version}")])
        assert source.info("commandstats")["cmdstat_evalsha"]["rejected_calls"] == rejected
        assert [e.version for e in store.read_stream(ref)] == [1, 2, 3, 4, 5, 6]
        assert [a.attempt_id for a in store.open_attempts(session)] == ["att-1"]
        store.close()
        for client in clients.values():
            client.close()
