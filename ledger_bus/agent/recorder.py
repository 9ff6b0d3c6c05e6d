"""What an agent loop calls to record its work: runs, tool calls, messages, state, delegation.

The profile is the plain Python loop with explicit recorder calls. Its guarantees:

- requested before called: a tool's `tool_call` is committed before the tool runs, and when that
  write fails the tool does not run (RequestNotRecorded);
- outcomes: the `tool_result` (ok, or error with the exception) follows, linked to its call;
- liveness: a run holds a lease, renewed in the background, so a crashed run is recognisable;
- recovery: a run resumed from its stream returns recorded results instead of calling again,
  and stops at a call that was requested and never finished unless the tool is safe to replay.

Each run writes its own stream (`run-<run_id>`) with expected versions: one writer per stream, so a
second process writing the same run is refused instead of interleaving.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Final

from ledger_bus.agent.call_events import (
    ABANDONED,
    DEFAULT_LEASE_MS,
    Attempt,
    Capabilities,
    Delegation,
    OutcomeNotRecorded,
    RequestNotRecorded,
    Support,
    ToolFailed,
    UnresolvedAttempt,
    abandoned,
    abandoned_event,
    failure,
    not_done,
    request_event,
    result_event,
)
from ledger_bus.agent.current import CurrentCall, calling
from ledger_bus.model.errors import DurabilityNotConfirmed, HistoryRewound, LeaseLost, LedgerError
from ledger_bus.model.ids import ANY, StreamId, derive_event_id
from ledger_bus.model.jsontext import JSONObject
from ledger_bus.model.keys import idempotency_key
from ledger_bus.model.prepared import Fence
from ledger_bus.model.records import AppendResult, RecordedEvent
from ledger_bus.store.base import Attempts, EventStore, need
from ledger_bus.store.steps import Op, Sleep

log = logging.getLogger("ledger_bus.recorder")

_RUN_AGAIN: Final = object()  # what _replay returns when the step must be called afresh


@dataclass
class _History:
    """A run's stream as read on resume: what each step asked and got."""

    version: int = 0
    attempts: dict[str, list[RecordedEvent]] = field(default_factory=dict)  # step -> tool_calls
    results: dict[str, RecordedEvent] = field(default_factory=dict)  # attempt -> tool_result
    said: list[RecordedEvent] = field(default_factory=list)  # messages and mutations, in order
    checkpoint: dict[str, Any] | None = None
    checkpoint_version: int = 0  # the run's version when that checkpoint was taken
    events: list[RecordedEvent] = field(default_factory=list)  # the incarnation's, in order


@dataclass(frozen=True)
class Recovery:
    """What a loop rebuilds its state from after a crash: the newest snapshot the run took
    (None: none) and the run's events after it, in order (its own starts and ends left out)."""

    state: dict[str, Any] | None
    events: list[RecordedEvent]


# What a run writes of its own life, each time it starts or ends: never replayed.
LIFECYCLE: Final = frozenset({"run.started", "run.resumed", "run.finished", "tool.declared"})
# What the ledger sets on an event, or the run itself: not what the agent said.
_NOT_SAID: Final = frozenset({"event_id", "agent", "run_id", "parents"})


def _what_was_said(fields: JSONObject) -> JSONObject:
    return {k: v for k, v in fields.items() if k not in _NOT_SAID}


