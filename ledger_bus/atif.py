"""A session as an ATIF trajectory (the Agent Trajectory Interchange Format, v1.7), for
evaluation and training: Harbor's format.

The document is the session's own trajectory (`trajectory_id` the session id): the steps of its
runs at the top, in commit order; each delegated run a trajectory of its own, embedded in the
`subagent_trajectories` of the trajectory that delegated it and named, where a `delegate` call
asked for it, by that call's observation (`subagent_trajectory_ref`). An agent step carries the
model call it follows from as its `model_name` and `metrics`; a call with no result carries its
standing (`unresolved`, or `flagged` once the reconciler flagged it) in its `extra`, and the
document lists them in its own `extra`.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime
from typing import Any, Final

from ledger_bus.store.base import EventStore
from ledger_bus.trajectory import Call, Run, Session, Step, build

SCHEMA_VERSION: Final = "ATIF-v1.7"


def atif_of(store: EventStore, session_id: str) -> dict[str, Any]:
    """The ATIF document of a session (NotFound when it does not exist)."""
    store.session_info(session_id)  # NotFound, before anything is read
    return document(build(session_id, store.scan_session(session_id)))


def document(session: Session) -> dict[str, Any]:
    doc = _trajectory(session, session.root)
    open_calls = [c for c in session.calls.values() if c.result is None and c.tool != "model"]
    doc["extra"] = {
        "ledger": {
            "session": session.session_id,
            "events": session.events,
            "runs": {
                r.run_id: {
                    "agent": r.agent,
                    "parent": r.parent,
                    "status": r.status or "running",
                }
                for r in session.runs.values()
                if r.run_id and r.started is not None
            },
            "unresolved": sorted(c.attempt for c in open_calls if not c.flagged),
            "flagged": sorted(c.attempt for c in open_calls if c.flagged),
        }
    }
    return doc


def _trajectory(session: Session, run: Run) -> dict[str, Any]:
    steps = [_step(n, step, session) for n, step in enumerate(run.steps, 1)]
    if not steps:  # the session's, with nothing said yet: ATIF wants a step
        steps = [_empty(run)]
    models = Counter(m for m in (_model_name(c) for c in _model_calls(session, run)) if m)
    agent: dict[str, Any] = {"name": _agent_name(session, run), "version": "unknown"}
    if models:
        agent["model_name"] = models.most_common(1)[0][0]
    out: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "session_id": session.session_id,
        "trajectory_id": run.run_id or session.session_id,
        "agent": agent,
        "steps": steps,
    }
    children = [c for c in session.children(run) if _said_anything(session, c)]
    if children:
        out["subagent_trajectories"] = [_trajectory(session, child) for child in children]
    out["final_metrics"] = _final_metrics(session, run, len(steps))
    if run.run_id:
        out["extra"] = {
            "ledger": {"run": run.run_id, "parent": run.parent, "status": run.status or "running"}
        }
    return out


def _said_anything(session: Session, run: Run) -> bool:
    """Whether a run has steps, or a run under it has (a run whose events its parent's steps
    carry, as a LangGraph subgraph's, is in the document's runs, not a trajectory)."""
    return any(r.steps for r in [run, *session.descendants(run)])


def _agent_name(session: Session, run: Run) -> str:
    """A run's agent; for the session's own trajectory, the agent of its one run at the top,
    else the framework whose thread it is, else the agent that started first (an
    orchestrator, most often)."""
    if run.agent:
        return run.agent
    tops = sorted(
        (r for r in session.runs.values() if r.run_id and r.parent is None and r.started),
        key=lambda r: r.started or datetime.min,
    )
    if len({r.agent for r in tops}) == 1:
        return str(tops[0].agent)
    if session.framework:
        return session.framework
    if tops and tops[0].agent:
        return tops[0].agent
    said = Counter(s.agent for s in run.steps if s.source == "agent")
    return said.most_common(1)[0][0] if said else "session"


def _step(n: int, step: Step, session: Session) -> dict[str, Any]:
    out: dict[str, Any] = {
        "step_id": n,
        "timestamp": _iso(step.at),
        "source": step.source,
        "message": step.message,
    }
    if step.source != "agent":
        return out
    if step.model is not None:
        name = _model_name(step.model)
        if name:
            out["model_name"] = name
        metrics = _metrics(step.model)
        if metrics:
            out["metrics"] = metrics
    if step.calls:
        out["tool_calls"] = [_tool_call(c) for c in step.calls]
        results = [r for r in (_observed(c, session) for c in step.calls) if r is not None]
        if results:
            out["observation"] = {"results": results}
    out["extra"] = {"agent": step.agent}
    return out


def _tool_call(call: Call) -> dict[str, Any]:
    args = call.event.get("args")
    out: dict[str, Any] = {
        "tool_call_id": call.attempt,
        "function_name": call.tool,
        "arguments": args if isinstance(args, dict) else {"value": args},
    }
    if call.result is None:
        out["extra"] = {"status": call.status}  # unresolved or flagged
    return out


def _observed(call: Call, session: Session) -> dict[str, Any] | None:
    child = call.child_run
    embedded = (
        bool(child) and child in session.runs and _said_anything(session, session.runs[child])
    )
    if call.result is None and not embedded:
        return None
    out: dict[str, Any] = {"source_call_id": call.attempt}
    if call.result is not None:
        out["content"] = _text(call.result.get("result"))
        if call.result.get("status") != "ok":
            out["extra"] = {"status": call.result.get("status")}
    if embedded:
        out["subagent_trajectory_ref"] = [
            {"trajectory_id": child, "session_id": session.session_id}
        ]
    return out


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _model_calls(session: Session, run: Run) -> list[Call]:
    return [s.model for s in run.steps if s.model is not None]


def _model_name(call: Call) -> str | None:
    result = call.result.get("result") if call.result is not None else None
    if isinstance(result, dict) and isinstance(result.get("model"), str):
        return str(result["model"])
    args = call.event.get("args")
    if isinstance(args, dict) and isinstance(args.get("model"), str):
        return str(args["model"])
    return None


def _metrics(call: Call) -> dict[str, Any]:
    """A model call's token counts, as its usage says them: LangChain's and the Agents SDK's
    (input_tokens, output_tokens, their details) or OpenAI's (prompt_tokens, ...)."""
    result = call.result.get("result") if call.result is not None else None
    usage = result.get("usage") if isinstance(result, dict) else None
    if not isinstance(usage, dict):
        return {}
    out: dict[str, Any] = {}
    prompt = _count(usage, "input_tokens", "prompt_tokens")
    completion = _count(usage, "output_tokens", "completion_tokens")
    details = usage.get("input_token_details") or usage.get("input_tokens_details")
    details = details or usage.get("prompt_tokens_details") or {}
    cached = _count(details, "cache_read", "cached_tokens") if isinstance(details, dict) else None
    for key, value in (
        ("prompt_tokens", prompt),
        ("completion_tokens", completion),
        ("cached_tokens", cached),
    ):
        if value is not None:
            out[key] = value
    cost = result.get("cost_usd") if isinstance(result, dict) else None
    if isinstance(cost, int | float) and not isinstance(cost, bool):
        out["cost_usd"] = float(cost)
    return out


