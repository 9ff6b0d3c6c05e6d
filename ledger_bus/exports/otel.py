"""A session as OpenTelemetry spans under the GenAI semantic conventions (v1.44, as
opentelemetry-semantic-conventions 0.66b2 names them), sent over OTLP/HTTP (protobuf) to the
trace viewers people use: Phoenix, Langfuse, Jaeger, Grafana Tempo.

From the session's runs tree (trajectory.py) and its calls, read as a stream in two passes
(the runs, then the calls, each span given as soon as its event settles it), so a session of
any length is sent in bounded memory:
- each run an `invoke_agent {agent}` span, from its run.started to its run.finished (or its
  last event), a child of the run that delegated it;
- each model call a `chat {model}` span with the model and the token usage;
- each tool call an `execute_tool {tool}` span from its request to its result, `error.type`
  for an error result; its arguments and result only when asked (`content=True`, the
  conventions' opt-in). A call with no result is a span of no length whose
  `ledger.call.status` says `unresolved` or `flagged`.
A call's parent is its run's span (or the span of the run whose model asked for it).

The trace id is made from the session id and each span id from the event or run it stands for,
so exporting a session twice sends the same spans, which a viewer keeps once.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from ledger_bus.agent.filters import is_native
from ledger_bus.exports.trajectory import (
    MODEL,
    Builder,
    Call,
    Run,
    Session,
    key,
    model_cost,
    model_name,
)
from ledger_bus.model.errors import BackendUnavailable
from ledger_bus.model.extras import needs
from ledger_bus.model.records import RecordedEvent
from ledger_bus.store.base import EventStore

try:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags
except ImportError as err:  # the [otel] extra
    raise needs(err, "ledger_bus.otel") from None

CONVENTIONS: Final = "1.44.0"  # the GenAI semantic conventions these spans follow
SERVICE: Final = "ledger-bus"
UNKNOWN_PROVIDER: Final = "_OTHER"  # the conventions' value where the provider is not known
BATCH: Final = 512  # spans an export request carries
WAITING: Final = 1000  # settled calls held for the model call that asked for them, at most


@dataclass(frozen=True)
class Options:
    """content: the tools' arguments and results, and the calls' outcomes, as attributes (the
    conventions' opt-in: they may hold what a viewer should not)."""

    content: bool = False
    service: str = SERVICE


def spans_of(
    store: EventStore, session_id: str, options: Options = Options()
) -> list[ReadableSpan]:
    """The spans of a session (NotFound when it does not exist)."""
    return list(streamed(store, session_id, options))


def streamed(
    store: EventStore,
    session_id: str,
    options: Options = Options(),
    window: tuple[str | None, str] | None = None,
) -> Iterator[ReadableSpan]:
    """The spans of a session, read a page at a time, twice: first the
    runs tree, then the calls, each span given as soon as it is settled. What is held between
    is the runs, the calls still open, and the calls whose run is not yet known (a recorded
    tool's, until the model call that asked for it comes; at most WAITING of them)."""
    store.session_info(session_id)  # NotFound, before anything is read
    runs = Builder(session_id)
    for event in store.iter_session(session_id):
        runs.add(event)
    session = runs.tree()
    yield from _Spans(session, options, window).spans(store.iter_session(session_id))


def trace_id(session_id: str) -> int:
    """The trace id of a session's spans: the same at every export, so a session exported
    twice, or followed, lands in one trace."""
    return _id(b"trace", session_id, 16)


def span_id(kind: str, key: str) -> int:
    """The id of the span of `kind` (a run, a call) named by `key`: the same at every export."""
    return _id(kind.encode(), key, 8)


def _id(kind: bytes, key: str, size: int) -> int:
    digest = hashlib.sha256(kind + b"\x1f" + key.encode()).digest()[:size]
    return int.from_bytes(digest, "big") or 1  # an id of zeros is no id


class _Spans:
    """Spans as a session's events settle them, in one pass over its events; with `window`
    (after, through), only those settled by an event after the first cursor and up to the
    second: a run by its run.finished, a call by its result or the reconciler's flag (what a
    follower sends once, pass by pass)."""

    def __init__(self, session: Session, options: Options, window: tuple[str | None, str] | None):
        self.session, self.options, self.window = session, options, window
        self.flags = session.flags
        self.trace = trace_id(session.session_id)
        self.resource = Resource.create({"service.name": options.service})
        self.scope = InstrumentationScope("ledger_bus.otel", schema_url=_schema())
        self.out: list[ReadableSpan] = []

    def _settled(self, at: str | None) -> bool:
        if self.window is None:
            return True
        after, through = self.window
        return at is not None and (after is None or at > after) and at <= through

    def _context(self, span: int) -> SpanContext:
        return SpanContext(self.trace, span, False, TraceFlags(TraceFlags.SAMPLED))

    def _run_span(self, run_id: str | None) -> SpanContext | None:
        run = self.session.runs.get(run_id or "")
        if run is None or not run.run_id or run.started is None:
            return None
        return self._context(span_id("run", run.run_id))

    def _span(  # noqa: PLR0913  (a span's own fields, one parameter each)
        self,
        name: str,
        span: int,
        parent: SpanContext | None,
        start: datetime,
        end: datetime,
        attributes: dict[str, Any],
        error: str | None = None,
    ) -> None:
        attributes = {"gen_ai.conversation.id": self.session.session_id, **attributes}
        self.out.append(
            ReadableSpan(
                name=name,
                context=self._context(span),
                parent=parent,
                resource=self.resource,
                attributes={k: v for k, v in attributes.items() if v is not None},
                kind=SpanKind.INTERNAL,
                start_time=_ns(start),
                end_time=max(_ns(end), _ns(start)),
                status=Status(StatusCode.ERROR, error) if error else Status(StatusCode.UNSET),
                instrumentation_scope=self.scope,
            )
        )

    def run(self, run: Run) -> None:
        assert run.started is not None
        if not self._settled(run.ended_at):
            return
        end = run.ended or run.last or run.started
        agent = run.agent or "agent"
        self._span(
            f"invoke_agent {agent}",
            span_id("run", run.run_id),
            self._run_span(run.parent),
            run.started,
            end,
            {
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.provider.name": UNKNOWN_PROVIDER,
                "gen_ai.agent.name": agent,
                "gen_ai.agent.id": run.run_id,
                "ledger.run.status": run.status or "running",
                "error.type": "run_error" if run.status == "error" else None,
            },
            error="the run ended in error" if run.status == "error" else None,
        )

    def model(self, call: Call) -> None:
        if not self._settled(call.closed_at):
            return
        result = call.result.get("result") if call.result is not None else None
        said = result if isinstance(result, dict) else {}
        model, cost = model_name(call), model_cost(call)
        self._span(
            f"chat {model}" if model else "chat",
            span_id("event", call.event.event_id),
            self._run_span(call.event.run_id),
            call.event.recorded_at,
            call.result.recorded_at if call.result is not None else call.event.recorded_at,
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": said.get("provider") or UNKNOWN_PROVIDER,
                "gen_ai.request.model": model,
                "gen_ai.usage.input_tokens": cost.get("prompt_tokens"),
                "gen_ai.usage.output_tokens": cost.get("completion_tokens"),
                "gen_ai.response.finish_reasons": (
                    [said["finish_reason"]] if said.get("finish_reason") else None
                ),
            },
        )

    def call(self, call: Call, parent: SpanContext | None) -> None:
        if not self._settled(call.closed_at):
            return
        failed = call.result is not None and call.result.get("status") != "ok"
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": call.tool,
            "gen_ai.tool.call.id": call.attempt,
            "gen_ai.tool.type": "function",
            "ledger.call.status": call.status,
            "error.type": "tool_error" if failed else None,
        }
        if self.options.content:
            attributes["gen_ai.tool.call.arguments"] = _json(call.event.get("args"))
            if call.result is not None:
                attributes["gen_ai.tool.call.result"] = _json(call.result.get("result"))
        end = call.result.recorded_at if call.result is not None else call.event.recorded_at
        self._span(
            f"execute_tool {call.tool}",
            span_id("event", call.event.event_id),
            parent,
            call.event.recorded_at,
            end,
            attributes,
            error="the tool failed" if failed else None,
        )

    def spans(self, events: Iterable[RecordedEvent]) -> Iterator[ReadableSpan]:
        opened: dict[str, RecordedEvent] = {}  # key(run, attempt) -> a call without a result
        done: set[int] = set()  # hashes of the keys of calls settled (a request written again)
        asked: dict[str, str | None] = {}  # attempt -> the run of the model call asking for it
        waiting: OrderedDict[str, Call] = OrderedDict()  # attempt -> a settled call, no parent
        last: dict[str, datetime] = {}  # run -> its latest event
        for event in events:
            if is_native(event):
                continue
            if event.run_id:
                last[event.run_id] = event.recorded_at
            if event.type not in ("tool_call", "tool_result"):
                continue
            attempt = str(event.attempt_id)
            found = key(event.run_id, attempt)
            if event.type == "tool_call":
                if found not in opened and hash(found) not in done:
                    opened[found] = event
                continue
            call = Call(opened.pop(found, event), result=event)
            call.flagged_at = self.flags.get(attempt)
            done.add(hash(found))
            self._answered(call, attempt, asked, waiting)
            yield from self._flush()
        self._unsettled(opened, waiting, asked)
        for run in self.session.runs.values():
            if run.run_id and run.started is not None:
                run.last = last.get(run.run_id)
                self.run(run)
        yield from self._flush()

    def _answered(
        self,
        call: Call,
        attempt: str,
        asked: dict[str, str | None],
        waiting: OrderedDict[str, Call],
    ) -> None:
        """A call with its result: a model call, then the calls it asked for that wait for it;
        a tool's, under its run or the model call that asked for it (held until that comes)."""
        if call.tool == MODEL:
            self.model(call)
            reply = call.result.get("result") if call.result is not None else None
            for child in reply.get("tool_calls", []) if isinstance(reply, dict) else ():
                asked[str(child)] = call.event.run_id
                if str(child) in waiting:
                    self._settle(waiting.pop(str(child)), asked)
        elif self._run_span(call.event.run_id) is None and attempt not in asked:
            waiting[attempt] = call  # its model call may come after it (a recorded tool)
            if len(waiting) > WAITING:
                self._settle(waiting.popitem(last=False)[1], asked)
        else:
            self._settle(call, asked)

    def _unsettled(
        self,
        opened: dict[str, RecordedEvent],
        waiting: OrderedDict[str, Call],
        asked: dict[str, str | None],
    ) -> None:
        """What the session ends with: the calls still waiting for their model call, and
        those never settled (unresolved, or flagged)."""
        for call in waiting.values():
            self._settle(call, asked)
        for event in opened.values():
            call = Call(event)
            call.flagged_at = self.flags.get(str(event.attempt_id))
            call.flagged = call.flagged_at is not None
            if call.tool == MODEL:
                self.model(call)
            else:
                self._settle(call, asked)

    def _settle(self, call: Call, asked: dict[str, str | None]) -> None:
        parent = self._run_span(call.event.run_id) or self._run_span(asked.pop(call.attempt, None))
        self.call(call, parent)

    def _flush(self) -> Iterator[ReadableSpan]:
        yield from self.out
        self.out.clear()


