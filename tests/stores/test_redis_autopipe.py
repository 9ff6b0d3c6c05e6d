"""Coalescing: the EVALSHAs of one turn of the event loop sent as one pipeline, each caller given
its own reply or its own error (ledger_bus/store/redis/autopipe.py)."""

from __future__ import annotations

import asyncio
import hashlib
import time
from typing import Any

import redis.exceptions as rx
from redis.asyncio import BlockingConnectionPool, Redis
from redis.auth.token import SimpleToken

import ledger_bus as lb
from ledger_bus import aio
from ledger_bus.demo.server import LocalServer
from ledger_bus.store.redis.autopipe import Coalescing
from tests.support.events import msg

ECHO = "if ARGV[1] == 'fail' then return redis.error_reply('ERR asked to fail') end return ARGV[1]"
ECHO_SHA = hashlib.sha1(ECHO.encode()).hexdigest()


def received(client: Any) -> Any:
    async def count() -> int:
        return int((await client.info("stats"))["total_connections_received"])

    return count()


def test_one_turns_calls_go_out_on_one_connection_each_with_its_own_reply(
    redis_url: str,
) -> None:
    async def main() -> None:
        probe = Redis.from_url(redis_url)
        await probe.script_load(ECHO)
        client = Redis.from_url(redis_url, max_connections=500)
        coalesced = Coalescing(client)
        before = await received(probe)
        words = [("fail" if n % 7 == 0 else f"w{n}") for n in range(200)]
        replies = await asyncio.gather(
            *(coalesced.evalsha(ECHO_SHA, 0, word) for word in words), return_exceptions=True
        )
        connections = await received(probe) - before
        for word, reply in zip(words, replies, strict=True):
            if word == "fail":
                assert isinstance(reply, rx.ResponseError)
                assert "asked to fail" in str(reply)
            else:
                assert reply == word.encode()
        assert connections == 1, "200 calls of one turn went out together"

        # The same calls one at a time, for contrast: a connection each at once.
        before = await received(probe)
        await asyncio.gather(*(client.evalsha(ECHO_SHA, 0, word) for word in words[1:7]))
        assert await received(probe) - before > 1
        await client.aclose()
        await probe.aclose()

    asyncio.run(main())


def test_a_cancelled_caller_leaves_the_others_their_replies(redis_url: str) -> None:
    async def main() -> None:
        client = Redis.from_url(redis_url)
        await client.script_load(ECHO)
        coalesced = Coalescing(client)
        calls = [asyncio.ensure_future(coalesced.evalsha(ECHO_SHA, 0, f"w{n}")) for n in range(5)]
        await asyncio.sleep(0)  # all five are in the batch the first one opened
        calls[0].cancel()  # the one that sends it
        calls[2].cancel()
        done = await asyncio.gather(*calls, return_exceptions=True)
        assert isinstance(done[0], asyncio.CancelledError)
        assert isinstance(done[2], asyncio.CancelledError)
        assert [done[n] for n in (1, 3, 4)] == [b"w1", b"w3", b"w4"]
        await client.aclose()

    asyncio.run(main())


def test_a_server_that_lost_its_scripts_fails_each_call_with_noscript(redis_url: str) -> None:
    async def main() -> None:
        client = Redis.from_url(redis_url)
        await client.script_flush()
        coalesced = Coalescing(client)
        replies = await asyncio.gather(
            *(coalesced.evalsha(ECHO_SHA, 0, "x") for _ in range(3)), return_exceptions=True
        )
        assert all(isinstance(r, rx.NoScriptError) for r in replies)
        await client.aclose()

    asyncio.run(main())


def test_concurrent_appends_after_a_script_flush_each_land_once(
    redis_url: str, prefix: str
) -> None:
    async def main() -> None:
        async with await aio.connect(redis_url, prefix=prefix) as store:
            refs = [lb.StreamId("f", f"s{n}") for n in range(32)]
            await asyncio.gather(*(store.append(r, 0, "a1", [msg("one")]) for r in refs))
            assert isinstance(store.requests, Coalescing), "one server's scripts coalesce"
            await store.requests.script_flush()  # as a restart without persistence would
            results = await asyncio.gather(*(store.append(r, 1, "a2", [msg("two")]) for r in refs))
            assert [r.last_version for r in results] == [2] * 32
            assert (await store.session_info("f")).events == 64

    asyncio.run(main())


def test_a_connection_lost_under_a_pipeline_fails_every_call_in_it(
    own_server: LocalServer,
) -> None:
    async def main() -> None:
        client = Redis.from_url(own_server.url, socket_timeout=2)
        await client.script_load(ECHO)
        coalesced = Coalescing(client)
        await asyncio.to_thread(own_server.kill)
        replies = await asyncio.gather(
            *(coalesced.evalsha(ECHO_SHA, 0, "x") for _ in range(4)), return_exceptions=True
        )
        assert all(isinstance(r, rx.ConnectionError) for r in replies), replies
        await asyncio.to_thread(own_server.start)
        await client.aclose()

    asyncio.run(main())