def _count(found: dict[str, Any], *names: str) -> int | None:
    for name in names:
        value = found.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return None


def _final_metrics(session: Session, run: Run, steps: int) -> dict[str, Any]:
    """The tokens and cost of the run and every run under it; its own steps."""
    totals: Counter[str] = Counter()
    cost = 0.0
    for each in [run, *session.descendants(run)]:
        for call in _model_calls(session, each):
            metrics = _metrics(call)
            for key in ("prompt_tokens", "completion_tokens", "cached_tokens"):
                totals[key] += metrics.get(key, 0)
            cost += metrics.get("cost_usd", 0.0)
    out: dict[str, Any] = {
        f"total_{key}": totals[key]
        for key in ("prompt_tokens", "completion_tokens", "cached_tokens")
    }
    if cost:
        out["total_cost_usd"] = cost
    out["total_steps"] = steps
    return out


def _empty(run: Run) -> dict[str, Any]:
    at = run.started or run.ended
    step: dict[str, Any] = {
        "step_id": 1,
        "source": "system",
        "message": f"{run.agent or 'a run'} ran ({run.status or 'running'}) and said nothing",
    }
    if at is not None:
        step["timestamp"] = _iso(at)
    return step


def _iso(at: datetime) -> str:
    return at.isoformat(timespec="milliseconds").replace("+00:00", "Z")
