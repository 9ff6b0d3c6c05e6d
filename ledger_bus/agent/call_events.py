"""A recorded call: the events that say it was asked for and how it ended, the errors a run
meets around it, and the guarantees a recorder (or an adapter) publishes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, Literal

from ledger_bus.model.errors import LedgerError
from ledger_bus.model.jsontext import JSONObject
from ledger_bus.model.records import RecordedEvent

Support = Literal["strict", "best_effort", "unsupported"]
DEFAULT_LEASE_MS: Final = 10_000
ABANDONED: Final = "abandoned by a crash; replayed on resume"
# The outcome a reconciler's probe records for a call whose effect did not take place: the
# resumed run calls the tool again (with the same idempotency key), safe to replay or not.
NOT_DONE: Final = "not_done"


def request_event(
    tool: str, args: JSONObject, attempt_id: str, step_id: str, key: str, **ids: Any
) -> JSONObject:
    """A call's `tool_call`: committed before the call runs (a Run's, or an adapter's), with
    the logical call's idempotency key."""
    return {
        "type": "tool_call",
        "tool": tool,
        "args": args,
        "attempt_id": attempt_id,
        "step_id": step_id,
        "idempotency_key": key,
        **ids,
    }


def result_event(
    tool: str, attempt_id: str, step_id: str, status: str, value: object, **ids: Any
) -> JSONObject:
    """A call's `tool_result`: its outcome, "ok" or "error"."""
    return {
        "type": "tool_result",
        "tool": tool,
        "attempt_id": attempt_id,
        "step_id": step_id,
        "status": status,
        "result": value,
        **ids,
    }


def abandoned_event(call: RecordedEvent, step_id: str, **ids: Any) -> JSONObject:
    """The `tool_result` that closes an attempt a crash left unfinished, before a tool safe to
    replay runs again: nobody knows whether it took effect."""
    return result_event(
        str(call["tool"]),
        str(call["attempt_id"]),
        step_id,
        "error",
        {"outcome": "unknown", "reason": ABANDONED},
        **ids,
    )


def abandoned(result: RecordedEvent) -> bool:
    """Whether a tool_result only closes an attempt that a crash left unfinished, before the
    tool (safe to replay) ran again: no outcome of the step, which a later attempt has."""
    return bool(result.get("result") == {"outcome": "unknown", "reason": ABANDONED})


def not_done(result: RecordedEvent | None) -> bool:
    """Whether a tool_result is a probe's finding that the call's effect did not take place:
    the step is to run again, under the same idempotency key."""
    if result is None or not result.get("settled_by"):
        return False
    value = result.get("result")
    return isinstance(value, dict) and value.get("outcome") == NOT_DONE


def failure(err: BaseException) -> dict[str, str]:
    """What a tool_result with status "error" records of the exception."""
    return {"error": type(err).__name__, "message": str(err)}


class RequestNotRecorded(LedgerError):
    """Raised when a call's request could not be committed; the call did not run."""


class OutcomeNotRecorded(LedgerError):
    """Raised when a call ran but its result could not be committed; the attempt stays open."""


class UnresolvedAttempt(LedgerError):
    """Raised on resume at a call that was requested and never finished, and is unsafe to replay."""

    def __init__(self, attempt_id: str, tool: str):
        super().__init__(
            f"attempt {attempt_id} of {tool} was requested and has no result; it is not safe to"
            " replay, so recovery stops here for a decision (reconcile it, then resume)"
        )
        self.attempt_id = attempt_id
        self.tool = tool


class ToolFailed(LedgerError):
    """Raised on resume for a call whose recorded outcome was an error."""


@dataclass(frozen=True)
class Capabilities:
    """What this recorder guarantees, in the vocabulary adapters publish."""

    request_before_call: Support
    record_outcome: Support
    recovery: Support
    profile: str = "plain-python-loop"

    def to_dict(self) -> dict[str, str]:
        return {
            "profile": self.profile,
            "request_before_call": self.request_before_call,
            "record_outcome": self.record_outcome,
            "recovery": self.recovery,
        }


@dataclass(frozen=True)
class Delegation:
    """A delegation in flight: the call that asked for it and the child run that does it."""

    step_id: str
    attempt_id: str
    child_run_id: str
    call_event_id: str
    agent: str


@dataclass(frozen=True)
class Attempt:
    """A call whose request is committed: what its result is recorded against."""

    tool: str
    attempt_id: str
    step_id: str
    call_id: str
    idempotency_key: str = ""
    args: JSONObject = field(default_factory=dict)
