"""A session as trajectories: its runs, each a sequence of steps (what was said, the calls each
step made and what came back, what the model cost), delegated runs nested under the run that
delegated them. Built from the normalized events alone (a framework's native records are its
own), so a Recorder's session, a LangGraph thread and an Agents SDK session read alike.

The runs tree: a run starts with `run.started` (or `run.resumed`); its parent is the run a
`run.started` names (`parent_run`: an adapter's delegation, a LangGraph subgraph or Send, an
Agents SDK handoff) or the run whose `delegate` call named it (`args.child_run`: a Recorder's).
A run with no parent, and events of no run known to have started, belong to the session's own
trajectory; a delegated run is a trajectory of its own, embedded in its parent's.

Steps, in commit order within each trajectory:
- a `message` of `user` (or `system`) is a step of that source;
- a model call (the tool `model`: its model and token usage) is an agent step, whose message is
  the `message` that follows from it (its `parents`); any other `message` is an agent step;
- a `tool_call` joins the step of the model call that asked for it (the model call's
  `tool_calls`, whichever of the two came first), else the agent step it follows from (its
  `parents`), else the trajectory's last step when that is an agent's, else a step of its own;
  its `tool_result` is that step's
  observation; a `delegate` call's observation names the child's trajectory;
- a call with no result is `unresolved`, `flagged` once the reconciler flagged it, and says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from ledger_bus.agent.filters import is_native
from ledger_bus.model.jsontext import JSONObject
from ledger_bus.model.records import RecordedEvent
from ledger_bus.operations.reconciler import FLAG_KIND

MODEL: Final = "model"  # the tool a model call is recorded as (spec: model calls are tool calls)
DELEGATE: Final = "delegate"
STARTS: Final = ("run.started", "run.resumed")
# The frameworks whose native records a session holds, by their streams' first part.
FRAMEWORKS: Final = {
    "lg": "langgraph",
    "oa": "openai-agents",
    "agentgo": "agentgo",
    "adk": "google-adk",
    "a2a": "a2a",
}


@dataclass
class Call:
    """A tool call and, once it came, its result."""

    event: RecordedEvent
    result: RecordedEvent | None = None
    flagged: bool = False
    flagged_at: str | None = None  # the cursor of the reconciler's flag

    @property
    def attempt(self) -> str:
        return str(self.event.attempt_id)

    @property
    def tool(self) -> str:
        return str(self.event.get("tool"))

    @property
    def status(self) -> str:
        """ok, error, unresolved (no result yet) or flagged (the reconciler said so)."""
        if self.result is not None:
            return str(self.result.get("status"))
        return "flagged" if self.flagged else "unresolved"

    @property
    def closed_at(self) -> str | None:
        """The cursor of the event that settled it: its result, else the reconciler's flag."""
        return self.result.cursor if self.result is not None else self.flagged_at

    @property
    def child_run(self) -> str | None:
        """The run a `delegate` call asked for."""
        args = self.event.get("args") if self.tool == DELEGATE else None
        child = args.get("child_run") if isinstance(args, dict) else None
        return child if isinstance(child, str) else None


@dataclass
class Step:
    """One step of a trajectory."""

    source: str  # user, system or agent
    agent: str
    at: datetime
    message: str = ""
    event_id: str | None = None  # of the message that opened it
    model: Call | None = None  # the model call it follows from
    calls: list[Call] = field(default_factory=list)


@dataclass
class Run:
    """A run (or the session's own trajectory, run id ""), its steps and its children."""

    run_id: str
    agent: str | None = None
    parent: str | None = None
    started: datetime | None = None
    ended: datetime | None = None
    ended_at: str | None = None  # the cursor of its run.finished
    status: str | None = None  # as run.finished said; None while it runs
    steps: list[Step] = field(default_factory=list)
    children: list[str] = field(default_factory=list)
    last: datetime | None = None  # its latest event


@dataclass
class Session:
    """A session's runs, the session's own trajectory under the id ""."""

    session_id: str
    runs: dict[str, Run]
    framework: str | None = None  # langgraph, openai-agents: whose thread or session it is
    flags: dict[str, str] = field(default_factory=dict)  # attempt -> the cursor of its flag

    @property
    def root(self) -> Run:
        return self.runs[""]

    def children(self, run: Run) -> list[Run]:
        return [self.runs[c] for c in run.children if c in self.runs]


