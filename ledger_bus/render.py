"""How events look to machines (one JSON object a line) and to people (a line of text)."""

from __future__ import annotations

from typing import Any, Final

import orjson

from ledger_bus.ids import cursor_ms
from ledger_bus.store.base import RecordedEvent, format_time

_COMMON: Final = frozenset(
    {"type", "agent", "event_id", "run_id", "step_id", "attempt_id", "parents"}
)


def jsonl(obj: Any) -> str:
    """One JSON object on one line: JSON escapes every line break inside strings."""
    return orjson.dumps(obj).decode("utf-8")


def event_line(event: RecordedEvent) -> str:
    """An event as one line of the JSONL format, newline included: what export and the mirror
    write, and `ledger-bus scan` prints."""
    return jsonl(event.to_dict()) + "\n"


def _short(value: Any, width: int) -> str:
    text = value if isinstance(value, str) else jsonl(value)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def summary(fields: dict[str, Any], width: int = 160) -> str:
    """What an event says, in one line of text."""
    kind = fields.get("type")
    if kind == "message":
        return _short(fields.get("body", ""), width)
    if kind == "tool_call":
        return _short(f"{fields.get('tool')}({jsonl(fields.get('args', {}))})", width)
    if kind == "tool_result":
        return _short(
            f"{fields.get('tool')} -> {fields.get('status')}: {jsonl(fields.get('result'))}", width
        )
    extra = {k: v for k, v in fields.items() if k not in _COMMON and k != "kind"}
    return _short(f"{fields.get('kind')} {jsonl(extra) if extra else ''}".strip(), width)


def context_line(event: RecordedEvent, width: int = 200) -> str:
    """A compact line for a model's context: time, who, what."""
    at = format_time(cursor_ms(event.cursor))[11:19]
    return f"{at} {event.agent} {event.type}: {summary(event.fields, width)}"
