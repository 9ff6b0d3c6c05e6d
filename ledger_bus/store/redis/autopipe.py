"""Scripts called at once by many coroutines, sent to Redis together.

`Coalescing` stands in for the asyncio client in the store's driver: the EVALSHAs called in one
turn of the event loop go out as one pipeline (no MULTI: each script is atomic on its own), on
one connection the client holds, and each caller gets its own reply or its own error; a call
alone in its turn goes out as it is. Everything else goes straight to the client. The server
runs the same scripts in the same order; a connection lost under a pipeline fails each call in
it as a lone call would have failed, and each retries as it would have (an append by its
append_id, so nothing lands twice).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

import hiredis
import redis.exceptions as rx

Command = tuple[Any, ...]


class Coalescing:
    """An asyncio Redis client (one server, or Sentinel's primary) whose `evalsha` calls made
    in one turn of the event loop are sent as one pipeline."""

    def __init__(self, client: Any):
        self.client = client
        self._queued: list[tuple[Command, asyncio.Future[Any]]] | None = None
        self._sending: set[asyncio.Task[None]] = set()  # kept: the loop holds tasks weakly
        self._held: Any = None  # the connection calls go out on while it is free
        self._held_busy = False
        # Never from a pool of one connection, which holding would keep from every other call
        # (a store holds one: half of a pool of two, as blocking threads hold half at most).
        self._holdable = getattr(client.connection_pool, "max_connections", 0) >= 2

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    def evalsha(self, sha: str, numkeys: int, *keys_and_args: Any) -> Awaitable[Any]:
        """The reply of EVALSHA, sent with the others called in the same turn."""
        return self._call(("EVALSHA", sha, numkeys, *keys_and_args))

    async def _call(self, command: tuple[object, ...]) -> object:
        loop = asyncio.get_running_loop()
        if self._queued is not None:  # a batch is open this turn: join it
            reply = loop.create_future()
            self._queued.append((command, reply))
            return await reply
        # The first call of the turn opens the batch, lets the turn's other callers join it,
        # and sends it; alone, it is sent as it is, having waited one pass of the loop.
        own = loop.create_future()
        batch = self._queued = [(command, own)]
        try:
            await asyncio.sleep(0)
        except BaseException:  # cancelled: the others still go
            batch.pop(0)
            self._dispatch(batch)
            raise
        finally:
            self._queued = None
        if len(batch) == 1:
            replies = await self._on_held([command])
            if replies is None:
                return await self.client.execute_command(*command)
            if isinstance(replies[0], Exception):
                raise replies[0]
            return replies[0]
        self._dispatch(batch)
        return await own

    async def _on_held(self, commands: list[Command]) -> list[Any] | None:
        """Each command's reply, or the error it was answered with, sent on the held connection;
        None when that connection is busy with other calls, or when the pool has one connection
        only. A failure of the connection itself is raised."""
        if self._held_busy or not self._holdable:
            return None
        self._held_busy = True
        try:
            if self._held is None:
                self._held = await self.client.connection_pool.get_connection()
            connection = self._held
            # hiredis packs in C what redis-py would first walk in Python.
            await connection.send_packed_command([hiredis.pack_command(c) for c in commands])
            replies: list[Any] = []
            for _ in commands:
                try:
                    replies.append(await connection.read_response())
                except rx.ResponseError as err:
                    replies.append(err)
            await connection.re_auth()
            return replies
        finally:
            self._held_busy = False

    def _dispatch(self, batch: list[tuple[Command, asyncio.Future[Any]]]) -> None:
        """Send `batch` on a task of its own: its callers' replies do not hang on any one of
        them being cancelled."""
        if batch:
            task = asyncio.ensure_future(self._send(batch))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def _send(self, batch: list[tuple[Command, asyncio.Future[Any]]]) -> None:
        try:
            replies = await self._on_held([command for command, _ in batch])
            if replies is None:
                pipe = self.client.pipeline(transaction=False)
                for command, _ in batch:
                    pipe.execute_command(*command)
                replies = await pipe.execute(raise_on_error=False)
        except Exception as err:  # the connection failed under all of them
            for _, reply in batch:
                if not reply.done():
                    reply.set_exception(err)
            return
        except BaseException:  # cancelled (the loop is closing): so are its callers
            for _, reply in batch:
                reply.cancel()
            raise
        for (_, reply), value in zip(batch, replies, strict=True):
            if reply.done():  # its caller was cancelled
                continue
            if isinstance(value, Exception):
                reply.set_exception(value)
            else:
                reply.set_result(value)
