"""`ledger-bus otel --follow`: sessions sent to an OTLP endpoint as they grow.

Each pass looks at the sessions written since the pass before and, for each, sends the spans
settled since the cursor it reached in that session last time (a run by its run.finished, a
call by its result or the reconciler's flag: otel.spans' window), then records the new cursor.
The cursors are kept in the ledger itself, a mutation per session and pass in the follower's
own stream (the session `otel` unless `--state-session` names another, stream
`follow.<name>`), so a follower restarted (or
killed and started again) goes on from where the last recorded pass ended. A pass killed after
sending and before recording sends those spans again: with the same ids, which a viewer keeps
once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from ledger_bus.exports.otel import Options, send_spans, streamed
from ledger_bus.model.ids import ANY, StreamId, check_name
from ledger_bus.model.jsontext import JSONObject
from ledger_bus.store.base import EventStore

STATE_SESSION: Final = "otel"
KIND: Final = "otel.followed"


@dataclass
class Follower:
    """Sends what each session settled since its last pass; `run_pass()` once, `run()` on."""

    store: EventStore
    endpoint: str
    name: str = "default"
    state_session: str = STATE_SESSION
    options: Options = field(default_factory=Options)
    on_pass: Callable[[JSONObject], None] = lambda said: None
    marks: dict[str, str] = field(default_factory=dict)  # session -> the cursor sent through
    since_ms: int = 0  # sessions written since (ms), the pass before's start
    _loaded: bool = False

    def __post_init__(self) -> None:
        check_name(self.state_session, "state session")
        self.stream = StreamId(self.state_session, check_name(f"follow.{self.name}", "name"))

    def _load(self) -> None:
        """The cursors the follower's stream records, the last per session."""
        for event in self.store.read_stream(self.stream):
            if event.get("kind") == KIND:
                self.marks[str(event["followed"])] = str(event["through"])
                self.since_ms = max(self.since_ms, int(event.get("pass_ms", 0)))
        self._loaded = True

    def run_pass(self) -> list[JSONObject]:
        """One pass: what it sent, per session."""
        if not self._loaded:
            self._load()
        started = self.store.now_ms()
        done = []
        for session, last_ms in self.store.sessions():
            if last_ms < self.since_ms - 1000:  # most recent first: the rest are older still
                break
            if session == self.state_session:
                continue
            said = self._follow(session, started)
            if said is not None:
                done.append(said)
                self.on_pass(said)
        self.since_ms = started
        return done

    def _follow(self, session: str, pass_ms: int) -> JSONObject | None:
        through = self.store.session_info(session).last_cursor
        after = self.marks.get(session)
        if through is None or (after is not None and through <= after):
            return None
        sent = send_spans(
            streamed(self.store, session, self.options, (after, through)), self.endpoint
        )
        mark = {
            "type": "mutation",
            "agent": "otel-follower",
            "kind": KIND,
            "followed": session,  # `session` is the ledger's own field
            "through": through,
            "spans": sent,
            "pass_ms": pass_ms,
        }
        self.store.append(self.stream, ANY, f"{session}:{through}", [mark])
        self.marks[session] = through
        return {"session": session, "through": through, "spans": sent}

    def run(self, stop: threading.Event, every_s: float = 1.0) -> None:
        """Pass after pass until `stop` is set."""
        while not stop.is_set():
            self.run_pass()
            stop.wait(every_s)
