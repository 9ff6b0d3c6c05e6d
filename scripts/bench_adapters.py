"""The adapters beside what a user would pick instead, turn by turn, measured in one run.

LangGraph: a turn is `graph.invoke` of a compiled MessagesState graph whose scripted model asks
for one tool and then answers (messages of about 300 bytes), on one thread. Savers: LangGraph's
SqliteSaver (a file) and PostgresSaver, and LedgerSaver on a private Redis, on SQLite (a file)
and on PostgreSQL. Reported: turns per second at turns 1-20 and at the last 20, as ratios to
SqliteSaver (and, for PostgreSQL, to PostgresSaver); the bytes of the thread at 200 turns and
at 50; the time of `get_state_history` of the grown thread.

Agents SDK: a turn is `add_items` of four items (a user message, a function call, its output,
the answer; ~300 bytes each) then `get_items()`, on one session. Sessions: the SDK's
SQLiteSession (a file) and RedisSession, and LedgerSession on Redis and on SQLite. Reported as
the graph's, against SQLiteSession and RedisSession.

Google ADK: a turn is `append_event` of a turn's four events (the user's words with a state
change, the model's function call, its response, the model's answer with its token counts;
~300 bytes each) then `get_session(num_recent_events=20)`, as a Runner given that config does.
Services: ADK's DatabaseSessionService on SQLite (a file) and on PostgreSQL, and
LedgerSessionService on Redis, SQLite and PostgreSQL (asyncio stores). Reported: turns per second
at turns 1-20 and at the last 20 (750 turns: 3,000 events), as ratios to the database service
on SQLite (and, for PostgreSQL, on PostgreSQL); then, on the grown session, `get_session` with
`num_recent_events=20` and without a config, and the bytes each keeps.

Pi (typescript/bench/pi.ts, on the Node 22 Pi 1.x needs): a turn is Pi's own agent session's
`prompt` on its fake model provider, a search and an answer of ~300 bytes, with Pi's file
session manager beside PiLedger on Redis; reported as turns per second at turns 1-20 and at the
last 20, as ratios to the file, and the session's bytes.

The sides take turns a block at a time, so the machine's drift falls on all alike. PostgreSQL
is the machine's own (`--pg`, a database made for each side and dropped after); Redis a private
server per run, with the memory settings of deploy/redis.conf (`--redis-defaults`: without).

    python scripts/bench_adapters.py              # 200 turns, blocks of 10
    python scripts/bench_adapters.py --turns 60   # shorter
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

import ledger_bus as lb
from ledger_bus import aio
from ledger_bus.adapters.langgraph import LedgerSaver
from ledger_bus.demo.server import LocalServer

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench import deployed_settings

from tests.support.node import TYPESCRIPT, node22

WORDS = "the auth service rotates its signing keys every thirty days; "
TEXT = (WORDS * 5)[:300]


@tool
def lookup(key: str) -> str:
    """Look something up."""
    return TEXT + key


def graph_on(saver: BaseCheckpointSaver[Any]) -> Any:
    """Human -> model (asks for lookup) -> lookup -> model (answers)."""

    def agent(state: MessagesState) -> dict[str, Any]:
        last = state["messages"][-1]
        turn = sum(isinstance(m, HumanMessage) for m in state["messages"])
        if isinstance(last, ToolMessage):
            return {"messages": [AIMessage(TEXT, id=f"answer-{turn}")]}
        call = {"name": "lookup", "args": {"key": f"k{turn}"}, "id": f"call-{turn}"}
        return {"messages": [AIMessage("", tool_calls=[call], id=f"ask-{turn}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([lookup]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=saver)


class Side:
    """One side's thread or session, turned a block at a time."""

    def __init__(self, name: str, turn: Callable[[int], None], size: Callable[[], int]):
        self.name, self._turn, self.size = name, turn, size
        self.turns = 0
        self.seconds: dict[int, float] = {}
        self.bytes: dict[int, int] = {}
        self.history: float | None = None

    def block(self, turns: int) -> None:
        for _ in range(turns):
            self.turns += 1
            start = time.perf_counter()
            self._turn(self.turns)
            self.seconds[self.turns] = time.perf_counter() - start
            if self.turns in (50, 200):
                self.bytes[self.turns] = self.size()

    def rate(self, first: int, last: int) -> float:
        return (last - first + 1) / sum(self.seconds[t] for t in range(first, last + 1))


