"""A framework's tool calls, recorded as the Recorder records its own: the request committed
before the tool runs, the outcome after, a lease held while it runs; and on a resumed run, the
recorded outcome returned instead of running the tool again.

A framework names its calls (LangGraph and the Agents SDK give each a call id from the model's
reply); that name is the call's step, so a resumed run finds the step it had recorded. Each call
takes its own run id (`<stream>.<step>`, or a digest of it) and holds the lease `run-<run id>`
while it runs: the reconciler flags its attempt only once that lease has expired, so a live
process's long tool is left alone and a killed one's is flagged after the lease and the grace
period, and two processes resuming one thread cannot both run one call.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ledger_bus.adapters.view import Views
from ledger_bus.agent.call_events import not_done
from ledger_bus.agent.current import CurrentCall, calling
from ledger_bus.agent.recorder import (
    DEFAULT_LEASE_MS,
    OutcomeNotRecorded,
    RequestNotRecorded,
    UnresolvedAttempt,
    abandoned,
    abandoned_event,
    failure,
    request_event,
    result_event,
)
from ledger_bus.model.errors import InvalidInput, LedgerError, VersionConflict
from ledger_bus.model.ids import ANY, StreamId, check_name, derive_event_id
from ledger_bus.model.jsontext import JSON, JSONObject
from ledger_bus.model.keys import idempotency_key
from ledger_bus.model.prepared import Fence
from ledger_bus.model.records import RecordedEvent
from ledger_bus.store.base import Attempts, EventStore, need
from ledger_bus.store.steps import Op

T = TypeVar("T")
Outcome = Callable[[Any], tuple[str, Any]]  # a tool's value -> (status, result to record)


@dataclass(frozen=True)
class ToolStep:
    """A step that calls a tool: its id, the tool and its arguments, whether the tool may run
    again after a crash, and how its attempts are matched and named (`match_args`, `named`:
    see CallLedger.begin_op)."""

    step_id: str
    tool: str
    args: JSONObject
    safe_to_replay: bool
    match_args: bool = False
    named: bool = False


@dataclass
class _Calls:
    """A calls stream folded: each step's tool_calls in order, each attempt's tool_result."""

    calls: dict[str, list[RecordedEvent]] = field(default_factory=dict)
    results: dict[str, RecordedEvent] = field(default_factory=dict)
    # The event ids of the outcomes a later call has taken: each is handed over once.
    taken: set[str] = field(default_factory=set)


def _fold(state: _Calls, event: RecordedEvent) -> None:
    if event.type == "tool_call" and event.step_id:
        state.calls.setdefault(str(event.step_id), []).append(event)
        state.taken.update(event.parents)
    elif event.type == "tool_result" and event.attempt_id:
        state.results[str(event.attempt_id)] = event


def _decided_alike(
    state: _Calls, agent: str, tool: str, args: JSONObject
) -> tuple[RecordedEvent, RecordedEvent] | None:
    """The oldest outcome of `tool` with these arguments that someone other than the framework
    (an operator's `ledger-bus resolve`, a reconciler's probe) recorded for a call it never
    finished, and that no later call has taken yet: the outcome of the call a rerun reaches
    again, with that call's request."""
    for calls in state.calls.values():
        latest = calls[-1]
        result = state.results.get(str(latest.attempt_id))
        if (
            result is not None
            and result.agent != agent
            and not not_done(result)  # a probe's "not done" is no outcome: the call runs again
            and result.event_id not in state.taken
            and latest.get("tool") == tool
            and latest.get("args") == args
        ):
            return result, latest
    return None


def _outcome_of(state: _Calls, calls: list[RecordedEvent]) -> RecordedEvent | None:
    """The outcome of a step's attempts: the first result that is not only the close of an
    attempt a crash abandoned."""
    for call in calls:
        result = state.results.get(str(call.attempt_id))
        if result is not None and not abandoned(result) and not not_done(result):
            return result
    return None


def _unfinished_alike(state: _Calls, tool: str, args: JSONObject) -> list[RecordedEvent]:
    """The newest attempt of `tool` with these arguments that has no result, or whose result
    is a probe's "not done" that no later call has taken yet, if any."""
    for calls in reversed(state.calls.values()):
        latest = calls[-1]
        result = state.results.get(str(latest.attempt_id))
        if (
            latest.get("tool") == tool
            and latest.get("args") == args
            and (result is None or (not_done(result) and result.event_id not in state.taken))
        ):
            return [latest]
    return []


