"""A session as an ATIF trajectory (the Agent Trajectory Interchange Format, v1.7), for
evaluation and training: Harbor's format.

The document is the session's own trajectory (`trajectory_id` the session id): the steps of its
runs at the top, in commit order; each delegated run a trajectory of its own, embedded in the
`subagent_trajectories` of the trajectory that delegated it and named, where a `delegate` call
asked for it, by that call's observation (`subagent_trajectory_ref`). An agent step carries the
model call it follows from as its `model_name` and `metrics`; a call with no result carries its
standing (`unresolved`, or `flagged` once the reconciler flagged it) in its `extra`, and the
document lists them in its own `extra`.

It is written in bounded memory: the session is read twice, a page at a time, first for its
runs tree, then for its steps; each trajectory keeps its newest KEEP steps in memory and writes
the older ones to a file of its own (SQLite, in the temporary folder), with what a result
arriving after its step was written adds to it; the document is written from that file.
"""

from __future__ import annotations

import io
import json
import os
import sqlite3
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import IO, Any, Final

from ledger_bus.exports.trajectory import (
    Builder,
    Call,
    Run,
    Session,
    Step,
    key,
    model_cost,
    model_name,
)
from ledger_bus.model.jsontext import JSONObject
from ledger_bus.model.records import RecordedEvent
from ledger_bus.store.base import EventStore

SCHEMA_VERSION: Final = "ATIF-v1.7"
KEEP: Final = 64  # steps a trajectory keeps in memory while the session is read
# ... and more, while a step no message has joined yet has fewer than HOLD steps after it: a
# recorded tool's calls, written before the model call that asked for them; a model call before
# the message it made.
HOLD: Final = 8


def atif_of(store: EventStore, session_id: str) -> dict[str, Any]:
    """The ATIF document of a session (NotFound when it does not exist)."""
    out = io.StringIO()
    write_atif(store, session_id, out)
    found: dict[str, Any] = json.loads(out.getvalue())
    return found


def write_atif(store: EventStore, session_id: str, out: IO[str]) -> None:
    """Write the ATIF document of a session to `out` (NotFound when it does not exist)."""
    store.session_info(session_id)  # NotFound, before anything is read
    write_events(session_id, lambda: store.iter_session(session_id), out)


def write_events(
    session_id: str,
    events: Callable[[], Iterable[RecordedEvent]],
    out: IO[str],
    window: dict[str, Any] | None = None,
) -> None:
    """Write the ATIF document of the events `events()` gives (twice, alike) to `out`; when
    they are a window of the session (the trace view's pages), `window` says which, in the
    document's `extra.ledger.window`."""
    builder = Builder(session_id)
    for event in events():
        builder.add(event)
    session = builder.tree()
    with _Spill() as spill:
        writer = _Writer(session, builder, spill, window)
        for event in events():
            writer.feed(event)
        writer.finish()
        writer.write(out)


@dataclass
class _Tally:
    """What a trajectory's written steps add up to."""

    steps: int = 0
    models: Counter[str] = field(default_factory=Counter)
    agents: Counter[str] = field(default_factory=Counter)
    tokens: Counter[str] = field(default_factory=Counter)
    cost: float = 0.0


