"""An Agents SDK session's items as the ledger's own events, for timelines and trajectories.

Each item `add_items` is given is written once, beside the item itself (kept whole, the input
to the SDK's own resume), in the same append:

- a user's message, a `message` of the agent `user`; the model's, a `message` of `assistant`;
- a function call, a requested `tool_call` whose attempt is its call id; its output, that
  attempt's `tool_result` (a call a recorded tool ran has both already: not written again);
- anything else (reasoning, web searches, ...) is kept as the item alone.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any


def _text(content: Any) -> str:
    """What a message item says: its text, or the text of its parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") or p.get("refusal") for p in content if isinstance(p, dict)]
        return "".join(p for p in parts if isinstance(p, str))
    return ""


def _args(text: Any) -> dict[str, Any]:
    """A call's arguments as the ledger keeps them: its JSON object, or the text as sent."""
    try:
        found = json.loads(text) if isinstance(text, str) and text else {}
    except ValueError:
        return {"raw": text}
    return found if isinstance(found, dict) else {"value": found}


def item_events(
    items: list[Any],
    event_id: Callable[[int], str],
    names: dict[str, str],
    recorded: dict[str, tuple[str, str | None]],
    agent: str,
) -> list[dict[str, Any]]:
    """The events of `items`, numbered from 0 in their append (`event_id(n)` is the id of the
    n-th). `names`: call id -> tool name, of the calls seen so far (filled in here);
    `recorded`: call id -> the event ids of its request and outcome a recorded tool wrote."""
    events: list[dict[str, Any]] = []
    calls: dict[str, str] = {}

    def add(event: dict[str, Any]) -> str:
        events.append({k: v for k, v in event.items() if v is not None})
        return event_id(len(events) - 1)

    for item in items:
        if not isinstance(item, dict):
            continue
        kind = item.get("type", "message")
        if kind == "message" and item.get("role") in ("user", "system", "developer"):
            add({"type": "message", "agent": str(item["role"]), "body": _text(item.get("content"))})
        elif kind == "message" and item.get("role") == "assistant":
            add({"type": "message", "agent": "assistant", "body": _text(item.get("content"))})
        elif kind == "function_call" and item.get("call_id"):
            call_id, tool = str(item["call_id"]), str(item.get("name") or "tool")
            names[call_id] = tool
            if call_id in recorded:
                calls[call_id] = recorded[call_id][0]
                continue
            calls[call_id] = add(
                {
                    "type": "tool_call",
                    "agent": agent,
                    "tool": tool,
                    "attempt_id": call_id,
                    "args": _args(item.get("arguments")),
                }
            )
        elif kind == "function_call_output" and item.get("call_id"):
            call_id = str(item["call_id"])
            if recorded.get(call_id, ("", None))[1] is not None:
                continue
            call = calls.get(call_id) or recorded.get(call_id, ("", None))[0]
            output = item.get("output")
            add(
                {
                    "type": "tool_result",
                    "agent": agent,
                    "tool": names.get(call_id, "tool"),
                    "attempt_id": call_id,
                    "status": "ok",
                    "result": output if isinstance(output, str) else json.loads(json.dumps(output)),
                    "parents": [call] if call else None,
                }
            )
    return events


def model_events(
    agent: str, run_id: str | None, model: str | None, response: Any, attempt: str
) -> list[dict[str, Any]]:
    """A model response as its model call: a `tool_call` of the tool `model` and its
    `tool_result` (the model, the token usage, the response id), the call its result's parent
    by position (the result's `parents` are filled in by the caller, who knows the ids)."""
    usage = getattr(response, "usage", None)
    record: dict[str, Any] = {}
    if model:
        record["model"] = model
    if usage is not None:
        record["usage"] = {
            "input_tokens": int(getattr(usage, "input_tokens", 0) or 0),
            "output_tokens": int(getattr(usage, "output_tokens", 0) or 0),
            "total_tokens": int(getattr(usage, "total_tokens", 0) or 0),
            "requests": int(getattr(usage, "requests", 0) or 0),
        }
    if getattr(response, "response_id", None):
        record["response_id"] = str(response.response_id)
    ids = {"agent": agent, "run_id": run_id, "attempt_id": attempt, "tool": "model"}
    call = {"type": "tool_call", **ids, "args": {"model": model} if model else {}}
    result = {"type": "tool_result", **ids, "status": "ok", "result": record}
    return [{k: v for k, v in e.items() if v is not None} for e in (call, result)]
