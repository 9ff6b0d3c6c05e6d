"""Coalescing: the EVALSHAs of one turn of the event loop sent as one pipeline, each caller given
its own reply or its own error (ledger_bus/store/autopipe.py)."""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

import redis.exceptions as rx
from redis.asyncio import Redis

import ledger_bus as lb
from ledger_bus import aio
from ledger_bus.server import LocalServer
from ledger_bus.store.autopipe import Coalescing

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


def msg(body: str) -> dict[str, Any]:
    return {"type": "message", "agent": "a", "body": body}