@dataclass(frozen=True)
class Begun:
    """A call whose request is committed and whose lease is held: run the tool, then end it."""

    stream: StreamId
    tool: str
    step_id: str
    attempt_id: str
    run_id: str
    call_id: str
    fence: Fence  # the call's lease as this process holds it: its writes are made under it
    idempotency_key: str
    args: JSONObject

    @property
    def owner(self) -> str:
        return self.fence.owner

    @property
    def current(self) -> CurrentCall:
        """The call as its tool sees it (`ledger_bus.current_call()` while it runs)."""
        return CurrentCall(
            self.tool,
            self.stream.session_id,
            self.run_id,
            self.step_id,
            self.attempt_id,
            self.idempotency_key,
            self.args,
        )


class CallLedger:
    """Records the calls of one framework's tools in a store."""

    def __init__(self, store: EventStore, *, agent: str, lease_ttl_ms: int = DEFAULT_LEASE_MS):
        need(store, Attempts)  # a recorded call is an attempt under a lease
        self.store = store
        self.agent = agent
        self.lease_ttl_ms = lease_ttl_ms
        self._views: Views[_Calls] = Views(_Calls, _fold)

    def guard(self, stream: StreamId, drive: Callable[[Op[Any]], Any]) -> CallGuard:
        """The calls of one stream (a thread's, a session's), run with `drive`."""
        return CallGuard(self, stream, drive)

    # -- the two halves of a call, as operations --------------------------------------------------

    def begin_op(self, stream: StreamId, step: ToolStep) -> Op[tuple[bool, Any]]:
        """(True, the recorded tool_result) for a step recorded with its outcome; else (False,
        a Begun call), its request committed under its lease. `named`: the step's first
        attempt is the step itself (its id), as the framework's record of the model's reply
        names it. UnresolvedAttempt:
        the step was requested and never finished, and the tool is not safe to replay.
        RequestNotRecorded: the request could not be committed; the tool must not run.

        `match_args`, for a framework whose call ids do not outlive a crash: a new step of a
        tool called with the same arguments as an attempt requested and never finished is
        taken for that attempt asked again; and so is a new step like an attempt whose outcome
        an operator decided, which gets that outcome (once) instead of running the tool."""
        step_id, tool, args = step.step_id, step.tool, step.args
        safe_to_replay, match_args, named = step.safe_to_replay, step.match_args, step.named
        view = self._views.of(stream)
        state = yield from view.refresh_op(self.store)
        earlier = state.calls.get(step_id, [])
        while True:
            if (found := _outcome_of(state, earlier)) is not None:
                return True, found
            decided = _decided_alike(state, self.agent, tool, args) if match_args else None
            if earlier or decided is None:
                break
            try:
                yield from self._take_op(stream, view.version, step_id, *decided, args)
                return True, decided[0]
            except VersionConflict:
                state = yield from view.refresh_op(self.store)  # another writer came first
                earlier = state.calls.get(step_id, [])
        unfinished = earlier or (_unfinished_alike(state, tool, args) if match_args else [])
        run_id = _run_id(stream, step_id)
        owner = uuid.uuid4().hex
        store, session = self.store, stream.session_id
        lease = f"run-{run_id}"
        fence = yield from store.hold_op(session, lease, owner, self.lease_ttl_ms)
        if fence is None:
            raise LedgerError(f"{tool} call {step_id} is running in another live process")
        # The logical call's key: that of the call this one asks again, if any (a framework
        # whose call ids do not outlive a crash names it anew), else its own step's.
        key = str(unfinished[-1].get("idempotency_key") or "") if unfinished else ""
        key = key or idempotency_key(session, run_id, step_id)
        try:
            parents: list[JSON] = []
            if unfinished and unfinished[-1].run_id not in (None, run_id):
                # Another call's attempt, asked again under a new id: its own lease is taken
                # too, as a reconciler settling it takes it, so the two never both close it.
                parents = yield from self._again_elsewhere_op(stream, unfinished[-1], step)
            elif unfinished:
                parents = yield from self._again_op(stream, fence, state, unfinished[-1], step)
            attempt_id = step_id if named and not earlier else f"{step_id}#{len(earlier) + 1}"
            if safe_to_replay:
                yield from self._write_op(
                    stream,
                    fence,
                    {
                        "type": "mutation",
                        "kind": "tool.declared",
                        "tool": tool,
                        "run_id": run_id,
                        "safe_to_replay": True,
                    },
                )
            request = request_event(tool, args, attempt_id, step_id, key, run_id=run_id)
            if parents:
                request["parents"] = parents
            try:
                call_id = yield from self._write_op(stream, fence, request)
            except LedgerError as err:
                raise RequestNotRecorded(
                    f"{tool} was not called: its request was not recorded: {err}"
                ) from err
        except BaseException:
            yield from store.release_lease_op(session, lease, owner)
            raise
        return False, Begun(stream, tool, step_id, attempt_id, run_id, call_id, fence, key, args)

    def _again_op(
        self, stream: StreamId, fence: Fence, state: _Calls, latest: RecordedEvent, step: ToolStep
    ) -> Op[list[JSON]]:
        """Before a call that asks again for the unfinished attempt `latest`: what its request
        follows from. UnresolvedAttempt where it may not run again."""
        settled = state.results.get(str(latest.attempt_id))
        if settled is not None and not_done(settled):
            # A probe found its effect never took place: it runs again, safe to replay or not,
            # and this request takes that finding (once).
            return [settled.event_id]
        if not step.safe_to_replay:
            raise UnresolvedAttempt(str(latest.attempt_id), step.tool)
        # Safe to replay: close the abandoned attempt (unless a crash right after its close
        # left it closed), then run a new one.
        if settled is None:
            closed = abandoned_event(
                latest, str(latest.step_id), run_id=latest.run_id, parents=[latest.event_id]
            )
            yield from self._write_op(stream, fence, closed)
        return []

    def _again_elsewhere_op(
        self, stream: StreamId, latest: RecordedEvent, step: ToolStep
    ) -> Op[list[JSON]]:
        """_again_op for an attempt of another run id (a call asked again under a new id),
        under that run's lease, on the stream as it is once the lease is held."""
        session, old = stream.session_id, f"run-{latest.run_id}"
        owner = uuid.uuid4().hex
        fence = yield from self.store.hold_op(session, old, owner, self.lease_ttl_ms)
        if fence is None:
            raise LedgerError(
                f"{step.tool} call {latest.attempt_id}, asked again as {step.step_id}, is held by"
                " another live process (its run, or a reconciler settling it); ask again later"
            )
        try:
            state = yield from self._views.of(stream).refresh_op(self.store)
            result = state.results.get(str(latest.attempt_id))
            if result is not None and not abandoned(result) and not not_done(result):
                raise LedgerError(
                    f"{step.tool} call {latest.attempt_id} was settled while {step.step_id}"
                    " asked for it again; ask again"
                )
            return (yield from self._again_op(stream, fence, state, latest, step))
        finally:
            yield from self.store.release_lease_op(session, old, owner)

    def _take_op(  # noqa: PLR0913  (the call, what it takes, and where)
        self,
        stream: StreamId,
        version: int,
        step_id: str,
        decided: RecordedEvent,
        asked: RecordedEvent,
        args: JSONObject,
    ) -> Op[None]:
        """Record that the call `step_id` got the outcome `decided` of the call `asked` without
        running: its request (under `asked`'s idempotency key: the same logical call) and that
        outcome, in one append at the stream's `version` (so two calls never take one outcome),
        the request linked to the decision."""
        tool = str(decided["tool"])
        run_id = _run_id(stream, step_id)
        attempt_id = f"{step_id}#1"
        take = f"take:{attempt_id}:{decided.event_id}"
        call_id = derive_event_id(stream.session_id, stream.name, take, 0)
        key = str(asked.get("idempotency_key") or "") or idempotency_key(
            stream.session_id, run_id, step_id
        )
        request = request_event(
            tool, args, attempt_id, step_id, key, run_id=run_id, parents=[decided.event_id]
        )
        outcome = result_event(
            tool,
            attempt_id,
            step_id,
            str(decided["status"]),
            decided.get("result"),
            run_id=run_id,
            parents=[call_id, decided.event_id],
        )
        events = [{"agent": self.agent, **request}, {"agent": self.agent, **outcome}]
        yield from self.store.append_op(stream, version, take, events)

    def recorded_op(
        self, stream: StreamId, steps: set[str]
    ) -> Op[dict[str, tuple[str, RecordedEvent | None]]]:
        """Of these steps of `stream`, those it records: step -> (the event id of its first
        request, its outcome if it has one)."""
        state = yield from self._views.of(stream).refresh_op(self.store)
        return {
            step: (calls[0].event_id, _outcome_of(state, calls))
            for step in steps
            if (calls := state.calls.get(step))
        }

    def end_op(self, begun: Begun, status: str, result: object) -> Op[None]:
        """Record a begun call's outcome and let its lease go. OutcomeNotRecorded: the outcome
        could not be committed (the attempt stays open, for the reconciler)."""
        event = result_event(
            begun.tool,
            begun.attempt_id,
            begun.step_id,
            status,
            result,
            run_id=begun.run_id,
            parents=[begun.call_id],
        )
        try:
            yield from self._write_op(begun.stream, begun.fence, event)
        except LedgerError as err:
            raise OutcomeNotRecorded(
                f"{begun.tool} ran (attempt {begun.attempt_id}) but its result was not"
                f" recorded: {err}"
            ) from err
        finally:
            lease = f"run-{begun.run_id}"
            yield from self.store.release_lease_op(begun.stream.session_id, lease, begun.owner)

    def renew_op(self, begun: Begun) -> Op[bool]:
        lease = f"run-{begun.run_id}"
        return bool(
            (
                yield from self.store.renew_lease_op(
                    begun.stream.session_id, lease, begun.owner, self.lease_ttl_ms
                )
            )
        )

    def _write_op(self, stream: StreamId, fence: Fence, event: JSONObject) -> Op[str]:
        """Append one event under the call's lease: a process that lost it (stopped past its
        TTL while another took the call over) writes nothing more. Its append id names the
        call's attempt and this process's hold of it (the owner): the store's retries of the
        append land once, and a call made again after its thread or session was deleted is
        recorded anew, not taken for a retry of the deleted one (whose append ids the store
        keeps, spec 3.9)."""
        event = {"agent": self.agent, **event}
        key = f"{event['type']}:{event.get('attempt_id') or event.get('run_id')}:{fence.owner}"
        yield from self.store.append_op(stream, ANY, key, [event], fence=fence)
        # Known without reading it back: the ledger derives it from the append.
        return derive_event_id(stream.session_id, stream.name, key, 0)


