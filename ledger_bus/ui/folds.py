"""What the session page shows beside its timeline: the runs with their delegations and status,
and the dispatch board. Both are folds of streams of the session (its `run-<id>` streams, its
`dispatch` stream), kept by the view per session and brought up to date from the version each
was folded to, so a refresh reads only what committed since; the first look at a session reads
those streams once, and never the session's other streams.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Final, TypeVar

from ledger_bus.agent.filters import carries_runs
from ledger_bus.board.dispatches import STREAM as DISPATCH_STREAM
from ledger_bus.board.dispatches import BoardState, Window, is_open, window
from ledger_bus.model.ids import StreamId
from ledger_bus.model.records import RecordedEvent, SessionInfo
from ledger_bus.store.async_store import AsyncStore

T = TypeVar("T")
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
    leased: bool = False  # a Recorder's run, which holds a lease while it runs


@dataclass
class RunsFold:
    """The session's runs, folded from their streams (`run-<id>`), each in its own order; the
    other streams of the session are never read."""

    first: str | None = None  # the session's first cursor then: another means it was rewritten
    versions: dict[str, int] = field(default_factory=dict)  # how far each run stream is folded
    runs: dict[str, RunNode] = field(default_factory=dict)
    delegated: dict[str, tuple[str, str]] = field(
        default_factory=dict
    )  # child -> parent, objective
    ordered: list[RunNode] | None = None  # the tree, as last made; None once an event changed it

    def apply(self, event: RecordedEvent) -> None:
        run_id = _run_of(event)
        if run_id is None:
            return
        self.ordered = None
        f = event.fields
        if event.type == "tool_call" and f.get("tool") == "delegate":
            child = (f.get("args") or {}).get("child_run")
            if isinstance(child, str):
                self.delegated[child] = (run_id, str((f.get("args") or {}).get("objective", "")))
                self._link(child)
        elif event.type == "mutation" and f.get("kind") in ("run.started", "run.resumed"):
            node = self.runs.get(run_id)
            parent = f.get("parent_run")  # a run an adapter names as the one that delegated it
            if isinstance(parent, str) and run_id not in self.delegated:
                self.delegated[run_id] = (parent, "")
            if node is None:
                node = self.runs[run_id] = RunNode(run_id, event.agent, event.cursor)
                node.leased = event.stream.name.startswith(RUN_PREFIX)
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
        node.parent, node.objective = found

    def tree(self) -> list[RunNode]:
        """The runs depth first from the roots, each level in the order its runs (last)
        started; depth set. Made again only after an event changed the runs."""
        if self.ordered is None:
            self.ordered = self._tree()
        return self.ordered

    def _tree(self) -> list[RunNode]:
        out: list[RunNode] = []
        # Children from their parents' names, made here: a child may be written before its
        # parent (a LangGraph subgraph's runs end before the run of the node that ran it).
        for node in self.runs.values():
            node.children = []
        for node in self.runs.values():
            if node.parent is not None and node.parent in self.runs:
                self.runs[node.parent].children.append(node.run_id)

        seen: set[str] = set()

        def visit(node: RunNode, depth: int) -> None:
            if node.run_id in seen:  # parents named in a circle: each run once
                return
            seen.add(node.run_id)
            node.depth = depth
            out.append(node)
            children = [self.runs[c] for c in node.children if c in self.runs]
            for child in sorted(children, key=lambda n: n.started):
                visit(child, depth + 1)

        roots = [n for n in self.runs.values() if n.parent is None or n.parent not in self.runs]
        for node in sorted(roots, key=lambda n: n.started):  # in the order they started
            visit(node, 0)
        for node in sorted(self.runs.values(), key=lambda n: n.started):
            visit(node, 0)  # in a circle of parents: shown at the top
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
        # One refresh at a time: requests arriving together (a page and its panels, the
        # sessions list's rows) wait and find the fold done, instead of each reading the same
        # events (folding them twice would do no harm: each fold is idempotent).
        self._folding = asyncio.Lock()

    async def runs(self, store: AsyncStore, info: SessionInfo) -> list[RunNode]:
        """The runs of the session `info` describes (as just read), in tree order."""
        async with self._folding:
            nodes = await self._runs_of(store, info)
        running = [n for n in nodes if n.status == "running" and n.leased]
        alive = await asyncio.gather(
            *(store.lease_alive(info.session_id, f"{RUN_PREFIX}{n.run_id}") for n in running)
        )
        for node, live in zip(running, alive, strict=True):
            if not live:  # a run without run.finished whose lease is gone has died
                node.status = "died"
        return nodes

    async def _runs_of(self, store: AsyncStore, info: SessionInfo) -> list[RunNode]:
        session_id = info.session_id
        fold = _kept(self._runs, session_id, RunsFold)
        streams = {s.name: s.version for s in info.streams if carries_runs(s.name)}
        rewritten = fold.first != info.first_cursor or any(
            streams.get(name, 0) < version for name, version in fold.versions.items()
        )
        if fold.versions and rewritten:  # deleted and written again since
            fold = self._runs[session_id] = RunsFold()
        fold.first = info.first_cursor
        for name, version in streams.items():
            done = fold.versions.get(name, 0)
            if version > done:
                for event in await store.read_stream(StreamId(session_id, name), done):
                    fold.apply(event)
                fold.versions[name] = version
        # Copies of the runs a look may find died (running, leased): "died" is of one look only.
        return [replace(n) if n.leased and n.status == "running" else n for n in fold.tree()]

    async def board(self, store: AsyncStore, session_id: str, now: datetime) -> list[Dispatch]:
        """The dispatches in flight by the spawn-log rule: live (< 24 h), stale (24-48 h), and
        those open in flight nowhere (other)."""
        async with self._folding:
            state = await self._board_of(store, session_id)
        return [
            Dispatch(window(record, now), record)
            for record in state.records.values()
            if is_open(record)
        ]

    async def _board_of(self, store: AsyncStore, session_id: str) -> BoardState:
        state = _kept(self._boards, session_id, BoardState)
        ref = StreamId(session_id, DISPATCH_STREAM)
        if await store.stream_version(ref) < state.version:  # deleted and written again
            state = self._boards[session_id] = BoardState()
        for event in await store.read_stream(ref, state.version):
            state.apply(event.fields)
            state.version = event.version
        return state


def _kept(kept: OrderedDict[str, T], session_id: str, make: Callable[[], T]) -> T:
    found = kept.get(session_id)
    if found is None:
        found = kept[session_id] = make()
        while len(kept) > KEPT_SESSIONS:
            kept.popitem(last=False)
    kept.move_to_end(session_id)
    return found
