"""An ADK event as the ledger's own events, for timelines, the web view, `tail` and the exports.

Written once, in the event's append, after its `adk.event` record:

- a user's event: its text a `message` of the agent `user`; a function response it gives back
  (a long-running tool's), the `tool_result` of that call;
- an agent's event with the model's content: the model call that made it (a `tool_call` and
  `tool_result` of the tool `model`, whose result holds the model, its token usage, why it
  stopped and the ids of the function calls it asked for), the `message` of the agent, and each
  function call a requested `tool_call` whose attempt is ADK's function-call id;
- a function response, the `tool_result` of its call (`error` when the response says so);
- a transfer to another agent, a delegation: a `delegate` call, done at once, naming the run the
  other agent's run is (`parent_run` on its `run.started`).

A run is one agent's part of one invocation (layout.run_of): its `run.started` comes with its
first event, its `run.finished` with its final response or its transfer.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Final

from google.adk.events.event import Event

from ledger_bus.adapters.adk.layout import AGENT, run_of
from ledger_bus.model.jsontext import JSONObject
from ledger_bus.model.keys import idempotency_key

USER: Final = "user"
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
CAPABILITIES: Final = {
    "profile": "google-adk",
    # A function call is recorded with the event that asks for it, before ADK runs it; its
    # response with the event that carries it; a call a crash left open is flagged, and a
    # resolution given back as its response.
    "request_before_call": "strict",
    "record_outcome": "strict",
    "recovery": "strict",
}


def call_event_id(call_id: str) -> str:
    return f"adk/call/{safe(call_id)}"


def safe(name: str | None) -> str:
    """A name from the model (a tool's, a call's id) as the ledger takes one: itself, or, with a
    control character in it or none at all, `~` and its digest (the event keeps it as given)."""
    if name and not _CONTROL.search(name):
        return name
    return "~" + hashlib.sha256((name or "").encode()).hexdigest()[:32]


def call_key(session_id: str, invocation_id: str, author: str, call_id: str) -> str:
    """The idempotency key of a function call: its ledger session, its run, and its id as the
    step (spec 7.1), what the guard plugin gives the tool as `current_call()`."""
    return idempotency_key(session_id, run_of(invocation_id, author), safe(call_id))


def normalized(
    event: Event, *, starts: bool, parent_run: str | None, session_id: str
) -> list[JSONObject]:
    """What `event` says, as the ledger's events. `starts`: the first event of its run (the run
    of its author in its invocation); `parent_run`: the run that transferred to this one;
    `session_id`: the ledger session it goes to (its calls' keys are derived from it)."""
    author = event.author or AGENT
    run = run_of(event.invocation_id, author)
    ids: dict[str, Any] = {"run_id": run, "step_id": event.id}
    parts = list(event.content.parts or []) if event.content else []
    text = "\n".join(p.text for p in parts if p.text and not p.thought)
    # A call or response without ADK's id (ADK gives every call one before it is appended)
    # cannot be paired: it is said in the record, not made an attempt.
    calls = [p.function_call for p in parts if p.function_call is not None and p.function_call.id]
    responses = [
        p.function_response
        for p in parts
        if p.function_response is not None and p.function_response.id
    ]
    out: list[dict[str, Any]] = []
    if author == USER:
        if text:
            out.append(
                {
                    "type": "message",
                    "agent": USER,
                    "body": text,
                    "event_id": _at(event, "said"),
                    **ids,
                }
            )
        out.extend(_result(r, USER, ids) for r in responses)
        return out
    if starts:
        started = {"type": "mutation", "agent": author, "kind": "run.started", **ids}
        out.append(
            {
                **started,
                "capabilities": CAPABILITIES,
                **({"parent_run": parent_run} if parent_run else {}),
            }
        )
    if event.content is not None and event.content.role == "model" and (text or calls):
        out.extend(_model_call(event, author, ids, [safe(c.id) for c in calls]))
        said = _at(event, "said")
        if text:
            out.append({"type": "message", "agent": author, "body": text, "event_id": said,
                        "parents": [_at(event, "model")], **ids})  # fmt: skip
        for call in calls:
            out.append({
                "type": "tool_call", "agent": author, "tool": safe(call.name),
                "args": dict(call.args or {}), "attempt_id": safe(call.id),
                "idempotency_key": call_key(session_id, event.invocation_id, author, call.id or ""),
                "event_id": call_event_id(call.id or ""),
                "parents": [said if text else _at(event, "model")], **ids,
            })  # fmt: skip
    out.extend(_result(r, author, ids) for r in responses)
    target = event.actions.transfer_to_agent if event.actions else None
    if target:
        out.extend(_transfer(event, author, target, ids))
    elif event.is_final_response() and not event.partial:
        out.append({"type": "mutation", "agent": author, "kind": "run.finished",
                    "status": "error" if event.error_code else "ok", **ids})  # fmt: skip
    return out


def _at(event: Event, what: str) -> str:
    """The id of what an event says: its `what` (its message, its model call, ...)."""
    return f"adk/{event.id}/{what}"


def _model_call(event: Event, author: str, ids: dict[str, Any], calls: list[str]) -> list[Any]:
    usage = event.usage_metadata
    tokens = {
        "input_tokens": (usage.prompt_token_count or 0) if usage else 0,
        "output_tokens": (usage.candidates_token_count or 0) if usage else 0,
        "input_token_details": {
            "cache_read": (usage.cached_content_token_count or 0) if usage else 0
        },
    }
    model = event.model_version
    attempt = f"model:{event.id}"
    call = _at(event, "model")
    result = {
        "model": model,
        "usage": tokens,
        "finish_reason": str(event.finish_reason.value) if event.finish_reason else None,
        "tool_calls": calls,
        **({"error": event.error_message} if event.error_message else {}),
    }
    return [
        {"type": "tool_call", "agent": author, "tool": "model", "attempt_id": attempt,
         "args": {"model": model} if model else {}, "event_id": call, **ids},
        {"type": "tool_result", "agent": author, "tool": "model", "attempt_id": attempt,
         "status": "error" if event.error_code else "ok", "result": result,
         "event_id": _at(event, "cost"), "parents": [call], **ids},
    ]  # fmt: skip


def _result(response: Any, agent: str, ids: dict[str, Any]) -> JSONObject:
    value = response.response
    failed = isinstance(value, dict) and "error" in value
    return {
        "type": "tool_result", "agent": agent, "tool": safe(response.name),
        "attempt_id": safe(response.id), "status": "error" if failed else "ok", "result": value,
        "parents": [call_event_id(response.id or "")], **ids,
    }  # fmt: skip


def _transfer(event: Event, author: str, target: str, ids: dict[str, Any]) -> list[Any]:
    attempt = f"transfer:{event.id}"
    call = _at(event, "transfer")
    child = run_of(event.invocation_id, target)
    reason = event.actions.transfer_reason or "" if event.actions else ""
    args = {"agent": target, "objective": reason, "child_run": child}
    return [
        {"type": "tool_call", "agent": author, "tool": "delegate", "attempt_id": attempt,
         "args": args, "event_id": call, **ids},
        {"type": "tool_result", "agent": author, "tool": "delegate", "attempt_id": attempt,
         "status": "ok", "result": {"transferred_to": target}, "parents": [call], **ids},
        {"type": "mutation", "agent": author, "kind": "run.finished", "status": "ok",
         "handed_to": target, **ids},
    ]  # fmt: skip