@dataclass
class CallGuard:
    """One stream's calls: begin, run the tool while its lease is renewed, end."""

    ledger: CallLedger
    stream: StreamId
    drive: Callable[[Op[Any]], Any]

    def begin_op(self, step: ToolStep) -> Op[tuple[bool, Any]]:
        return self.ledger.begin_op(self.stream, step)

    def finish_sync(self, begun: Begun, run: Callable[[], T], outcome: Outcome) -> T:
        """Run the tool of a begun call (its lease renewed by a thread meanwhile) and record
        its outcome; an exception it raises is recorded and propagates."""
        stop = threading.Event()
        interval = self.ledger.lease_ttl_ms / 3000

        def renew() -> None:
            while not stop.wait(interval):
                try:
                    if not self.drive(self.ledger.renew_op(begun)):
                        return
                except LedgerError:
                    continue

        renewer = threading.Thread(target=renew, name=f"lease-{begun.run_id}", daemon=True)
        renewer.start()
        try:
            with calling(begun.current):
                value = run()
        except Exception as err:
            stop.set()
            renewer.join()
            self.drive(self.ledger.end_op(begun, "error", failure(err)))
            raise
        stop.set()
        renewer.join()
        status, result = outcome(value)
        self.drive(self.ledger.end_op(begun, status, result))
        return value

    async def finish_async(
        self,
        begun: Begun,
        run: Callable[[], Awaitable[T]],
        outcome: Outcome,
        drive: Callable[[Op[Any]], Awaitable[Any]],
    ) -> T:
        """finish_sync, for a coroutine, its lease renewed by a task."""
        interval = self.ledger.lease_ttl_ms / 3000

        async def renew() -> None:
            while True:
                await asyncio.sleep(interval)
                try:
                    if not await drive(self.ledger.renew_op(begun)):
                        return
                except LedgerError:
                    continue

        renewer = asyncio.create_task(renew())
        try:
            with calling(begun.current):
                value = await run()
        except Exception as err:
            renewer.cancel()
            await drive(self.ledger.end_op(begun, "error", failure(err)))
            raise
        finally:
            renewer.cancel()
            await asyncio.gather(renewer, return_exceptions=True)
        status, result = outcome(value)
        await drive(self.ledger.end_op(begun, status, result))
        return value


