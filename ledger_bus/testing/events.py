"""Events as tests write them, the contract suite's and ours: a message, a tool call, its result."""

from __future__ import annotations


def msg(body: str, agent: str = "a", **extra: object) -> dict[str, object]:
    """A `message` event saying `body`."""
    return {"type": "message", "agent": agent, "body": body, **extra}


def call(
    attempt: str,
    run_id: str | None = None,
    tool: str = "deploy",
    *,
    agent: str = "a",
    **args: object,
) -> dict[str, object]:
    """A `tool_call` event requesting `tool` as attempt `attempt`, with `args` as its arguments."""
    event: dict[str, object] = {
        "type": "tool_call",
        "agent": agent,
        "tool": tool,
        "args": args,
        "attempt_id": attempt,
    }
    if run_id:
        event["run_id"] = run_id
    return event


def result(  # noqa: PLR0913  (an event's fields, one keyword each)
    attempt: str,
    tool: str = "deploy",
    *,
    agent: str = "a",
    status: str = "ok",
    value: object = 1,
    run_id: str | None = None,
) -> dict[str, object]:
    """The `tool_result` event of attempt `attempt`: `status` and `value` as its result."""
    event: dict[str, object] = {
        "type": "tool_result",
        "agent": agent,
        "tool": tool,
        "attempt_id": attempt,
        "status": status,
        "result": value,
    }
    if run_id:
        event["run_id"] = run_id
    return event


__all__ = ["call", "msg", "result"]