class Builder:
    """Folds a session's events into its runs and steps, in two passes over them: `add` each
    (who runs, who delegated whom, which calls the reconciler flagged; no event is kept), then
    `tree()`, then `feed` each (the steps, in commit order). Two passes, because a run's events
    may be committed before its run.started (LangGraph writes a task's messages and its writes
    on threads of its own)."""

    def __init__(self, session_id: str):
        self.session_id = session_id
        self.runs: dict[str, Run] = {"": Run("")}
        self.calls: dict[str, Call] = {}  # key(run, attempt) -> its call
        self.models: dict[str, Step] = {}  # event id of a model call -> the step it made
        self.steps: dict[str, Step] = {}  # event id of a message -> its step
        self.holders: dict[str, Step] = {}  # attempt id -> the step holding its call
        self.asked: dict[str, Step] = {}  # attempt id -> the step of the message asking for it
        self.parents: dict[str, str] = {}  # run -> the run that delegated it
        self.flagged: dict[str, str] = {}  # attempt id -> the cursor of its flag
        self.done: set[int] = set()  # hashes of the keys of calls settled and let go
        self.events = 0
        self.framework: str | None = None

    def add(self, event: RecordedEvent) -> None:
        if is_native(event):
            name = event.stream.name
            self.framework = self.framework or FRAMEWORKS.get(name.split(".", 1)[0])
            return
        self.events += 1
        f = event.fields
        if event.type != "mutation":
            if event.type == "tool_call" and f.get("tool") == DELEGATE and event.run_id:
                child = (f.get("args") or {}).get("child_run")
                if isinstance(child, str) and child != event.run_id:
                    self.parents.setdefault(child, str(event.run_id))
            return
        kind = f.get("kind")
        if kind in STARTS and event.run_id:
            run = self._run(str(event.run_id))
            run.agent = run.agent or event.agent
            run.started = run.started or event.recorded_at
            run.status = run.ended = run.ended_at = None  # running (again)
            parent = f.get("parent_run")
            if isinstance(parent, str) and parent != run.run_id:
                self.parents.setdefault(run.run_id, parent)
        elif kind == "run.finished" and event.run_id:
            run = self._run(str(event.run_id))
            run.ended, run.status = event.recorded_at, str(f.get("status", "ok"))
            run.ended_at = event.cursor
        elif kind == FLAG_KIND and f.get("attempt_id"):
            self.flagged.setdefault(str(f["attempt_id"]), event.cursor)

    def _run(self, run_id: str) -> Run:
        found = self.runs.get(run_id)
        if found is None:
            found = self.runs[run_id] = Run(run_id)
        return found

    def _trajectory(self, event: RecordedEvent) -> Run:
        """The trajectory an event belongs to: its run's, when that run was delegated (a run
        at the top, and a recorded call's own run id, which no run.started names, are the
        session's)."""
        run = self.runs.get(event.run_id or "")
        if run is not None and run.parent is not None:
            return run
        return self.runs[""]

    def settled(self, found: str) -> None:
        """Let a call with its result go (its step holds it): only that it was seen stays."""
        if self.calls.pop(found, None) is not None:
            self.done.add(hash(found))

    def forget(self, step: Step) -> None:
        """Let go of what names a step that was written out: no later event joins it."""
        if step.event_id is not None:
            self.steps.pop(step.event_id, None)
        if step.model is not None:
            self.models.pop(step.model.event.event_id, None)
            said = step.model.result.get("result") if step.model.result is not None else None
            for attempt in said.get("tool_calls", []) if isinstance(said, dict) else ():
                if self.asked.get(str(attempt)) is step:
                    del self.asked[str(attempt)]
        for call in step.calls:
            if self.holders.get(call.attempt) is step:
                del self.holders[call.attempt]

    def tree(self) -> Session:
        """The runs tree, once every event was added: each run's parent and children."""
        for child, parent in self.parents.items():
            if (
                child in self.runs
                and child != parent
                and not _is_ancestor(self.parents, child, parent)
            ):
                self._run(parent)
                self.runs[child].parent = parent
        for run in list(self.runs.values()):
            if run.run_id and run.parent is not None:
                holder = self.runs[run.parent]
                # The trajectory a child's reference goes in: its parent's, if delegated;
                # else the session's.
                if holder.parent is None:
                    holder = self.runs[""]
                holder.children.append(run.run_id)
        return Session(self.session_id, self.runs, self.framework, self.flagged)

    def feed(self, event: RecordedEvent) -> Run:
        """Take a message, call or result into its trajectory's steps (after tree()); the
        trajectory it went to."""
        run = self._trajectory(event)
        run.last = event.recorded_at
        if event.type == "message":
            self._message(run, event)
        elif event.type == "tool_call":
            self._call(run, event)
        elif event.type == "tool_result":
            self._result(run, event)
        return run

    def _message(self, run: Run, event: RecordedEvent) -> None:
        body = str(event.get("body", ""))
        if event.agent in ("user", "system"):
            step = Step(event.agent, event.agent, event.recorded_at, body, event.event_id)
        else:
            made = next((self.models[p] for p in event.parents if p in self.models), None)
            if made is not None and made.event_id is None:  # what the model call said
                made.message, made.event_id, made.agent = body, event.event_id, event.agent
                self._claim(run, made)
                self.steps[event.event_id] = made
                return
            step = Step("agent", event.agent, event.recorded_at, body, event.event_id)
        run.steps.append(step)
        self.steps[event.event_id] = step
        self._claim(run, step)

    def _claim(self, run: Run, step: Step) -> None:
        """The calls a model call asked for (its result's `tool_calls`, by attempt) are its
        step's: those whose requests came first (a tool recorded as it ran, before the
        checkpoint that holds the message) move to it from the step they stood in alone."""
        said = step.model.result.get("result") if step.model and step.model.result else None
        asked = said.get("tool_calls") if isinstance(said, dict) else None
        for attempt in asked if isinstance(asked, list) else ():
            self.asked[str(attempt)] = step
            holder = self.holders.get(str(attempt))
            if holder is None or holder is step or holder.event_id:
                continue
            call = next((c for c in holder.calls if c.attempt == str(attempt)), None)
            if call is None:
                continue
            holder.calls.remove(call)
            step.calls.append(call)
            self.holders[str(attempt)] = step
            if not holder.calls and holder.model is None and holder in run.steps:
                run.steps.remove(holder)

    def _call(self, run: Run, event: RecordedEvent) -> None:
        call = Call(event)
        attempt = call.attempt
        found = key(event.run_id, attempt)
        if found in self.calls or hash(found) in self.done:
            return  # a request written again (a retry, a replayed step): one call
        call.flagged_at = self.flagged.get(attempt)
        call.flagged = call.flagged_at is not None
        self.calls[found] = call
        if call.tool == MODEL:  # a step of its own, until the message it made comes
            made = Step("agent", event.agent, event.recorded_at, model=call)
            run.steps.append(made)
            self.models[event.event_id] = made
            return
        step = self.asked.get(attempt) or next(
            (self.steps[p] for p in event.parents if p in self.steps), None
        )
        if step is None or step.source != "agent":
            step = run.steps[-1] if run.steps else None  # the step that asked, most likely
        if step is None or step.source != "agent":
            step = Step("agent", event.agent, event.recorded_at)
            run.steps.append(step)
        step.calls.append(call)
        self.holders[attempt] = step

    def _result(self, run: Run, event: RecordedEvent) -> None:
        call = self.calls.get(key(event.run_id, str(event.attempt_id)))
        if call is None:  # its call is not in the session (imported, trimmed): a step of its own
            call = Call(event, result=event)
            self.calls[key(event.run_id, str(event.attempt_id))] = call
            step = Step("agent", event.agent, event.recorded_at)
            step.calls.append(call)
            run.steps.append(step)
        elif call.result is None:
            call.result = event


