"""The call a tool is running in: `ledger_bus.current_call()`.

A tool learns which logical call it is making from here, chiefly its idempotency key, which it
hands the system it acts on (a payment API's `Idempotency-Key`, a cloud API's client token) so
that the attempt after a crash does not act twice. The recorder and every adapter set it around
the tool, in a context variable: each thread and each asyncio task sees its own call.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from typing import Final

from ledger_bus.model.errors import LedgerError
from ledger_bus.model.jsontext import JSONObject


@dataclass(frozen=True)
class CurrentCall:
    """A recorded call as its tool sees it."""

    tool: str
    session_id: str
    run_id: str
    step_id: str
    attempt_id: str
    idempotency_key: str  # the same for every attempt at this call, in every process and SDK
    args: JSONObject = field(default_factory=dict)


class NoCurrentCall(LedgerError, LookupError):
    """Raised by current_call() outside a recorded call."""


_CURRENT: Final[ContextVar[CurrentCall | None]] = ContextVar("ledger_bus_call", default=None)


def current_call() -> CurrentCall:
    """The recorded call the running tool belongs to; NoCurrentCall outside one."""
    call = _CURRENT.get()
    if call is None:
        raise NoCurrentCall("no recorded call is running here: current_call() is for a tool")
    return call


@contextmanager
def calling(call: CurrentCall) -> Iterator[CurrentCall]:
    """Make `call` the current call while the block runs (the tool runs inside it)."""
    token = enter(call)
    try:
        yield call
    finally:
        leave(token)


def enter(call: CurrentCall) -> Token[CurrentCall | None]:
    """Make `call` the current call until `leave(token)`, for a framework whose hooks run
    before and after the tool (ADK's plugin callbacks) rather than around it."""
    return _CURRENT.set(call)


def leave(token: Token[CurrentCall | None]) -> None:
    _CURRENT.reset(token)