def graph_side(name: str, saver: BaseCheckpointSaver[Any], size: Callable[[], int]) -> Side:
    graph = graph_on(saver)
    config: RunnableConfig = {"configurable": {"thread_id": "bench-thread"}}

    def turn(n: int) -> None:
        graph.invoke({"messages": [HumanMessage(f"{TEXT} #{n}")]}, config)

    # One turn on a thread of its own first, not measured: what any saver does once (tables
    # made, connections opened, code paths warmed) is not a turn's cost.
    warm: RunnableConfig = {"configurable": {"thread_id": "warm-up"}}
    graph.invoke({"messages": [HumanMessage(TEXT)]}, warm)
    side = Side(name, turn, size)

    def history() -> None:
        times = []
        for _ in range(3):
            start = time.perf_counter()
            found = list(graph.get_state_history(config))
            times.append(time.perf_counter() - start)
            assert len(found) >= side.turns
        side.history = statistics.median(times)

    side.measure_history = history  # type: ignore[attr-defined]
    return side


def session_side(name: str, make: Callable[[str], Awaitable[Any]], size: Callable[[], int]) -> Side:
    """A session made by `make` on an event loop of its own (an asyncio store's client lives
    on the loop that made it)."""
    loop = asyncio.new_event_loop()
    session = loop.run_until_complete(make("bench-session"))
    warm = loop.run_until_complete(make("warm-up"))  # as the graphs' warm-up turn
    loop.run_until_complete(warm.add_items([{"role": "user", "content": TEXT}]))
    loop.run_until_complete(warm.get_items())

    async def turn(n: int) -> None:
        await session.add_items(
            [
                {"role": "user", "content": f"{TEXT} #{n}"},
                {
                    "type": "function_call",
                    "call_id": f"call-{n}",
                    "name": "lookup",
                    "arguments": f'{{"key": "k{n}"}}',
                },
                {"type": "function_call_output", "call_id": f"call-{n}", "output": TEXT},
                {"role": "assistant", "content": TEXT},
            ]
        )
        items = await session.get_items()
        assert len(items) == 4 * n

    return Side(name, lambda n: loop.run_until_complete(turn(n)), size)


def file_size(path: Path) -> Callable[[], int]:
    """The bytes of a SQLite file's data: its write-ahead log copied in and emptied first, as
    SQLite does every thousand pages on its own (the log's size says when that last happened,
    not how much the file holds)."""

    def size() -> int:
        with sqlite3.connect(path) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        wal = Path(f"{path}-wal")
        return path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)

    return size


def redis_keys_size(url: str, pattern: str) -> Callable[[], int]:
    import redis

    client = redis.Redis.from_url(url)
    return lambda: sum(client.memory_usage(k) or 0 for k in client.scan_iter(pattern))