# Busy for `ARGV[1]` milliseconds of the server's clock, then answers `ARGV[2]`.
BUSY = """
local t = redis.call('TIME')
local until_us = (t[1] * 1000000 + t[2]) + tonumber(ARGV[1]) * 1000
repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] >= until_us
return ARGV[2]
"""


def _do(client: Any, *args: object) -> Any:
    """A raw command (redis-py's execute_command has no types)."""
    return client.execute_command(*args)


def _commands(stats: dict[str, Any], command: str) -> int:
    return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))


def test_calls_one_after_another_go_out_on_one_held_connection(redis_url: str) -> None:
    async def main() -> None:
        probe = Redis.from_url(redis_url)
        await probe.script_load(ECHO)
        client = Redis.from_url(redis_url)
        coalesced = Coalescing(client)
        before = await received(probe)
        for n in range(50):
            assert await coalesced.evalsha(ECHO_SHA, 0, f"w{n}") == f"w{n}".encode()
        with_errors = [coalesced.evalsha(ECHO_SHA, 0, "fail"), coalesced.evalsha(ECHO_SHA, 0, "x")]
        failed, fine = await asyncio.gather(*with_errors, return_exceptions=True)
        assert isinstance(failed, rx.ResponseError)
        assert fine == b"x"
        assert await received(probe) - before == 1
        # Taken from the pool once and kept: the pool counts it in use between calls.
        assert len(client.connection_pool._in_use_connections) == 1
        await client.aclose()
        await probe.aclose()

    asyncio.run(main())


def test_a_pool_of_one_connection_is_not_held_from(redis_url: str) -> None:
    """Given a client whose blocking pool has one connection, calls one after another and other
    commands between them all get it: holding it would keep it from them."""

    async def main() -> None:
        probe = Redis.from_url(redis_url)
        await probe.script_load(ECHO)
        pool = BlockingConnectionPool.from_url(redis_url, max_connections=1, timeout=1)
        client = Redis(connection_pool=pool)
        coalesced = Coalescing(client)
        for n in range(5):
            assert await coalesced.evalsha(ECHO_SHA, 0, f"w{n}") == f"w{n}".encode()
            assert await client.ping()
        await client.aclose()
        await pool.disconnect()  # the client was given the pool: it is not the client's to close
        await probe.aclose()

    asyncio.run(main())


def test_a_caller_cancelled_mid_reply_leaves_no_reply_behind_for_the_next(
    redis_url: str,
) -> None:
    async def main() -> None:
        client = Redis.from_url(redis_url)
        busy = await client.script_load(BUSY)
        coalesced = Coalescing(client)
        assert await coalesced.evalsha(busy, 0, 0, "warm") == b"warm"  # the held connection
        slow = asyncio.ensure_future(coalesced.evalsha(busy, 0, 300, "late"))
        await asyncio.sleep(0.1)
        slow.cancel()
        await asyncio.gather(slow, return_exceptions=True)
        # Had the connection been kept, the cancelled call's reply would be read as this one's.
        assert await coalesced.evalsha(busy, 0, 0, "mine") == b"mine"
        assert await coalesced.evalsha(busy, 0, 0, "and mine") == b"and mine"
        await client.aclose()

    asyncio.run(main())


def test_the_held_connection_pings_when_idle_and_takes_a_new_token(
    redis_server: LocalServer, prefix: str
) -> None:
    async def main() -> None:
        admin = Redis.from_url(redis_server.url)
        user = f"{prefix}-user"
        await _do(admin, "ACL", "SETUSER", user, "on", ">first", ">second", "~*", "&*", "+@all")
        url = f"redis://{user}:first@127.0.0.1:{redis_server.port}/0"
        client = Redis.from_url(url, health_check_interval=1)
        await client.script_load(ECHO)
        coalesced = Coalescing(client)
        try:
            assert await coalesced.evalsha(ECHO_SHA, 0, "one") == b"one"
            pings = _commands(await admin.info("commandstats"), "ping")
            await asyncio.sleep(1.2)
            assert await coalesced.evalsha(ECHO_SHA, 0, "two") == b"two"
            assert _commands(await admin.info("commandstats"), "ping") == pings + 1
            now = time.time() * 1000
            token = SimpleToken("second", now + 60_000, now, {"oid": user})
            await client.connection_pool.re_auth_callback(token)
            auths = _commands(await admin.info("commandstats"), "auth")
            assert await coalesced.evalsha(ECHO_SHA, 0, "three") == b"three"
            assert _commands(await admin.info("commandstats"), "auth") == auths + 1
            await _do(admin, "ACL", "SETUSER", user, "<first")
            assert await coalesced.evalsha(ECHO_SHA, 0, "four") == b"four"
        finally:
            await client.aclose()
            await _do(admin, "ACL", "DELUSER", user)
            await admin.aclose()

    asyncio.run(main())
