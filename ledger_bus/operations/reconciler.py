"""The reconciler: finds requested calls that will never finish, and flags each one exactly once.

An attempt is unresolved when its `tool_call` has no `tool_result`, its run is not alive (the
run's lease expired, or it never had one), and it is older than the grace period. The reconciler
never runs a tool. For a tool with a probe (probes.py) it asks the probe, holding the run's lease
meanwhile so that neither the run nor another reconciler moves: done or not done settle the call
with a terminal event carrying the evidence; unknown flags it. Any other unresolved attempt is
flagged with a `reconcile.unresolved` mutation in the session's `reconciler` stream: what to do
about it is an operator's or adapter's decision (`resolve_attempt`).

Its work grows with the open attempts, not with history: the append script keeps each session's
open attempts, and an index lists the sessions that may have some.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Final

from ledger_bus.agent.rewind import report_rewind
from ledger_bus.model.errors import (
    HistoryRewound,
    IdempotencyConflict,
    InvalidEvent,
    LeaseLost,
    LedgerError,
)
from ledger_bus.model.ids import ANY, StreamId, previous_cursor
from ledger_bus.model.jsontext import JSONObject
from ledger_bus.model.prepared import Fence
from ledger_bus.model.records import AppendResult, OpenAttempt, RecordedEvent
from ledger_bus.operations.heartbeat import write_heartbeat
from ledger_bus.operations.probes import (
    DEFAULT_TIMEOUT_S,
    Probe,
    ProbeCall,
    Probed,
    probe_name,
    run_probe,
    settlement,
)
from ledger_bus.store.base import ArchiveSource, Attempts, EventStore, need
from ledger_bus.store.buckets import INDEX_BUCKETS

log = logging.getLogger("ledger_bus.reconciler")

RECONCILER_STREAM: Final = "reconciler"
# Writers refresh their session's entry in the open-attempts index at most once a minute
# (store.redis.OPEN_INDEX_REFRESH_MS); a shorter prune window could forget a session between two
# refreshes while an attempt opens in it.
MIN_PRUNE_AFTER_S: Final = 120.0
SESSIONS_PER_READ: Final = 200  # sessions whose open attempts are read in one round trip
REMEMBERED_FLAGS: Final = 100_000  # flags one reconciler remembers, to notice them lost
FLAG_KIND: Final = "reconcile.unresolved"


@dataclass(frozen=True)
class ReconcilerConfig:
    """grace_s: how old an open attempt must be before it may be flagged.
    interval_s: the pause between passes.
    prune_after_s: how long a session with nothing open stays in the index: at least
        MIN_PRUNE_AFTER_S, and well above the clock difference between writers and Redis.
    buckets: which of the index's buckets this reconciler covers (default: all).
    sessions: cover only these sessions instead.
    archive_idle_s: with an archive, move the sessions quiet this long to it (archiving.py).
    archive_every_s: how often to look for them, at most.
    probe_timeout_s: how long a probe may take before it counts as unknown.
    reprobe_s: how often, at most, a call its probe could not settle is asked about again."""

    grace_s: float = 60.0
    interval_s: float = 5.0
    prune_after_s: float = 600.0  # at least MIN_PRUNE_AFTER_S outside tests
    buckets: tuple[int, ...] = tuple(range(INDEX_BUCKETS))
    sessions: tuple[str, ...] = ()  # only these sessions, when given (the index is not read)
    agent: str = "reconciler"
    archive_idle_s: float | None = None
    archive_every_s: float = 300.0
    probe_timeout_s: float = DEFAULT_TIMEOUT_S
    reprobe_s: float = 60.0


@dataclass
class PassReport:
    """What one pass saw and did."""

    sessions: int = 0
    open_attempts: int = 0
    flagged: int = 0
    already_flagged: int = 0
    probed: int = 0  # calls a probe was asked about
    settled: int = 0  # of those, settled by this reconciler (done or not done)
    probe_unknown: int = 0  # of those, left for a person (the probe could not tell)
    rewinds: int = 0  # flags this reconciler wrote that a failover lost
    pruned: int = 0
    errors: int = 0
    seconds: float = 0.0
    interrupted: bool = False
    last_error: str | None = None
    last_failure: LedgerError | None = field(default=None, repr=False)

    def failed(self, err: LedgerError) -> None:
        self.errors += 1
        self.last_error, self.last_failure = str(err), err

    def to_dict(self) -> JSONObject:
        out = asdict(self)
        del out["last_failure"]
        return out


def log_action(record: JSONObject) -> None:
    """One structured line per action, on the `ledger_bus.reconciler` logger."""
    log.info(json.dumps(record, ensure_ascii=False, separators=(",", ":")))


@dataclass(frozen=True)
class _Pass:
    """One pass as its sessions see it: the time it is judged by, the sessions it prunes, its
    report, and what stops it."""

    now_ms: int
    prune_before: int
    report: PassReport
    stop: threading.Event | None


@dataclass
class Reconciler:
    """Flags unresolved attempts across every session a store holds."""

    store: EventStore
    config: ReconcilerConfig = field(default_factory=ReconcilerConfig)
    on_action: Callable[[dict[str, Any]], None] = log_action
    metrics: Any = None  # a ReconcilerMetrics, when exported
    archive: EventStore | None = None  # the SQL store idle sessions move to (archive_idle_s)
    probes: dict[str, Probe] = field(default_factory=dict)  # tool name -> its probe

    def __post_init__(self) -> None:
        need(self.store, Attempts)  # it works from open attempts and leases: refused without
        self._flags: dict[str, str] = {}  # attempt key -> cursor of the flag this one wrote
        self._probed: dict[str, float] = {}  # attempt key -> when its probe said unknown
        self._archived_at = -float("inf")  # when idle sessions were last looked for (monotonic)

    def run_alive(self, attempt: OpenAttempt) -> bool:
        if attempt.run_id is None:
            return False  # a plain append takes no lease: nothing will ever finish it
        return self.store.lease_alive(attempt.session_id, f"run-{attempt.run_id}")

    def flag(self, attempt: OpenAttempt, now_ms: int, probe: JSONObject | None = None) -> bool:
        """Flag one attempt (with what its probe said, if it has one); False when some
        reconciler flagged it already."""
        event: JSONObject = {
            "type": "mutation",
            "agent": self.config.agent,
            "kind": FLAG_KIND,
            "attempt_id": attempt.attempt_id,
            "tool": attempt.tool,
            "call_stream": attempt.stream,
            "call_cursor": attempt.cursor,
            "open_for_s": round((now_ms - attempt.opened_ms) / 1000, 3),
            "safe_to_replay": self.store.safe_to_replay(
                attempt.session_id, attempt.run_id, attempt.tool
            ),
        }
        if attempt.run_id:
            event["run_id"] = attempt.run_id
        if probe is not None:
            event["probe"] = probe
        ref = StreamId(attempt.session_id, RECONCILER_STREAM)
        try:
            # One append_id per attempt: of reconcilers racing, one append lands; the others
            # find the id taken (with another `open_for_s`: an idempotency conflict). The call's
            # cursor is part of it: an attempt id used again later is another attempt.
            result = self._append_flag(ref, attempt, event)
        except IdempotencyConflict:
            return False
        if result.deduplicated:
            return False
        if len(self._flags) >= REMEMBERED_FLAGS:
            self._flags.clear()
        self._flags[attempt.key] = result.cursor
        self.on_action(
            {"action": "flag", "session": attempt.session_id, **event, "cursor": result.cursor}
        )
        return True

    def _append_flag(
        self, ref: StreamId, attempt: OpenAttempt, event: dict[str, Any]
    ) -> AppendResult:
        append_id = f"flag:{attempt.key}"
        try:
            return self.store.append(ref, ANY, append_id, [event])
        except HistoryRewound as err:
            # Flags this reconciler wrote were lost by a failover (each one it remembers is
            # reported as its attempt comes up); the flags still to write go on the stream as
            # it now is.
            log.error("%s; flagging on", err)
            err.accept()
            return self.store.append(ref, ANY, append_id, [event])

    def run_pass(self, stop: threading.Event | None = None) -> PassReport:
        """One pass over every session with open attempts; stops between attempts when `stop`
        is set, having written each flag it began whole."""
        started = time.monotonic()
        report = PassReport()
        now_ms = self.store.now_ms()
        prune_before = now_ms - int(self.config.prune_after_s * 1000)
        this = _Pass(now_ms, prune_before, report, stop)
        if self.config.sessions:
            sessions = [(s, now_ms) for s in self.config.sessions]  # never pruned: named
        else:
            sessions = self.store.sessions_with_open_attempts(self.config.buckets)
        for start in range(0, len(sessions), SESSIONS_PER_READ):
            chunk = sessions[start : start + SESSIONS_PER_READ]
            try:
                attempts = self.store.open_attempts_of([s for s, _ in chunk])
            except LedgerError as err:
                report.failed(err)
                self.on_action({"action": "error", "error": str(err)})
                continue
            for session_id, last_opened in chunk:
                if stop is not None and stop.is_set():
                    report.interrupted = True
                    break
                report.sessions += 1
                try:
                    self._session(session_id, attempts[session_id], last_opened, this)
                except LedgerError as err:
                    report.failed(err)
                    self.on_action({"action": "error", "session": session_id, "error": str(err)})
            if report.interrupted:
                break
        report.seconds = round(time.monotonic() - started, 6)
        if self.metrics is not None:
            self.metrics.observe(report)
        return report

    def _session(
        self, session_id: str, attempts: list[OpenAttempt], last_opened: int, this: _Pass
    ) -> None:
        now_ms, prune_before, report, stop = this.now_ms, this.prune_before, this.report, this.stop
        report.open_attempts += len(attempts)
        if not attempts:
            if last_opened < prune_before and self.store.forget_idle_session(
                session_id, prune_before
            ):
                report.pruned += 1
                self.on_action({"action": "forget", "session": session_id})
            return
        grace_ms = self.config.grace_s * 1000
        for attempt in attempts:
            if stop is not None and stop.is_set():
                report.interrupted = True
                return
            lost = self._flags.pop(attempt.key, None) if not attempt.flagged_cursor else None
            if lost is not None:
                # This reconciler flagged it, and the flag is gone: a failover rewound the session.
                report.rewinds += 1
                report_rewind(self.store, session_id, self.config.agent, lost, "a flag")
            if now_ms - attempt.opened_ms < grace_ms:
                continue
            probe = self.probes.get(attempt.tool)
            if probe is not None and self._due(attempt):
                self._probe(attempt, probe, this)
                continue
            if attempt.flagged_cursor or self.run_alive(attempt):
                continue
            if self.flag(attempt, now_ms):
                report.flagged += 1
            else:
                report.already_flagged += 1

    # -- probes ---------------------------------------------------------------------------------

    def _due(self, attempt: OpenAttempt) -> bool:
        """Whether to ask an attempt's probe now: at once the first time, then (while it stays
        flagged, its probe unable to tell) every reprobe_s at most."""
        if not attempt.flagged_cursor:
            return True
        asked = self._probed.get(attempt.key)
        return asked is None or time.monotonic() - asked >= self.config.reprobe_s

    def _probe(self, attempt: OpenAttempt, probe: Probe, this: _Pass) -> None:
        """Ask the probe about one unresolved attempt and act on what it says, holding the run's
        lease meanwhile: a run that resumes, or another reconciler, waits for the lease, so the
        call is settled once and never behind a live run's back. A run holding it is alive."""
        session = attempt.session_id
        fence: Fence | None = None
        if attempt.run_id:
            owner = f"{self.config.agent}-{uuid.uuid4().hex}"
            lease = f"run-{attempt.run_id}"
            ttl_ms = int((self.config.probe_timeout_s + 30) * 1000)
            fence = self.store.hold(session, lease, owner, ttl_ms)
            if fence is None:
                return  # the run is alive (or another reconciler is asking about it)
        try:
            still = {a.key: a for a in self.store.open_attempts(session)}.get(attempt.key)
            if still is None:
                return  # settled or resolved since this pass listed it
            request = self._request(attempt)
            probed = run_probe(probe, ProbeCall.of(attempt, request), self.config.probe_timeout_s)
            this.report.probed += 1
            if probed.state != "unknown":
                try:
                    if self._settle(attempt, request, probed, probe_name(probe), fence):
                        this.report.settled += 1
                    return
                except InvalidEvent as err:
                    probed = Probed.unknown(
                        f"the probe's finding is not JSON the ledger keeps: {err}"
                    )
            this.report.probe_unknown += 1
            if len(self._probed) >= REMEMBERED_FLAGS:
                self._probed.clear()  # forgotten ones are asked again at once: no harm
            self._probed[attempt.key] = time.monotonic()
            said: JSONObject = {
                "name": probe_name(probe),
                "state": "unknown",
                "reason": probed.reason,
            }
            self.on_action(
                {"action": "probe", "session": session, "attempt_id": attempt.attempt_id, **said}
            )
            if not still.flagged_cursor:
                if self.flag(attempt, this.now_ms, probe=said):
                    this.report.flagged += 1
                else:
                    this.report.already_flagged += 1
        finally:
            if fence is not None:
                self.store.release_lease(session, fence.lease, fence.owner)

    def _request(self, attempt: OpenAttempt) -> RecordedEvent:
        """The attempt's tool_call, read at its cursor."""
        found = self.store.scan_session(
            attempt.session_id, after_cursor=previous_cursor(attempt.cursor), limit=1
        )
        if not found or found[0].cursor != attempt.cursor:
            raise LedgerError(f"the tool_call of {attempt.key} is not at its cursor")
        return found[0]

    def _settle(
        self,
        attempt: OpenAttempt,
        request: RecordedEvent,
        probed: Probed,
        probe: str,
        fence: Fence | None,
    ) -> bool:
        """Write the terminal event of a call its probe found done or not done; False when
        another reconciler's settlement of it landed first."""
        found = settlement(probed, probe, self.config.agent, self.store.now_ms())
        event: JSONObject = {
            "type": "tool_result",
            "agent": self.config.agent,
            "tool": attempt.tool,
            "attempt_id": attempt.attempt_id,
            "status": found.status,
            "result": found.result,
            "settled_by": found.settled_by,
            "parents": [request.event_id],
        }
        if attempt.run_id:
            event["run_id"] = attempt.run_id
        if request.step_id:
            event["step_id"] = request.step_id
        ref = StreamId(attempt.session_id, attempt.stream)
        try:
            result = self.store.append(ref, ANY, f"settle:{attempt.key}", [event], fence=fence)
        except IdempotencyConflict:
            return False  # another reconciler's settlement of it landed first
        except LeaseLost as err:
            # The probe outlasted the lease (held for its timeout and 30 s) and the run took it
            # back: its finding is not written; the run decides.
            self.on_action({"action": "error", "session": attempt.session_id, "error": str(err)})
            return False
        if result.deduplicated:
            return False
        self._probed.pop(attempt.key, None)
        self.on_action(
            {
                "action": "settle",
                "session": attempt.session_id,
                "attempt_id": attempt.attempt_id,
                "tool": attempt.tool,
                "state": probed.state,
                "cursor": result.cursor,
                "settled_by": found.settled_by,
            }
        )
        return True

    def run_forever(
        self, stop: threading.Event, heartbeat: str | None = None, once: bool = False
    ) -> PassReport | None:
        """Passes every interval until `stop` is set, writing a heartbeat after each pass; returns
        the last pass's report."""
        report = None
        while not stop.is_set():
            report = self.run_pass(stop)
            self.on_action({"action": "pass", **report.to_dict()})
            if heartbeat:
                write_heartbeat(heartbeat, report.to_dict())
            self.archive_idle(stop)
            if once:
                break
            stop.wait(self.config.interval_s)
        return report

    def archive_idle(self, stop: threading.Event) -> None:
        """Move the sessions quiet for config.archive_idle_s to the archive, one action line
        each, at most every config.archive_every_s; a session that may not move yet is said so
        and left, and a failure is logged, never fatal to the worker."""
        idle_s = self.config.archive_idle_s
        if idle_s is None or self.archive is None or not isinstance(self.store, ArchiveSource):
            return
        now = time.monotonic()
        if now - self._archived_at < self.config.archive_every_s:
            return
        self._archived_at = now
        # Here, not above: the archive brings SQLAlchemy (the [sql] extra), which a reconciler
        # without one never needs to import.
        from ledger_bus.operations.archiving import archive_idle  # noqa: PLC0415

        try:
            for record in archive_idle(self.store, self.archive, idle_s, stop=stop):
                self.on_action({"action": "archive", **record})
        except LedgerError as err:
            self.on_action({"action": "error", "archive": str(err)})