@contextmanager
def database(pg: str) -> Iterator[tuple[str, Callable[[], int]]]:
    """A database of its own on the PostgreSQL at `pg`: its URL, and its size since made."""
    name = f"bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    url = pg.rsplit("/", 1)[0] + f"/{name}"

    def size() -> int:
        with psycopg.connect(url) as conn:
            row = conn.execute("SELECT pg_database_size(current_database())").fetchone()
            return int(row[0]) if row else 0

    base = size()
    try:
        yield url, lambda: size() - base
    finally:
        with psycopg.connect(pg, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE {name} WITH (FORCE)")


def run(sides: Sequence[Side], turns: int, block: int) -> None:
    while sides[0].turns < turns:
        for side in sides:
            side.block(min(block, turns - side.turns))


def report(title: str, sides: Sequence[Side], bases: dict[str, Side], turns: int) -> None:
    late = max(1, turns - 19)
    early_end = min(20, turns)
    print(title)
    for side in sides:
        ratios = "  ".join(
            f"{side.rate(1, early_end) / base.rate(1, early_end):.2f}x /"
            f" {side.rate(late, turns) / base.rate(late, turns):.2f}x {label}"
            for label, base in bases.items()
        )
        label, base = next(iter(bases.items()))
        growth = (
            f"{side.bytes[200] / side.bytes[50]:.1f}x ({side.bytes[200] / 1e6:.2f} MB at 200,"
            f" {side.bytes[200] / base.bytes[200]:.2f}x {label}'s)"
            if side.bytes.get(50) and 200 in side.bytes and base.bytes.get(200)
            else "-"
        )
        history = f"{side.history * 1000:7.1f} ms" if side.history is not None else ""
        print(
            f"  {side.name:26} turns 1-{early_end} {side.rate(1, early_end):6.1f}/s"
            f"  {late}-{turns} {side.rate(late, turns):6.1f}/s   {ratios}"
            f"   bytes 200/50 {growth}  {history}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--block", type=int, default=10)
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--skip", default="", help="comma-separated: graphs,sessions,adk,pi")
    parser.add_argument("--adk-turns", type=int, default=750, help="4 events a turn")
    parser.add_argument("--redis-defaults", action="store_true", help="not deploy/redis.conf's")
    args = parser.parse_args()
    skip = set(args.skip.split(","))
    folder = Path(tempfile.mkdtemp(prefix="bench-adapters-"))
    print(f"{args.turns} turns, blocks of {args.block}, pid {os.getpid()}, files in {folder}")
    settings = [] if args.redis_defaults else deployed_settings()
    print(f"Redis: {' '.join(settings) or 'its defaults'}")
    with LocalServer(appendonly=False, extra=settings) as server:
        if "graphs" not in skip:
            bench_graphs(args, server, folder)
        if "sessions" not in skip:
            bench_sessions(args, server, folder)
        if "adk" not in skip:
            bench_adk(args, server, folder)
        if "pi" not in skip:
            bench_pi(args, server)


def adk_turn(n: int) -> list[Any]:
    """A turn's four events, as a Runner appends them."""
    from google.adk.events.event import Event
    from google.adk.events.event_actions import EventActions
    from google.genai import types

    invocation, call = f"e-{n}", f"adk-call-{n}"
    usage = types.GenerateContentResponseUsageMetadata(
        prompt_token_count=400 + n, candidates_token_count=60
    )
    asked = types.FunctionCall(id=call, name="lookup", args={"key": f"k{n}", "context": TEXT[:200]})
    answer = types.FunctionResponse(id=call, name="lookup", response={"found": TEXT})
    return [
        Event(
            invocation_id=invocation,
            author="user",
            content=types.Content(role="user", parts=[types.Part(text=f"{TEXT} #{n}")]),
            actions=EventActions(state_delta={"turn": n, "user:seen": n}),
        ),
        Event(
            invocation_id=invocation,
            author="support",
            content=types.Content(role="model", parts=[types.Part(function_call=asked)]),
        ),
        Event(
            invocation_id=invocation,
            author="support",
            content=types.Content(role="user", parts=[types.Part(function_response=answer)]),
        ),
        Event(
            invocation_id=invocation,
            author="support",
            content=types.Content(role="model", parts=[types.Part(text=TEXT)]),
            usage_metadata=usage,
        ),
    ]


class AdkSide(Side):
    """One ADK session service's session, on an event loop of its own (ADK's database service
    and an asyncio store bind their connections to the loop that made them)."""

    def __init__(self, name: str, make: Callable[[], Awaitable[Any]], size: Callable[[], int]):
        from google.adk.sessions.base_session_service import GetSessionConfig

        self.loop = asyncio.new_event_loop()
        self.service = self.loop.run_until_complete(make())
        self.recent = GetSessionConfig(num_recent_events=20)
        self.session = self.loop.run_until_complete(self._create("bench-session"))
        super().__init__(name, lambda n: self.loop.run_until_complete(self._one_turn(n)), size)
        warm = self.loop.run_until_complete(self._create("warm-up"))
        for event in adk_turn(0):
            self.loop.run_until_complete(self.service.append_event(warm, event))
        # Read again after the warm-up, as a Runner reads its session at each invocation: the
        # warm-up changed the user's state, which a Session read before it may not change.
        self.session = self.loop.run_until_complete(self._get(self.recent))

    async def _create(self, session_id: str) -> Any:
        return await self.service.create_session(
            app_name="bench", user_id="u", session_id=session_id, state={"app:plan": "pro"}
        )

    async def _one_turn(self, n: int) -> None:
        for event in adk_turn(n):
            await self.service.append_event(self.session, event)
        self.session = await self._get(self.recent)
        assert len(self.session.events) == min(20, 4 * n)

    async def _get(self, config: Any) -> Any:
        return await self.service.get_session(
            app_name="bench", user_id="u", session_id="bench-session", config=config
        )

    def read(self, config: Any, times: int) -> float:
        """The median seconds of `times` get_session calls with `config`."""
        took = []
        for _ in range(times):
            start = time.perf_counter()
            self.loop.run_until_complete(self._get(config))
            took.append(time.perf_counter() - start)
        return statistics.median(took)


def bench_adk(args: Any, server: LocalServer, folder: Path) -> None:
    from google.adk.sessions import DatabaseSessionService

    from ledger_bus.adapters.adk import LedgerSessionService
    from tests.support.pgserver import LocalPostgres

    with contextlib.ExitStack() as stack:
        pg = args.pg
        try:
            psycopg.connect(pg, connect_timeout=2).close()
        except psycopg.OperationalError:  # no PostgreSQL there: one of the bench's own
            pg = stack.enter_context(LocalPostgres(fsync=False)).url
        theirs_url, theirs_size = stack.enter_context(database(pg))
        ours_url, ours_size = stack.enter_context(database(pg))
        their_file, our_file = folder / "adk-database.db", folder / "adk-ledger.db"

        async def database_on(url: str) -> Any:
            return DatabaseSessionService(url)

        async def ledger_on(url: str, prefix: str = "lb") -> Any:
            return LedgerSessionService(await aio.connect(url, prefix=prefix))

        async_pg = theirs_url.replace("postgresql://", "postgresql+psycopg://")
        sides = [
            AdkSide(
                "DatabaseSessionService on SQLite",
                lambda: database_on(f"sqlite+aiosqlite:///{their_file}"),
                file_size(their_file),
            ),
            AdkSide("DatabaseSessionService on PG", lambda: database_on(async_pg), theirs_size),
            AdkSide(
                "LedgerSessionService on Redis",
                lambda: ledger_on(server.url, "adk"),
                redis_keys_size(server.url, "adk:*"),
            ),
            AdkSide(
                "LedgerSessionService on SQLite",
                lambda: ledger_on(f"sqlite:///{our_file}"),
                file_size(our_file),
            ),
            AdkSide("LedgerSessionService on PG", lambda: ledger_on(ours_url), ours_size),
        ]
        turns = args.adk_turns
        run(sides, turns, args.block)
        title = f"Google ADK, a turn = 4 append_event + get_session(num_recent_events=20); {turns}"
        report(f"{title} turns, ratios turns 1-20 / last 20", sides, {"on SQLite": sides[0]}, turns)
        report(
            "  on PostgreSQL, against the database service on PG:",
            sides[4:],
            {"PG": sides[1]},
            turns,
        )
        print(f"  the grown session ({4 * turns} events): get_session, median of 20 / of 5")
        reads = [(side.read(side.recent, 20), side.read(None, 5), side.size()) for side in sides]
        tail_base, whole_base, size_base = reads[0]
        for side, (tail, whole, size) in zip(sides, reads, strict=True):
            print(
                f"  {side.name:34} num_recent_events=20 {tail * 1000:7.2f} ms"
                f" ({tail / tail_base:.2f}x)   no config {whole * 1000:8.1f} ms"
                f" ({whole / whole_base:.2f}x)   bytes {size / 1e6:.2f} MB"
                f" ({size / size_base:.2f}x)"
            )


def bench_pi(args: Any, server: LocalServer) -> None:
    node = node22()
    if node is None:
        print("Pi: no Node 22.19 or newer (make test installs one into tests/node22); not run")
        return
    bench = [node, "--import", "tsx", "bench/pi.ts", server.url, str(args.turns), str(args.block)]
    done = subprocess.run(bench, cwd=TYPESCRIPT, capture_output=True, text=True, check=True)
    sides = json.loads(done.stdout.strip().splitlines()[-1])
    base = sides["Pi's file session manager"]
    print(f"Pi, a turn = session.prompt (a tool call, then the answer); {args.turns} turns")
    for name, side in sides.items():
        print(
            f"  {name:28} turns 1-20 {side['first']:6.1f}/s ({side['first'] / base['first']:.2f}x)"
            f"  last 20 {side['last']:6.1f}/s ({side['last'] / base['last']:.2f}x)"
            f"  bytes {side['bytes'] / 1e6:.2f} MB ({side['bytes'] / base['bytes']:.2f}x)"
        )


def bench_graphs(args: Any, server: LocalServer, folder: Path) -> None:
    from langgraph.checkpoint.postgres import PostgresSaver

    with database(args.pg) as (theirs_url, theirs_size), database(args.pg) as (ours_url, ours_size):
        sqlite_file, ledger_file = folder / "sqlite-saver.db", folder / "ledger.db"
        conn = sqlite3.connect(sqlite_file, check_same_thread=False)
        pg_conn = psycopg.connect(theirs_url, autocommit=True, prepare_threshold=0)
        postgres_saver = PostgresSaver(pg_conn)  # type: ignore[arg-type]
        postgres_saver.setup()
        redis = lb.connect(server.url, prefix="g")
        on_sqlite = lb.connect(f"sqlite:///{ledger_file}")
        on_pg = lb.connect(ours_url)
        sides = [
            graph_side("SqliteSaver (a file)", SqliteSaver(conn), file_size(sqlite_file)),
            graph_side("PostgresSaver", postgres_saver, theirs_size),
            graph_side(
                "LedgerSaver on Redis",
                LedgerSaver(redis),
                redis_keys_size(server.url, "g:{bench-thread}:*"),
            ),
            graph_side("LedgerSaver on SQLite", LedgerSaver(on_sqlite), file_size(ledger_file)),
            graph_side("LedgerSaver on PostgreSQL", LedgerSaver(on_pg), ours_size),
        ]
        run(sides, args.turns, args.block)
        for side in sides:
            side.measure_history()  # type: ignore[attr-defined]
        report(
            "LangGraph, a turn = graph.invoke; ratios turns 1-20 / last 20;"
            " get_state_history of the thread",
            sides,
            {"SqliteSaver": sides[0]},
            args.turns,
        )
        report(
            "  on PostgreSQL, against PostgresSaver:",
            sides[4:],
            {"PostgresSaver": sides[1]},
            args.turns,
        )
        for store in (redis, on_sqlite, on_pg):
            store.close()
        pg_conn.close()
        conn.close()


def bench_sessions(args: Any, server: LocalServer, folder: Path) -> None:
    import redis as redis_py
    from agents import SQLiteSession
    from agents.extensions.memory.redis_session import RedisSession

    from ledger_bus.adapters.openai_agents import LedgerSession

    theirs_file, ours_file = folder / "sqlite-session.db", folder / "ledger-sessions.db"

    async def sqlite_session(session_id: str) -> Any:
        return SQLiteSession(session_id, theirs_file)

    async def redis_session(session_id: str) -> Any:
        client = redis_py.asyncio.Redis.from_url(server.url)
        return RedisSession(session_id, redis_client=client, key_prefix="rs")

    stores: dict[str, Any] = {}

    async def ours_on_redis(session_id: str) -> Any:  # the SDK is asyncio: an asyncio store
        if "redis" not in stores:
            stores["redis"] = await aio.connect(server.url, prefix="s")
        return LedgerSession(session_id, stores["redis"])

    async def ours_on_sqlite(session_id: str) -> Any:
        if "sqlite" not in stores:
            stores["sqlite"] = lb.connect(f"sqlite:///{ours_file}")
        return LedgerSession(session_id, stores["sqlite"])

    sides = [
        session_side("SQLiteSession (a file)", sqlite_session, file_size(theirs_file)),
        session_side(
            "RedisSession", redis_session, redis_keys_size(server.url, "rs:bench-session*")
        ),
        session_side(
            "LedgerSession on Redis",
            ours_on_redis,
            redis_keys_size(server.url, "s:{bench-session}:*"),
        ),
        session_side("LedgerSession on SQLite", ours_on_sqlite, file_size(ours_file)),
    ]
    run(sides, args.turns, args.block)
    report(
        "Agents SDK, a turn = add_items(4) + get_items(); ratios turns 1-20 / last 20",
        sides,
        {"SQLiteSession": sides[0], "RedisSession": sides[1]},
        args.turns,
    )


if __name__ == "__main__":
    main()
