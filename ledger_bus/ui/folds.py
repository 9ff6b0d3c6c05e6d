"""What the session page shows beside its timeline: the runs with their delegations and status,
and the dispatch board. Both are folds of the session's events, kept by the view per session and
brought up to date from the last cursor (or version) seen, so a refresh reads only what
committed since; the first look at a session reads it once.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Final

from ledger_bus.dispatch import STREAM as DISPATCH_STREAM
from ledger_bus.dispatch import BoardState, Window, is_open, window
from ledger_bus.ids import StreamId
from ledger_bus.records import RecordedEvent
from ledger_bus.store.aio import AsyncStore

KEPT_SESSIONS: Final = 256  # folds kept in memory, the least recently looked at dropped first
RUN_PREFIX: Final = "run-"


@dataclass
class RunNode:
    """One run: who ran it, how it stands, and where it sits in the delegation tree."""

    run_id: str
    agent: str
    started: str  # cursor of its (latest) run.started or run.resumed
    status: str = "running"  # running, ok, error; "died" when running without a live lease
    ended: str | None = None
    parent: str | None = None  # the run that delegated it
    objective: str | None = None
    children: list[str] = field(default_factory=list)
    depth: int = 0


@dataclass
class RunsFold:
    """The session's runs, folded in commit order."""

    after: str | None = None  # the last cursor folded
    first: str | None = None  # the session's first cursor then: another means it was rewritten
    events: int = 0
    runs: dict[str, RunNode] = field(default_factory=dict)
    delegated: dict[str, tuple[str, str]] = field(
        default_factory=dict
    )  # child -> parent, objective

    def apply(self, event: RecordedEvent) -> None:
        self.after = event.cursor
        self.first = self.first or event.cursor
        self.events += 1
        run_id = _run_of(event)
        if run_id is None:
            return
        f = event.fields
        if event.type == "tool_call" and f.get("tool") == "delegate":
            child = (f.get("args") or {}).get("child_run")
            if isinstance(child, str):
                self.delegated[child] = (run_id, str((f.get("args") or {}).get("objective", "")))
                self._link(child)
        elif event.type == "mutation" and f.get("kind") in ("run.started", "run.resumed"):
            node = self.runs.get(run_id)
            if node is None:
                node = self.runs[run_id] = RunNode(run_id, event.agent, event.cursor)
                self._link(run_id)
            node.started, node.status, node.ended = event.cursor, "running", None
        elif event.type == "mutation" and f.get("kind") == "run.finished":
            node = self.runs.get(run_id)
            if node is not None:
                node.status, node.ended = str(f.get("status", "ok")), event.cursor

    def _link(self, child: str) -> None:
        node = self.runs.get(child)
        found = self.delegated.get(child)
        if node is None or found is None or node.parent is not None:
            return
        parent, node.objective = found
        node.parent = parent
        if parent in self.runs:
            self.runs[parent].children.append(child)

    def tree(self) -> list[RunNode]:
        """The runs depth first from the roots, in the order they started; depth set."""
        out: list[RunNode] = []

        def visit(node: RunNode, depth: int) -> None:
            node.depth = depth
            out.append(node)
            for child in node.children:
                if child in self.runs:
                    visit(self.runs[child], depth + 1)

        for node in self.runs.values():
            if node.parent is None or node.parent not in self.runs:
                visit(node, 0)
        return out


def _run_of(event: RecordedEvent) -> str | None:
    if event.run_id:
        return event.run_id
    name = event.stream.name
    return name[len(RUN_PREFIX) :] if name.startswith(RUN_PREFIX) else None


@dataclass
class Dispatch:
    where: Window
    record: dict[str, Any]


class Folds:
    """The folds of the sessions looked at, kept between requests."""

    def __init__(self) -> None:
        self._runs: OrderedDict[str, RunsFold] = OrderedDict()
        self._boards: OrderedDict[str, BoardState] = OrderedDict()

    async def runs(self, store: AsyncStore, session_id: str) -> list[RunNode]:
        fold = _kept(self._runs, session_id, RunsFold)
        info = await store.session_info(session_id)
        if fold.first is not None and (
            fold.first != info.first_cursor or info.events < fold.events
        ):
            fold = self._runs[session_id] = RunsFold()  # deleted and written again since
        async for event in store.iter_session(session_id, fold.after, page=1000):
            fold.apply(event)
        nodes = [replace(node) for node in fold.tree()]  # copies: "died" is of this look only
        for node in nodes:  # a run without run.finished whose lease is gone has died
            if node.status == "running" and not await store.lease_alive(
                session_id, f"{RUN_PREFIX}{node.run_id}"
            ):
                node.status = "died"
        return nodes

    async def board(self, store: AsyncStore, session_id: str, now: datetime) -> list[Dispatch]:
        """The dispatches in flight by the spawn-log rule: live (< 24 h), stale (24-48 h), and
        those open in flight nowhere (other)."""
        state = _kept(self._boards, session_id, BoardState)
        ref = StreamId(session_id, DISPATCH_STREAM)
        if await store.stream_version(ref) < state.version:  # deleted and written again
            state = self._boards[session_id] = BoardState()
        for event in await store.read_stream(ref, state.version):
            state.apply(event.fields)
            state.version = event.version
        return [
            Dispatch(window(record, now), record)
            for record in state.records.values()
            if is_open(record)
        ]


def _kept(kept: OrderedDict[str, Any], session_id: str, make: Any) -> Any:
    found = kept.get(session_id)
    if found is None:
        found = kept[session_id] = make()
        while len(kept) > KEPT_SESSIONS:
            kept.popitem(last=False)
    kept.move_to_end(session_id)
    return found