class _Spill:
    """The steps written out of memory, and what later results add to them."""

    def __enter__(self) -> _Spill:
        handle, self.path = tempfile.mkstemp(prefix="ledger-atif-", suffix=".db")
        os.close(handle)
        self.db = sqlite3.connect(self.path)
        self.db.execute("PRAGMA journal_mode=OFF")
        self.db.execute("PRAGMA synchronous=OFF")
        self.db.execute("CREATE TABLE steps (t TEXT, n INTEGER, doc TEXT, PRIMARY KEY (t, n))")
        self.db.execute("CREATE TABLE later (t TEXT, n INTEGER, doc TEXT)")
        return self

    def __exit__(self, *exc: object) -> None:
        self.db.close()
        os.unlink(self.path)

    def step(self, trajectory: str, n: int, doc: JSONObject) -> None:
        self.db.execute("INSERT INTO steps VALUES (?, ?, ?)", (trajectory, n, json.dumps(doc)))

    def later(self, trajectory: str, n: int, observed: JSONObject, timing: JSONObject) -> None:
        doc = json.dumps({"observed": observed, "timing": timing})
        self.db.execute("INSERT INTO later VALUES (?, ?, ?)", (trajectory, n, doc))

    def steps(self, trajectory: str) -> Iterator[dict[str, Any]]:
        later: dict[int, list[dict[str, Any]]] = {}
        for n, doc in self.db.execute("SELECT n, doc FROM later WHERE t = ?", (trajectory,)):
            later.setdefault(n, []).append(json.loads(doc))
        rows = self.db.execute("SELECT n, doc FROM steps WHERE t = ? ORDER BY n", (trajectory,))
        for n, doc in rows:
            step: dict[str, Any] = json.loads(doc)
            for found in later.get(n, ()):
                _settle(step, found["observed"], found["timing"])
            yield step


def _settle(step: dict[str, Any], observed: JSONObject, timing: JSONObject) -> None:
    """A result that came after its step was written: the call no longer open, its result in
    the step's observation."""
    for call in step.get("tool_calls", ()):
        if call["tool_call_id"] == observed["source_call_id"]:
            call["extra"].pop("status", None)
            call["extra"]["ledger"] = timing
    results = step.setdefault("observation", {"results": []})["results"]
    results[:] = [r for r in results if r["source_call_id"] != observed["source_call_id"]]
    results.append(observed)


