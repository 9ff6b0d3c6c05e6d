"""An Agents SDK session's items as the ledger's own events, for timelines and trajectories.

Each item `add_items` is given is written once, in one append:

- a user's message, a `message` of the agent `user`; the model's, a `message` of `assistant`;
- a function call, a requested `tool_call` whose attempt is its call id; its output, that
  attempt's `tool_result`;
- anything else (reasoning, web searches, ...), and a call or output a recorded tool wrote its
  events for already, an `agents.item` mutation: the item whole.

The item itself is the input to the SDK's own resume, so it is kept too, but not its text twice:
an append's events come after one `agents.items` mutation holding, for each item written as a
`message`, `tool_call` or `tool_result`, the rest of it: `[d, rest]`, the item's event `d`
versions after the mutation and the item with what that event says left None in its place (a
message's text, a call's arguments as sent, an output's text), or `[-d, item]`, the item whole
where that could not be put back exactly (`whole_item` puts it back). An item is named by the
version of its event (`agents.popped`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Final

from ledger_bus.model.jsontext import JSONObject

ITEM: Final = "agents.item"  # an item alone
RESTS: Final = "agents.items"  # the rest of the items an append's events stand for
# How a call's arguments were sent, when its `args` give them back: `json.dumps`'s spacing
# (None), or without spaces (COMPACT).
COMPACT: Final = 1


def _text(content: object) -> str:
    """What a message item says: its text, or the text of its parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") or p.get("refusal") for p in content if isinstance(p, dict)]
        return "".join(p for p in parts if isinstance(p, str))
    return ""


def _args(text: Any) -> JSONObject:
    """A call's arguments as the ledger keeps them: its JSON object, or the text as sent."""
    try:
        found = json.loads(text) if isinstance(text, str) and text else {}
    except ValueError:
        return {"raw": text}
    return found if isinstance(found, dict) else {"value": found}


def _without_text(item: dict[str, Any]) -> JSONObject | None:
    """A message item with the text its event's `body` holds left None: content that is the
    text, or a list's one text part's `text`; None when the text cannot be put back exactly."""
    content = item.get("content")
    if isinstance(content, str):
        return {**item, "content": None}
    if not isinstance(content, list):
        return None
    texts = [
        n
        for n, part in enumerate(content)
        if isinstance(part, dict) and ("text" in part or "refusal" in part)
    ]
    if len(texts) != 1:
        return None
    part = content[texts[0]]
    if "refusal" in part or not isinstance(part["text"], str):
        return None
    parts = [*content[: texts[0]], {**part, "text": None}, *content[texts[0] + 1 :]]
    return {**item, "content": parts}


def _without_arguments(item: JSONObject, args: JSONObject) -> JSONObject | None:
    """A function call item with its arguments' text left None (or COMPACT), when its `args`
    give it back; else None."""
    sent = item.get("arguments")
    if not isinstance(sent, str):
        return None
    if json.dumps(args, ensure_ascii=False) == sent:
        return {**item, "arguments": None}
    if json.dumps(args, ensure_ascii=False, separators=(",", ":")) == sent:
        return {**item, "arguments": COMPACT}
    return None


def _without_output(item: JSONObject) -> JSONObject | None:
    """A function call's output item with its text (its event's `result`) left None; None
    for an output that is not text."""
    if not isinstance(item.get("output"), str):
        return None
    return {**item, "output": None}


def whole_item(event: JSONObject, item: Any, cut: bool) -> object:
    """The item `event` stands for, as it was given, from what its `agents.items` entry holds:
    the item (`cut` False), or the rest of it, what its event says taken out."""
    if not cut:
        return item
    kind = event["type"]
    if kind == "message":
        content = item["content"]
        if content is None:
            return {**item, "content": event["body"]}
        parts = [
            {**p, "text": event["body"]} if isinstance(p, dict) and "text" in p else p
            for p in content
        ]
        return {**item, "content": parts}
    if kind == "tool_call":  # `args` left out of an event when empty (its default)
        separators = None if item["arguments"] is None else (",", ":")
        return {
            **item,
            "arguments": json.dumps(
                event.get("args", {}), ensure_ascii=False, separators=separators
            ),
        }
    return {**item, "output": event["result"]}


def _said(item: object, recorded: dict[str, tuple[str, str | None]]) -> str | None:
    """The type of the event that says what `item` means; None for an item kept alone."""
    if not isinstance(item, dict):
        return None
    kind, call_id = item.get("type", "message"), str(item.get("call_id") or "")
    if kind == "message" and item.get("role") in ("user", "system", "developer", "assistant"):
        return "message"
    if kind == "function_call" and call_id and call_id not in recorded:
        return "tool_call"
    if kind == "function_call_output" and call_id and recorded.get(call_id, ("", None))[1] is None:
        return "tool_result"
    return None


def item_events(
    items: list[Any],
    event_id: Callable[[int], str],
    names: dict[str, str],
    recorded: dict[str, tuple[str, str | None]],
    agent: str,
) -> list[JSONObject]:
    """The `agents.items` mutation of the rest of `items`, then their events, one an item in
    their order (`event_id(n)` is the id of the n-th event). `names`: call id -> tool name, of
    the calls seen so far (filled in here); `recorded`: call id -> the event ids of its request
    and outcome a recorded tool wrote."""
    said = [_said(item, recorded) for item in items]
    entries: list[list[Any]] = []  # [d, rest] or, for an item kept whole, [-d, item]
    events: list[dict[str, Any]] = []
    if any(said):
        events.append({"type": "mutation", "agent": agent, "kind": RESTS, "items": entries})
    calls: dict[str, str] = {}

    def add(event: dict[str, Any], item: object, rest: JSONObject | None) -> None:
        entries.append([len(events), rest] if rest is not None else [-len(events), item])
        events.append({k: v for k, v in event.items() if v is not None})

    for item, kind in zip(items, said, strict=True):
        call_id = str(item.get("call_id") or "") if isinstance(item, dict) else ""
        if kind == "message":
            text = {
                "type": "message",
                "agent": str(item["role"]),
                "body": _text(item.get("content")),
            }
            add(text, item, _without_text(item))
        elif kind == "tool_call":
            names[call_id] = str(item.get("name") or "tool")
            calls[call_id] = event_id(len(events))
            args = _args(item.get("arguments"))
            asked = {
                "type": "tool_call",
                "agent": agent,
                "tool": names[call_id],
                "attempt_id": call_id,
                "args": args,
            }
            add(asked, item, _without_arguments(item, args))
        elif kind == "tool_result":
            call = calls.get(call_id) or recorded.get(call_id, ("", None))[0]
            output = item.get("output")
            result = {
                "type": "tool_result",
                "agent": agent,
                "tool": names.get(call_id, "tool"),
                "attempt_id": call_id,
                "status": "ok",
                "result": output if isinstance(output, str) else json.loads(json.dumps(output)),
                "parents": [call] if call else None,
            }
            add(result, item, _without_output(item))
        else:
            if isinstance(item, dict) and item.get("type") == "function_call" and call_id:
                names[call_id] = str(item.get("name") or "tool")
            events.append({"type": "mutation", "agent": agent, "kind": ITEM, "item": item})
    return events


def model_events(
    agent: str, run_id: str | None, model: str | None, response: Any, attempt: str
) -> list[dict[str, Any]]:
    """A model response as its model call: a `tool_call` of the tool `model` and its
    `tool_result` (the model, the token usage, the response id), the call its result's parent
    by position (the result's `parents` are filled in by the caller, who knows the ids)."""
    usage = getattr(response, "usage", None)
    record: JSONObject = {}
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
