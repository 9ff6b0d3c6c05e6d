"""Store operations without I/O, and the two drivers that run them.

An operation is a generator: it does the ledger's work (checks, key layout, script arguments,
decoding replies, the rules) and yields what it needs done outside: a request, applied to the
driver's client, or a pause. The sync driver calls the request on a blocking client
(`redis.Redis`); the async driver on an asyncio one (`redis.asyncio.Redis`), awaiting what it
returns. The same request works on both, because redis-py's asyncio client has the blocking
client's methods, returning awaitables; a pipeline is built the same way and only its
`execute()` differs, which the request returns for the driver to await. A failure of a request
is thrown back into the operation at its `yield`, so an operation catches what it expects
(NOSCRIPT, BUSYGROUP) in plain `try` blocks, whichever driver runs it.
"""

from __future__ import annotations

import functools
import inspect
import random
import time
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar, cast

from ledger_bus.model.errors import BackendUnavailable, LedgerError

T = TypeVar("T")
P = ParamSpec("P")


@dataclass(frozen=True, slots=True)
class Sleep:
    """A pause between tries: time.sleep under the sync driver, asyncio.sleep under the other."""

    seconds: float


# Applied to the driver's client (a backend's own, typed there: store/redis/client.py): the
# reply, or (async client) an awaitable of it. What an operation is sent back at its `yield` is
# that reply, which the operation's own parser reads (store/redis/replies.py).
Request = Callable[[Any], object]
Op = Generator[Request | Sleep, Any, T]


class Runs(Protocol):
    """What runs operations to their end: a store, with its own blocking client (Log.run_op)."""

    def run_op(self, op: Op[T]) -> T: ...


S = TypeVar("S", bound=Runs)


def operation(steps: Callable[Concatenate[S, P], Op[T]]) -> Callable[Concatenate[S, P], T]:
    """A contract operation declared once, by its steps (`<name>_op`, an operation without I/O):
    `read_stream = operation(read_stream_op)` makes the blocking method, which runs the steps
    with the store's own client (`store.read_stream(...)` is
    `store.run_op(store.read_stream_op(...))`); AsyncStore forwards the same steps to the event
    loop (store/async_store.py). The steps are looked up on the store, so a backend that
    overrides them is run by its own."""
    name = steps.__name__

    def blocking(store: S, /, *args: P.args, **kwargs: P.kwargs) -> T:
        found: Callable[P, Op[T]] = getattr(store, name)
        return store.run_op(found(*args, **kwargs))

    return declared(blocking, steps)


F = TypeVar("F", bound=Callable[..., Any])


def declared(method: F, steps: Callable[..., object]) -> F:
    """`method` named, documented and signed as the operation `steps` declares (its parameters,
    and its result: what the operation returns, or a coroutine of it awaits), so that help(),
    inspect and the API pages show the operation, not the forwarding."""
    signature = inspect.signature(steps)
    result = str(signature.return_annotation)
    if result.startswith("Op[") and result.endswith("]"):
        result = result[3:-1]
    method.__name__ = method.__qualname__ = steps.__name__.removesuffix("_op")
    method.__doc__ = steps.__doc__
    method.__signature__ = signature.replace(return_annotation=result)  # type: ignore[attr-defined]
    method.steps = steps  # type: ignore[attr-defined]
    return method


def call(request: Request) -> Op[Any]:
    """One request as an operation."""
    return (yield request)


def immediate(primitive: Callable[P, T]) -> Callable[P, Op[T]]:
    """A backend primitive that asks its driver for nothing, as the operation every primitive is.

    A backend on the network (Redis) writes its primitives as operations that yield requests. One
    without a network (memory), or whose driver looks blocking (SQL: under asyncio, SQLAlchemy's
    greenlet bridge awaits its calls), does its work in place: `primitive`'s body runs when the
    operation starts, and the operation yields nothing. So a primitive's type says what it is, and
    the log runs every backend's the one way (`yield from`)."""

    @functools.wraps(primitive)
    def op(*args: P.args, **kwargs: P.kwargs) -> Op[T]:
        yield from ()
        return primitive(*args, **kwargs)

    return op


def retried(  # noqa: PLR0913  (the retry loop's settings, each a keyword)
    make: Callable[[], Op[T]],
    timeout: float,
    backend_errors: tuple[type[Exception], ...],
    final: Callable[[Exception], LedgerError | None],
    who: str,
    describe: Callable[[Exception], str] = str,
    failed: Exception | None = None,
) -> Op[T]:
    """Run a fresh `make()` until it returns, or `timeout` seconds have passed (then
    BackendUnavailable), pausing with backoff between tries; `failed`: a first try, made by the
    caller, failed so (it is judged, and the next try waits, as for any other).

    Only `backend_errors` are judged; anything else propagates as it is. `final(err)` says what
    a backend error means: a LedgerError to raise at once (a refusal that retrying as it is will
    not change), or None for a failure worth trying again (a lost connection, "not now").
    """
    deadline = time.monotonic() + timeout
    delay = 0.02
    err = failed
    while True:
        if err is not None:
            verdict = final(err)
            if verdict is not None:
                raise verdict from err
            if time.monotonic() + delay > deadline:
                raise BackendUnavailable(
                    f"{who} did not answer within {timeout:g}s: {describe(err)}"
                ) from err
            yield Sleep(delay)
            delay = min(delay * 2, 0.5)
        try:
            return (yield from make())
        except backend_errors as caught:
            err = caught


def contended(losses: int) -> float:
    """How long to pause after the `losses`-th lost optimistic write in a row (a version
    conflict): a random while, its ceiling doubling from 1 ms to 50 ms. Random, because writers
    in step (same round trips, same work) stay in step otherwise, the one ahead winning each
    time."""
    return random.uniform(0, min(0.001 * 2 ** min(losses, 16), 0.05))


def run(op: Op[T], client: object, sleep: Callable[[float], None] = time.sleep) -> T:
    """Run `op` to its end with blocking calls on `client`, pausing with `sleep`."""
    reply: object = None
    failure: BaseException | None = None
    while True:
        try:
            need = op.send(reply) if failure is None else op.throw(failure)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        reply, failure = None, None
        try:
            if isinstance(need, Sleep):
                sleep(need.seconds)
            else:
                reply = need(client)
        except Exception as err:
            failure = err


async def run_async(op: Op[T], client: object) -> T:
    """Run `op` to its end on an asyncio `client`, awaiting each request."""
    reply: object = None
    failure: BaseException | None = None
    while True:
        try:
            need = op.send(reply) if failure is None else op.throw(failure)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        reply, failure = None, None
        try:
            if isinstance(need, Sleep):
                import asyncio  # noqa: PLC0415  (here: the command line never runs this, and asyncio costs it 50 ms a start)

                await asyncio.sleep(need.seconds)
            else:
                reply = need(client)
                # what redis-py's asyncio client returns, a coroutine or a future (cheaper to
                # ask than inspect.isawaitable, which asks the Awaitable ABC)
                if hasattr(reply, "__await__"):
                    reply = await cast(Awaitable[object], reply)
        except Exception as err:
            failure = err