class _Writer:
    """Feeds the session's events to the builder, writing each trajectory's older steps out."""

    def __init__(
        self,
        session: Session,
        builder: Builder,
        spill: _Spill,
        window: JSONObject | None = None,
    ):
        self.session, self.builder, self.spill = session, builder, spill
        self.window = window
        self.tallies: dict[str, _Tally] = {}
        self.written: dict[str, tuple[str, int]] = {}  # key of an open call -> its written step

    def feed(self, event: RecordedEvent) -> None:
        if event.type not in ("message", "tool_call", "tool_result"):
            return
        run = self.builder.feed(event)
        if event.type == "tool_result":
            found = key(event.run_id, str(event.attempt_id))
            call = self.builder.calls.get(found)
            if call is not None and call.result is not None:
                self.builder.settled(found)
                where = self.written.pop(found, None)
                if where is not None:
                    observed = _observed(call, self.session)
                    if observed is not None:
                        self.spill.later(*where, observed, timing(call))
        while len(run.steps) > KEEP:
            if run.steps[0].event_id is None and len(run.steps) <= KEEP + HOLD:
                break  # a message may still join it (its model call's, or one asking its calls)
            self._out(run, run.steps.pop(0))

    def finish(self) -> None:
        for run in self.session.runs.values():
            while run.steps:
                self._out(run, run.steps.pop(0))

    def _out(self, run: Run, step: Step) -> None:
        tally = self.tallies.setdefault(run.run_id, _Tally())
        tally.steps += 1
        doc = _step(tally.steps, step, self.session)
        self.spill.step(run.run_id, tally.steps, doc)
        if step.source == "agent":
            tally.agents[step.agent] += 1
        if step.model is not None:
            name = model_name(step.model)
            if name:
                tally.models[name] += 1
            metrics = model_cost(step.model)
            for name in ("prompt_tokens", "completion_tokens", "cached_tokens"):
                tally.tokens[name] += metrics.get(name, 0)
            tally.cost += metrics.get("cost_usd", 0.0)
        for call in step.calls:
            if call.result is None:
                self.written[key(call.event.run_id, call.attempt)] = (run.run_id, tally.steps)
        self.builder.forget(step)

    def write(self, out: IO[str]) -> None:
        self._trajectory(self.session.root, self._subtrees(), out, top=True)

    def _subtrees(self) -> dict[str, _Tally]:
        """Each trajectory with what it and every trajectory under it add up to, in one walk
        from the leaves; one with no step in its subtree (a LangGraph subgraph's runs, whose
        events its parent's steps carry) is in the document's runs, not a trajectory."""
        totals: dict[str, _Tally] = {}

        def total(run: Run) -> _Tally:
            own = self.tallies.get(run.run_id) or _Tally()
            found = _Tally(own.steps, tokens=Counter(own.tokens), cost=own.cost)
            for child in self.session.children(run):
                below = total(child)
                found.steps += below.steps
                found.tokens.update(below.tokens)
                found.cost += below.cost
            if found.steps:
                totals[run.run_id] = found
            return found

        total(self.session.root)
        return totals

    def _trajectory(
        self, run: Run, embedded: dict[str, _Tally], out: IO[str], top: bool = False
    ) -> None:
        tally = self.tallies.get(run.run_id) or _Tally()
        agent: JSONObject = {
            "name": _agent_name(self.session, run, tally),
            "version": "unknown",
        }
        if tally.models:
            agent["model_name"] = tally.models.most_common(1)[0][0]
        head = {
            "schema_version": SCHEMA_VERSION,
            "session_id": self.session.session_id,
            "trajectory_id": run.run_id or self.session.session_id,
            "agent": agent,
        }
        out.write(json.dumps(head, ensure_ascii=False)[:-1] + ', "steps": [')
        count = 0
        for step in self.spill.steps(run.run_id):
            _refs_embedded(step, embedded)
            out.write((", " if count else "") + json.dumps(step, ensure_ascii=False))
            count += 1
        if not count:  # nothing said yet: ATIF wants a step
            out.write(json.dumps(_empty(run), ensure_ascii=False))
            count = 1
        out.write("]")
        children = [c for c in self.session.children(run) if c.run_id in embedded]
        if children:
            out.write(', "subagent_trajectories": [')
            for n, child in enumerate(children):
                out.write(", " if n else "")
                self._trajectory(child, embedded, out)
            out.write("]")
        below = embedded.get(run.run_id) or _Tally()
        final: JSONObject = {
            f"total_{name}": below.tokens[name]
            for name in ("prompt_tokens", "completion_tokens", "cached_tokens")
        }
        if below.cost:
            final["total_cost_usd"] = below.cost
        final["total_steps"] = count
        out.write(', "final_metrics": ' + json.dumps(final))
        extra: JSONObject | None = None
        if top:
            extra = self._document_extra()
        elif run.run_id:
            extra = {
                "ledger": {
                    "run": run.run_id,
                    "parent": run.parent,
                    "status": run.status or "running",
                }
            }
        if extra is not None:
            out.write(', "extra": ' + json.dumps(extra, ensure_ascii=False))
        out.write("}")

    def _document_extra(self) -> JSONObject:
        open_calls = [
            c for c in self.builder.calls.values() if c.result is None and c.tool != "model"
        ]
        ledger: dict[str, Any] = {
            "session": self.session.session_id,
            "events": self.builder.events,
            "runs": {
                r.run_id: {
                    "agent": r.agent,
                    "parent": r.parent,
                    "status": r.status or "running",
                }
                for r in self.session.runs.values()
                if r.run_id and r.started is not None
            },
            "unresolved": sorted(c.attempt for c in open_calls if not c.flagged),
            "flagged": sorted(c.attempt for c in open_calls if c.flagged),
        }
        if self.window is not None:
            ledger["window"] = self.window
        return {"ledger": ledger}