def decided_text(result: object) -> str:
    """A recorded outcome as the text a model reads: a string as it is, JSON otherwise; an
    outcome nobody knows (`ledger-bus resolve --unknown`, or a crash before a replay) says so."""
    if isinstance(result, str):
        return result
    if isinstance(result, dict) and result.get("outcome") in ("unknown", "retried"):
        by = result.get("resolved_by")
        said = f"the outcome of this call is {result['outcome']}" + (
            f" (decided by {by})" if by else ""
        )
        if result.get("retry_attempt"):
            said += f"; retried as {result['retry_attempt']}"
        return said + "; it was not run again"
    if isinstance(result, dict) and set(result) == {"error", "message"}:
        return f"{result['error']}: {result['message']}"
    return json.dumps(result, ensure_ascii=False, sort_keys=True)


def _run_id(stream: StreamId, step_id: str) -> str:
    """The run id of one call: its stream and step, or a digest of them where that is no name."""
    name = f"{stream.name}.{step_id}"
    try:
        if len(check_name(name, "run id")) <= 180:
            return name
    except InvalidInput:
        pass
    return f"{stream.name}.{hashlib.sha256(step_id.encode()).hexdigest()[:32]}"


__all__ = ["Begun", "CallGuard", "CallLedger", "decided_text"]