def send_spans(spans_: Iterable[ReadableSpan], endpoint: str, timeout: float = 10.0) -> int:
    """Send spans to an OTLP/HTTP endpoint (its /v1/traces), protobuf, BATCH at a time as they
    come; how many were sent. BackendUnavailable when it does not take them."""
    # The exporter (protobuf, an HTTP client) is loaded when spans are sent, not when they
    # are only built.
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # noqa: PLC0415
        OTLPSpanExporter,
    )
    from opentelemetry.sdk.trace.export import SpanExportResult  # noqa: PLC0415

    exporter = OTLPSpanExporter(endpoint=_traces_url(endpoint), timeout=timeout)
    sent = 0

    def send(batch: list[ReadableSpan]) -> None:
        if batch and exporter.export(batch) is not SpanExportResult.SUCCESS:
            raise BackendUnavailable(f"the OTLP endpoint {endpoint} did not take the spans")

    try:
        batch: list[ReadableSpan] = []
        for span in spans_:
            batch.append(span)
            if len(batch) >= BATCH:
                send(batch)
                sent, batch = sent + len(batch), []
        send(batch)
        return sent + len(batch)
    finally:
        exporter.shutdown()  # type: ignore[no-untyped-call]


def _traces_url(endpoint: str) -> str:
    base = endpoint.rstrip("/")
    return base if base.endswith("/v1/traces") else f"{base}/v1/traces"


def _schema() -> str:
    return f"https://opentelemetry.io/schemas/{CONVENTIONS}"


def _ns(at: datetime) -> int:
    return int(at.timestamp() * 1000) * 1_000_000


def _json(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


__all__ = ["CONVENTIONS", "Options", "send_spans", "span_id", "spans_of", "streamed", "trace_id"]