def key(run_id: str | None, attempt: str) -> str:
    """A call by its run and attempt: attempt ids are the framework's, and two runs may name
    theirs alike (a scripted model's response ids)."""
    return f"{run_id or ''}\x1f{attempt}"


def _is_ancestor(parents: dict[str, str], run: str, of: str) -> bool:
    """Whether `run` is `of` or above it (a circle of parents is cut where it would close)."""
    seen: set[str] = set()
    while of and of not in seen:
        if of == run:
            return True
        seen.add(of)
        of = parents.get(of, "")
    return False


def model_name(call: Call) -> str | None:
    """The model a model call (the tool `model`) used, as its result or its arguments say."""
    result = call.result.get("result") if call.result is not None else None
    if isinstance(result, dict) and isinstance(result.get("model"), str):
        return str(result["model"])
    args = call.event.get("args")
    if isinstance(args, dict) and isinstance(args.get("model"), str):
        return str(args["model"])
    return None


def model_cost(call: Call) -> dict[str, Any]:
    """A model call's token counts, as its usage says them: LangChain's and the Agents SDK's
    (input_tokens, output_tokens, their details) or OpenAI's (prompt_tokens, ...)."""
    result = call.result.get("result") if call.result is not None else None
    usage = result.get("usage") if isinstance(result, dict) else None
    if not isinstance(usage, dict):
        return {}
    out: JSONObject = {}
    prompt = count_of(usage, "input_tokens", "prompt_tokens")
    completion = count_of(usage, "output_tokens", "completion_tokens")
    details = usage.get("input_token_details") or usage.get("input_tokens_details")
    details = details or usage.get("prompt_tokens_details") or {}
    cached = count_of(details, "cache_read", "cached_tokens") if isinstance(details, dict) else None
    for name, value in (
        ("prompt_tokens", prompt),
        ("completion_tokens", completion),
        ("cached_tokens", cached),
    ):
        if value is not None:
            out[name] = value
    cost = result.get("cost_usd") if isinstance(result, dict) else None
    if isinstance(cost, int | float) and not isinstance(cost, bool):
        out["cost_usd"] = float(cost)
    return out


def count_of(found: JSONObject, *names: str) -> int | None:
    for name in names:
        value = found.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return None