class Recorder:
    """Records runs of one agent in one session.

    Args:
        store: where to write.
        session_id: the task the agent works on.
        agent: this agent's name, on every event it writes.
        durable: False for telemetry only: writes that fail are logged and the work goes on, and
            the capabilities say so (no recovery is claimed).
        lease_ttl_ms: how long a run stays alive without renewal; renewed every third of it.
    """

    def __init__(
        self,
        store: EventStore,
        session_id: str,
        agent: str,
        *,
        durable: bool = True,
        lease_ttl_ms: int = DEFAULT_LEASE_MS,
    ):
        self.store = store
        # a run holds a lease while it works, so the store keeps leases and open attempts
        self.attempts = need(store, Attempts)
        self.session_id = session_id
        self.agent = agent
        self.durable = durable
        self.lease_ttl_ms = lease_ttl_ms

    @property
    def capabilities(self) -> Capabilities:
        if self.durable:
            return Capabilities("strict", "strict", "strict")
        return Capabilities("best_effort", "best_effort", "unsupported")

    def run(
        self,
        run_id: str | None = None,
        *,
        parents: list[str] | None = None,
        resume: bool = False,
        lease_wait_ms: int = 0,
        acknowledged: int = 0,
        **fields: Any,
    ) -> Run:
        """A run, to be used as a context manager: it holds its lease while the block runs.

        With `resume=True` the run continues its stream: recorded results are returned instead of
        calling tools again. `lease_wait_ms` waits that long for a crashed holder's lease to expire.
        `acknowledged`: the run's `version` as last seen acknowledged (kept by the caller with its
        own state); a resume that finds a shorter stream raises HistoryRewound instead of calling
        again what a failover made the ledger forget.
        """
        if resume and not self.durable:
            raise LedgerError("a telemetry-only recorder cannot resume: it claims no recovery")
        run = Run(
            self, run_id or uuid.uuid4().hex[:12], parents or [], resume, lease_wait_ms, fields
        )
        run.version = acknowledged
        return run

    def recover(self, run_id: str) -> Recovery:
        """The newest snapshot of the run `run_id` and the events after it, read without
        taking the run's lease (`Run.recovered` is the same, for a resumed run)."""
        run = Run(self, run_id, [], True, 0, {})
        self.store.run_op(run.load_op())
        return run.recovered


