"""What the session page shows beside its timeline: the runs with their delegations and status,
and the dispatch board, each a fold kept by the view per session and brought up to date from
where it was folded to, so a refresh reads only what committed since.

The runs are what the session's events say, whichever adapter wrote them and in whichever
stream: a run starts with `run.started` (or `run.resumed`) and ends with `run.finished`, both
naming it (`run_id`, or a Recorder's `run-<id>` stream); its parent is the run its start names
(`parent_run`) or the run whose `delegate` call named it (`args.child_run`). A Recorder keeps
them in `run-<id>` streams, Google ADK in `adk.events` beside its own records, LangGraph in its
checkpoint streams, the Agents SDK in `oa.runs`, Pi in `pi.<id>`, AgentGo in `run-<id>` beside
`agentgo.<id>`: the fold reads the session's log, in commit order, once from its start and then
from the cursor it reached. The board is the fold of the `dispatch` stream alone.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Final, TypeVar

from ledger_bus.board.dispatches import STREAM as DISPATCH_STREAM
from ledger_bus.board.dispatches import BoardState, Window, is_open, window
from ledger_bus.model.ids import StreamId, parse_cursor
from ledger_bus.model.jsontext import JSONObject
from ledger_bus.model.records import RecordedEvent, SessionInfo
from ledger_bus.store.async_store import AsyncStore
from ledger_bus.store.base import PAGE

T = TypeVar("T")
KEPT_SESSIONS: Final = 256  # folds kept in memory, the least recently looked at dropped first
RUN_PREFIX: Final = "run-"
# Events a fold reads at a time: the store's own page, which it reads whatever is asked for
# (reads of 200 made the first look at 100,000 events five times as long).
FOLD_PAGE: Final = PAGE


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
    """The session's runs, folded from its log in commit order."""

    first: str | None = None  # the session's first cursor then: another means it was rewritten
    last: str | None = None  # the cursor folded to
    versions: dict[str, int] = field(default_factory=dict)  # each stream's version folded to
    runs: dict[str, RunNode] = field(default_factory=dict)
    delegated: dict[str, tuple[str, str]] = field(
        default_factory=dict
    )  # child -> parent, objective
    ordered: list[RunNode] | None = None  # the tree, as last made; None once an event changed it

    def rewritten(self, info: SessionInfo) -> bool:
        """Whether the session was deleted (or a stream of it) and written again since."""
        streams = {s.name: s.version for s in info.streams}
        return self.first != info.first_cursor or any(
            streams.get(name, 0) < version for name, version in self.versions.items()
        )

    def behind(self, info: SessionInfo) -> bool:
        """Whether the session holds events past the cursor folded to."""
        if info.last_cursor is None:
            return False
        return self.last is None or parse_cursor(self.last) < parse_cursor(info.last_cursor)

    def take(self, events: list[RecordedEvent]) -> None:
        """Fold a page of the session's log, the next after the cursor folded to."""
        for event in events:
            self.apply(event)
            self.versions[event.stream.name] = event.version
            self.last = event.cursor

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
    record: JSONObject


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
        if fold.last is not None and fold.rewritten(info):
            fold = self._runs[session_id] = RunsFold()
        fold.first = info.first_cursor
        while fold.behind(info):  # up to what `info` saw: a session written on and on ends
            page = await store.scan_session(
                session_id, fold.last, FOLD_PAGE, resolve_artifacts=False
            )
            fold.take(page)
            if len(page) < FOLD_PAGE:
                break
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
