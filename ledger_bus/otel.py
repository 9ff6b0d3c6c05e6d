"""A session as OpenTelemetry spans under the GenAI semantic conventions, sent over OTLP/HTTP
(the `[otel]` extra).

    from ledger_bus.otel import send_spans, spans_of

    send_spans(spans_of(store, "task-42"), "http://127.0.0.1:6006/v1/traces")

This is the public path; the code lives in `ledger_bus.exports.otel`, beside the other exports.
"""

from ledger_bus.exports.otel import (
    CONVENTIONS,
    Options,
    send_spans,
    span_id,
    spans_of,
    streamed,
    trace_id,
)

__all__ = ["CONVENTIONS", "Options", "send_spans", "span_id", "spans_of", "streamed", "trace_id"]