def _refs_embedded(step: dict[str, Any], embedded: dict[str, _Tally]) -> None:
    """Keep a delegate call's reference only to a trajectory the document embeds (whether its
    run says anything is known once the whole session is read)."""
    observation = step.get("observation")
    if observation is None:
        return
    kept = []
    for result in observation["results"]:
        refs = [
            r for r in result.get("subagent_trajectory_ref", ()) if r["trajectory_id"] in embedded
        ]
        if refs:
            result["subagent_trajectory_ref"] = refs
        else:
            result.pop("subagent_trajectory_ref", None)
        if "content" in result or "subagent_trajectory_ref" in result:
            kept.append(result)
    if kept:
        observation["results"] = kept
    else:
        del step["observation"]


def _agent_name(session: Session, run: Run, tally: _Tally) -> str:
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
    return tally.agents.most_common(1)[0][0] if tally.agents else "session"


def _step(n: int, step: Step, session: Session) -> JSONObject:
    out: dict[str, Any] = {
        "step_id": n,
        "timestamp": _iso(step.at),
        "source": step.source,
        "message": step.message,
    }
    if step.source != "agent":
        return out
    if step.model is not None:
        name = model_name(step.model)
        if name:
            out["model_name"] = name
        metrics = model_cost(step.model)
        if metrics:
            out["metrics"] = metrics
    if step.calls:
        out["tool_calls"] = [_tool_call(c) for c in step.calls]
        results = [r for r in (_observed(c, session) for c in step.calls) if r is not None]
        if results:
            out["observation"] = {"results": results}
    out["extra"] = {"agent": step.agent}
    if step.model is not None:
        out["extra"]["model_call"] = {"tool_call_id": step.model.attempt, **timing(step.model)}
    return out


def _observed(call: Call, session: Session) -> JSONObject | None:
    """A call's observation result: its result, and for a `delegate` call the trajectory of
    the run it asked for (kept where the document embeds it, _refs_embedded)."""
    child = call.child_run
    named = bool(child) and child in session.runs
    if call.result is None and not named:
        return None
    out: JSONObject = {"source_call_id": call.attempt}
    if call.result is not None:
        out["content"] = _text(call.result.get("result"))
        if call.result.get("status") != "ok":
            out["extra"] = {"status": call.result.get("status")}
    if named:
        out["subagent_trajectory_ref"] = [
            {"trajectory_id": child, "session_id": session.session_id}
        ]
    return out


def _tool_call(call: Call) -> JSONObject:
    args = call.event.get("args")
    out: dict[str, Any] = {
        "tool_call_id": call.attempt,
        "function_name": call.tool,
        "arguments": args if isinstance(args, dict) else {"value": args},
    }
    out["extra"] = {"ledger": timing(call)}
    if call.result is None:
        out["extra"]["status"] = call.status  # unresolved or flagged
    return out


def timing(call: Call) -> JSONObject:
    """When a call was asked for and settled, by the cursors of its events and their times
    (the trace view draws its bars from these): its run, `requested`/`requested_at` (absent
    when the request is not among the events read: a window that starts after it),
    `settled`/`settled_at` once its result came (`settled_by`: the probe that found it, and its
    evidence), `flagged` once the reconciler flagged it, and its status."""
    out: JSONObject = {"run": call.event.run_id, "status": call.status}
    if call.event is not call.result:
        out["requested"] = call.event.cursor
        out["requested_at"] = _iso(call.event.recorded_at)
    if call.result is not None:
        out["settled"] = call.result.cursor
        out["settled_at"] = _iso(call.result.recorded_at)
        settled_by = call.result.get("settled_by")
        if settled_by:  # a reconciler's probe found this outcome: its evidence goes along
            out["settled_by"] = settled_by
    if call.flagged_at is not None:
        out["flagged"] = call.flagged_at
    return out


def _text(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _empty(run: Run) -> JSONObject:
    at = run.started or run.ended
    step: JSONObject = {
        "step_id": 1,
        "source": "system",
        "message": f"{run.agent or 'a run'} ran ({run.status or 'running'}) and said nothing",
    }
    if at is not None:
        step["timestamp"] = _iso(at)
    return step


def _iso(at: datetime) -> str:
    return at.isoformat(timespec="milliseconds").replace("+00:00", "Z")