class Run:
    """One semantic execution by an agent; its events go to the stream `run-<run_id>`."""

    def __init__(  # noqa: PLR0913  (a run's identity and its recovery, each said once)
        self,
        recorder: Recorder,
        run_id: str,
        parents: list[str],
        resume: bool,
        lease_wait_ms: int,
        fields: JSONObject,
    ):
        self.recorder = recorder
        self.run_id = run_id
        self.stream = StreamId(recorder.session_id, f"run-{run_id}")
        self.native = StreamId(recorder.session_id, f"native-{run_id}")
        self._parents = parents
        self._resume = resume
        self._lease_wait_ms = lease_wait_ms
        self._fields = fields
        self._owner = uuid.uuid4().hex
        # The run's lease as this execution holds it, once taken: every write names it, so a
        # write made after the holding is over (a process stopped past its TTL) is refused.
        self._fence: Fence | None = None
        self._history = _History()
        self._calls = 0
        self._said = 0  # messages and mutations this execution wrote (or found, resumed)
        self._checkpoints = 0
        self._declared: set[str] = set()
        self._lost = threading.Event()
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self.version = 0
        # The version of this incarnation's run.started: 1 for a run id used once. A run id used
        # again starts a new incarnation, and its attempt ids carry it, so that no attempt id is
        # ever recorded twice in a stream (a flag or a resolution names exactly one attempt).
        self._incarnation = 1

    # -- lifetime ---------------------------------------------------------------------------

    @property
    def lease_name(self) -> str:
        return f"run-{self.run_id}"

    # Each step is an operation (store/steps.py) on the recorder's store, run here by the store's
    # own driver and by ledger_bus.agent.aio.AsyncRun on an asyncio one: the rules are written once.

    def _drive(self, op: Op[Any]) -> Any:
        return self.recorder.store.run_op(op)

    def __enter__(self) -> Run:
        self._drive(self.acquire_op())
        self._renewer = threading.Thread(
            target=self._renew, name=f"lease-{self.run_id}", daemon=True
        )
        self._renewer.start()
        try:
            self._drive(self.start_op())
        except BaseException:
            self._stop_renewing_and_release()  # no block will run, and __exit__ is not called
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            self._drive(self.finish_op(err))
        finally:
            self._stop_renewing_and_release()

    def acquire_op(self) -> Op[None]:
        """Take the run's lease, waiting up to lease_wait_ms for a crashed holder's to expire."""
        store, session = self.recorder.attempts, self.recorder.session_id
        deadline = time.monotonic() + self._lease_wait_ms / 1000
        ttl = self.recorder.lease_ttl_ms
        while not (
            token := (yield from store.acquire_lease_op(session, self.lease_name, self._owner, ttl))
        ):
            if time.monotonic() >= deadline:
                raise LedgerError(f"run {self.run_id} is held by another live process")
            yield Sleep(min(0.2, ttl / 5000))
        self._fence = Fence(self.lease_name, self._owner, token)

    def start_op(self) -> Op[None]:
        """With the lease held: read the history to resume from, then record the start."""
        if self._resume:
            yield from self.load_op()
        else:
            self.version = yield from self.recorder.store.stream_version_op(self.stream)
            self._incarnation = self.version + 1  # the version its run.started will take
        yield from self.write_op(
            {
                "type": "mutation",
                "kind": "run.resumed" if self._resume else "run.started",
                "capabilities": self.recorder.capabilities.to_dict(),
                **self._fields,
            },
            parents=self._parents,
        )

    def finish_op(self, err: BaseException | None) -> Op[None]:
        """Record how the run ended (not after its lease was lost: it may not write then)."""
        if not isinstance(err, LeaseLost) and not self._lost.is_set():
            status = "ok" if err is None else "error"
            extra = {} if err is None else {"error": f"{type(err).__name__}: {err}"}
            yield from self.write_op(
                {"type": "mutation", "kind": "run.finished", "status": status, **extra}
            )

    def release_op(self) -> Op[bool]:
        store, session = self.recorder.attempts, self.recorder.session_id
        return bool((yield from store.release_lease_op(session, self.lease_name, self._owner)))

    def renew_op(self) -> Op[bool]:
        """Renew the lease once; False (and the run may not write any more) when it was lost.
        A renewal that fails to reach the store is retried at the next one."""
        store, session = self.recorder.attempts, self.recorder.session_id
        ttl = self.recorder.lease_ttl_ms
        try:
            if not (yield from store.renew_lease_op(session, self.lease_name, self._owner, ttl)):
                log.error("run %s lost its lease", self.run_id)
                self._lost.set()
                return False
        except LedgerError:
            log.warning("run %s could not renew its lease; retrying", self.run_id)
        return True

    def _stop_renewing_and_release(self) -> None:
        """Stop renewing the lease and release it."""
        self._stop.set()
        if self._renewer:
            self._renewer.join()
        self._drive(self.release_op())

    def _renew(self) -> None:
        while not self._stop.wait(self.recorder.lease_ttl_ms / 3000):
            if not self._drive(self.renew_op()):
                return

    # -- writing ----------------------------------------------------------------------------

    def _write(self, event: JSONObject, parents: list[str] | None = None) -> str:
        """Append one event to the run's stream and return its event id."""
        return str(self._drive(self.write_op(event, parents)))

    def write_op(self, event: dict[str, Any], parents: list[str] | None = None) -> Op[str]:
        if self._lost.is_set():
            raise LeaseLost(f"run {self.run_id} lost its lease; it may not write any more")
        event = {"agent": self.recorder.agent, "run_id": self.run_id, **event}
        if parents:
            event["parents"] = parents
        append_id = f"{self.run_id}:{self.version + 1}"
        # Known before the write: the ledger derives it from the append (ids.derive_event_id).
        event_id = event.get("event_id") or derive_event_id(
            self.recorder.session_id, self.stream.name, append_id, 0
        )
        try:
            result = yield from self.recorder.store.append_op(
                self.stream, self.version, append_id, [event], fence=self._fence
            )
        except LeaseLost:
            self._lost.set()  # whatever else this execution had queued is refused too
            raise
        except DurabilityNotConfirmed as err:
            # The primary has it: the run's next event follows it, whatever becomes of this one.
            if isinstance(err.result, AppendResult):
                self.version = err.result.last_version
            if self.recorder.durable:
                raise
            return event_id
        except LedgerError:
            if self.recorder.durable:
                raise
            log.warning("telemetry write of %s failed; going on", event.get("kind", event["type"]))
            return event_id
        self.version = result.last_version
        return event_id

    def message(self, body: str, **ids: Any) -> str:
        """Record that this agent said something; returns the event id."""
        return str(self._drive(self.say_or_replay_op({"type": "message", "body": body, **ids})))

    def mutate(self, kind: str, **fields: Any) -> str:
        """Record a change of session state; the log, not a side field, is its source of truth."""
        return str(self._drive(self.say_or_replay_op({"type": "mutation", "kind": kind, **fields})))

    def say_or_replay_op(self, event: JSONObject) -> Op[str]:
        """Write the run's next message or mutation, unless it is a resumed run's replay of
        one: the n-th that the run says is the n-th it said before the crash, and when that
        one is recorded with the same content, its event id is returned and nothing is
        written, as a call recorded before is not called again. A run that says something
        else at that point has gone another way, and what it says now is written."""
        position = self._said
        self._said += 1
        said = self._history.said
        if position < len(said) and _what_was_said(said[position].fields) == _what_was_said(event):
            return said[position].event_id
        return (yield from self.write_op(event))

    def snapshot(self, state: dict[str, Any]) -> None:
        """Keep the loop's state (JSON), whole, in the run's own native stream: on resume,
        `recovered` gives the newest snapshot and the run's events after it ("snapshot plus
        tail replay"), so a loop rebuilds its state without replaying its whole history."""
        self._drive(self.snapshot_op(state))

    def snapshot_op(self, state: dict[str, Any]) -> Op[None]:
        # Numbered within the run's version, so that two checkpoints with nothing written in
        # between are two appends, not one append_id used for two states.
        self._checkpoints += 1
        append_id = f"{self.run_id}:native:{self.version}:{self._checkpoints}"
        event = {
            "type": "mutation",
            "agent": self.recorder.agent,
            "run_id": self.run_id,
            "kind": "native.checkpoint",
            "run_version": self.version,
            "state": state,
        }
        try:
            yield from self.recorder.store.append_op(
                self.native, ANY, append_id, [event], fence=self._fence
            )
        except LeaseLost:
            self._lost.set()
            raise

    @property
    def restored_state(self) -> JSONObject | None:
        """On resume: the last snapshot written before the crash, if any."""
        return self._history.checkpoint

    @property
    def recovered(self) -> Recovery:
        """On resume: the newest snapshot and the events this run recorded after it."""
        history = self._history
        after = [e for e in history.events if e.version > history.checkpoint_version]
        return Recovery(history.checkpoint, after)

    # -- calls ------------------------------------------------------------------------------

    def call(
        self,
        tool: str,
        args: dict[str, Any],
        fn: Callable[..., Any],
        *,
        safe_to_replay: bool = False,
        step: str | None = None,
    ) -> Any:  # the tool's own result, or on a replay the JSON recorded of it
        """Call `fn(**args)` as the tool `tool`, recorded: request committed first, then the result.

        Args:
            tool: the tool's name.
            args: its arguments, as JSON.
            fn: what runs the tool.
            safe_to_replay: whether running it twice is harmless; recovery re-runs only these.
            step: the logical step this call belongs to; by default the run's n-th call.
        """
        done, found = self._drive(self.begin_call_op(tool, args, safe_to_replay, step))
        if done:
            return found
        try:
            with calling(self.current_call(found)):
                value = fn(**args)
        except Exception as err:
            self._drive(self.end_call_op(found, "error", failure(err)))
            raise
        self._drive(self.end_call_op(found, "ok", value))
        return value

    def begin_call_op(
        self, tool: str, args: dict[str, Any], safe_to_replay: bool, step: str | None
    ) -> Op[tuple[bool, Any]]:
        """Before a call: (True, its recorded value) for a step this run did before (resumed),
        else (False, the Attempt) once its request is committed. RequestNotRecorded: the request
        could not be committed, and the tool must not run."""
        self._calls += 1
        step_id = step or f"{self.run_id}/c{self._calls}"
        earlier = self._history.attempts.get(step_id, [])
        if earlier:
            replayed = yield from self._replay_op(step_id, earlier, safe_to_replay)
            if replayed is not _RUN_AGAIN:
                return True, replayed
        attempt_id = self._attempt_id(step_id, len(earlier) + 1)
        key = idempotency_key(self.recorder.session_id, self.run_id, step_id, self._incarnation)
        if safe_to_replay and tool not in self._declared:
            # Unsafe is the default; a tool safe to run twice says so once per run, before its
            # first request, so that whoever finds its attempt unresolved knows.
            yield from self.write_op(
                {"type": "mutation", "kind": "tool.declared", "tool": tool, "safe_to_replay": True}
            )
            self._declared.add(tool)
        try:
            call_id = yield from self._request_op(tool, args, attempt_id, step_id, key)
        except DurabilityNotConfirmed as err:
            # Written on the primary but not confirmed as durable as the store asks: a failover
            # could lose it, and a tool run on an unconfirmed request could run again unseen.
            raise RequestNotRecorded(
                f"{tool} was not called: its request was written but not confirmed durable: {err}"
            ) from err
        except LedgerError as err:
            raise RequestNotRecorded(
                f"{tool} was not called: its request was not recorded: {err}"
            ) from err
        return False, Attempt(tool, attempt_id, step_id, call_id, key, args)

    def current_call(self, attempt: Attempt) -> CurrentCall:
        """The begun call as its tool sees it (`ledger_bus.current_call()` while it runs)."""
        return CurrentCall(
            attempt.tool,
            self.recorder.session_id,
            self.run_id,
            attempt.step_id,
            attempt.attempt_id,
            attempt.idempotency_key,
            attempt.args,
        )

    def end_call_op(self, attempt: Attempt, status: str, value: object) -> Op[None]:
        """After a call: its outcome. OutcomeNotRecorded: it could not be committed."""
        yield from self._result_op(
            attempt.tool, attempt.attempt_id, attempt.step_id, attempt.call_id, status, value
        )

    def _attempt_id(self, step_id: str, number: int) -> str:
        """`<step>#<n>` for the n-th attempt at a step; `<step>#<n>@<v>` in a later incarnation of
        the run id, whose run.started has version v."""
        if self._incarnation == 1:
            return f"{step_id}#{number}"
        return f"{step_id}#{number}@{self._incarnation}"

    def _request_op(
        self, tool: str, args: dict[str, Any], attempt_id: str, step_id: str, key: str
    ) -> Op[str]:
        """Commit a call's tool_call; returns its event id."""
        return (yield from self.write_op(request_event(tool, args, attempt_id, step_id, key)))

    def _result_op(  # noqa: PLR0913  (a tool_result's fields, each said once)
        self, tool: str, attempt_id: str, step_id: str, call_id: str, status: str, value: object
    ) -> Op[None]:
        try:
            event = result_event(tool, attempt_id, step_id, status, value)
            yield from self.write_op(event, parents=[call_id])
        except LedgerError as err:
            raise OutcomeNotRecorded(
                f"{tool} ran (attempt {attempt_id}) but its result was not recorded: {err}"
            ) from err

    def _replay_op(self, step_id: str, earlier: list[RecordedEvent], safe: bool) -> Op[Any]:
        for call in earlier:
            result = self._history.results.get(str(call["attempt_id"]))
            if result is None or abandoned(result) or not_done(result):
                continue
            if result["status"] == "ok":
                return result.get("result")
            raise ToolFailed(f"{call['tool']} failed when first run: {result.get('result')}")
        latest = earlier[-1]
        if not_done(self._history.results.get(str(latest["attempt_id"]))):
            # A probe found that the last attempt's effect never took place: calling again is
            # what the step needs, safe to replay or not, and the key it carries again makes a
            # late first attempt harmless.
            return _RUN_AGAIN
        if not safe:
            raise UnresolvedAttempt(str(latest["attempt_id"]), str(latest["tool"]))
        # Safe to replay: close the abandoned attempt explicitly (unless a crash right after its
        # close left it closed), then run a new one.
        if str(latest["attempt_id"]) not in self._history.results:
            yield from self.write_op(abandoned_event(latest, step_id), parents=[latest.event_id])
        return _RUN_AGAIN

    def load_op(self) -> Op[None]:
        """Read the run's history, to resume from."""
        store = self.recorder.store
        history = _History()
        for event in (yield from store.read_stream_op(self.stream)):
            history.version = event.version
            if event.type == "mutation" and event.get("kind") == "run.started":
                # An earlier incarnation of this run id is another execution: what its steps got
                # is not this one's to replay.
                history.attempts.clear()
                history.results.clear()
                history.said.clear()
                history.events.clear()
                self._incarnation = event.version
            if event.type != "mutation" or event.get("kind") not in LIFECYCLE:
                history.events.append(event)
            if event.type == "tool_call":
                history.attempts.setdefault(str(event.step_id), []).append(event)
            elif event.type == "tool_result":
                history.results[str(event.attempt_id)] = event
            elif event.get("kind") not in LIFECYCLE:
                history.said.append(event)
        # Only the last checkpoint counts; each holds a whole state, so the others are not read.
        last = yield from store.stream_version_op(self.native)
        if last:
            (checkpoint,) = yield from store.read_stream_op(self.native, after_version=last - 1)
            taken_at = int(checkpoint.get("run_version") or 0)
            if taken_at >= self._incarnation:  # not an earlier run's under this id
                history.checkpoint, history.checkpoint_version = checkpoint["state"], taken_at
        if history.version < self.version:
            raise HistoryRewound(str(self.stream), self.version, history.version)
        self._history = history
        self.version = history.version

    # -- delegation -------------------------------------------------------------------------

    def delegate(self, agent: str, objective: str, child_run_id: str | None = None) -> Delegation:
        """Ask another agent to do something: a `delegate` call whose child run links back to it.

        The child, in any process, runs
        `Recorder(...).run(d.child_run_id, parents=[d.call_event_id])`, and
        `finish_delegation` records the outcome of the call here. On resume, a delegation the
        run already asked for is returned as recorded, with the same child run, and not asked
        again.
        """
        found: Delegation = self._drive(self.delegate_op(agent, objective, child_run_id))
        return found

    def delegate_op(
        self, agent: str, objective: str, child_run_id: str | None = None
    ) -> Op[Delegation]:
        self._calls += 1
        step_id = f"{self.run_id}/c{self._calls}"
        attempt_id = self._attempt_id(step_id, 1)
        for earlier in self._history.attempts.get(step_id, []):
            if earlier["tool"] == "delegate":
                child = str(earlier["args"]["child_run"])
                return Delegation(step_id, attempt_id, child, earlier.event_id, agent)
        child = child_run_id or uuid.uuid4().hex[:12]
        args = {"agent": agent, "objective": objective, "child_run": child}
        key = idempotency_key(self.recorder.session_id, self.run_id, step_id, self._incarnation)
        call_id = yield from self._request_op("delegate", args, attempt_id, step_id, key)
        return Delegation(step_id, attempt_id, child, call_id, agent)

    def finish_delegation(self, delegation: Delegation, status: str, result: object) -> None:
        """Record the delegation's outcome, unless a resumed run recorded it before its crash."""
        self._drive(self.finish_delegation_op(delegation, status, result))

    def finish_delegation_op(self, delegation: Delegation, status: str, result: object) -> Op[None]:
        if delegation.attempt_id in self._history.results:
            return
        yield from self._result_op(
            "delegate",
            delegation.attempt_id,
            delegation.step_id,
            delegation.call_event_id,
            status,
            result,
        )


# the recorded call's names (ledger_bus.agent.call_events) too, where they were always found
__all__ = [
    "ABANDONED",
    "DEFAULT_LEASE_MS",
    "LIFECYCLE",
    "Attempt",
    "Capabilities",
    "Delegation",
    "LeaseLost",
    "OutcomeNotRecorded",
    "Recorder",
    "Recovery",
    "RequestNotRecorded",
    "Run",
    "Support",
    "ToolFailed",
    "UnresolvedAttempt",
    "abandoned",
    "abandoned_event",
    "failure",
    "request_event",
    "result_event",
]
