"""A grown LangGraph thread, turn by turn, on LedgerSaver beside LangGraph's SqliteSaver.

A turn is `graph.invoke` of a MessagesState graph whose scripted model asks for one tool and
then answers (messages of about 300 bytes), on one thread. For each saver: turns per second
over turns 1-20 and 181-200 (the ratio to SqliteSaver's in the same run), and the bytes the
thread takes at 50 and at 200 turns (a file's size, or Redis's MEMORY USAGE of its keys). The
savers take turns a block at a time, so the machine's drift falls on all of them alike.

    python scripts/bench_threads.py            # 200 turns, blocks of 10
    python scripts/bench_threads.py --turns 60 # a smaller run
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

import ledger_bus as lb
from ledger_bus.adapters.langgraph import LedgerSaver
from ledger_bus.server import LocalServer

WORDS = "the auth service rotates its signing keys every thirty days; "


@tool
def lookup(key: str) -> str:
    """Look something up."""
    return (WORDS * 5)[:300] + key


def graph_on(saver: BaseCheckpointSaver[Any]) -> Any:
    """Human -> model (asks for lookup) -> lookup -> model (answers)."""

    def agent(state: MessagesState) -> dict[str, Any]:
        last = state["messages"][-1]
        turn = sum(isinstance(m, HumanMessage) for m in state["messages"])
        if isinstance(last, ToolMessage):
            return {"messages": [AIMessage((WORDS * 5)[:300], id=f"answer-{turn}")]}
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
    """One saver's thread, turned a block at a time."""

    def __init__(self, name: str, saver: BaseCheckpointSaver[Any], size: Callable[[], int]):
        self.name, self.size = name, size
        self.graph = graph_on(saver)
        self.config: RunnableConfig = {"configurable": {"thread_id": "bench-thread"}}
        self.turn = 0
        self.seconds: dict[int, float] = {}  # turn -> its wall time
        self.bytes: dict[int, int] = {}

    def block(self, turns: int) -> None:
        for _ in range(turns):
            self.turn += 1
            question = HumanMessage((WORDS * 5)[:300] + f" #{self.turn}")
            start = time.perf_counter()
            self.graph.invoke({"messages": [question]}, self.config)
            self.seconds[self.turn] = time.perf_counter() - start
            if self.turn in (50, 200):
                self.bytes[self.turn] = self.size()

    def rate(self, first: int, last: int) -> float:
        return (last - first + 1) / sum(self.seconds[t] for t in range(first, last + 1))


def file_size(path: Path) -> Callable[[], int]:
    def size() -> int:
        total = path.stat().st_size
        wal = Path(f"{path}-wal")
        return total + (wal.stat().st_size if wal.exists() else 0)

    return size


def redis_size(store: lb.EventStore, session: str) -> Callable[[], int]:
    admin = store.server_admin()
    assert admin is not None
    return lambda: sum(admin.memory_of([session])[session].values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--block", type=int, default=10)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="bench-threads-"))
    with LocalServer(appendonly=False) as server:
        redis = lb.connect(server.url)
        sqlite_file = folder / "sqlite-saver.db"
        conn = sqlite3.connect(sqlite_file, check_same_thread=False)
        ledger_file = folder / "ledger.db"
        ledger_sqlite = lb.connect(f"sqlite:///{ledger_file}")
        sides = [
            Side("SqliteSaver (a file)", SqliteSaver(conn), file_size(sqlite_file)),
            Side("LedgerSaver on Redis", LedgerSaver(redis), redis_size(redis, "bench-thread")),
            Side("LedgerSaver on SQLite", LedgerSaver(ledger_sqlite), file_size(ledger_file)),
        ]
        while sides[0].turn < args.turns:
            for side in sides:
                side.block(min(args.block, args.turns - side.turn))
        base = sides[0]
        late = max(1, args.turns - 19)
        print(f"{args.turns} turns on one thread, pid {os.getpid()}, Redis at {server.url}")
        for side in sides:
            early_rate, late_rate = side.rate(1, min(20, args.turns)), side.rate(late, args.turns)
            growth = (
                f"{side.bytes[200] / side.bytes[50]:.1f}x ({side.bytes[200]:,} bytes at 200)"
                if 200 in side.bytes and 50 in side.bytes
                else "-"
            )
            print(
                f"{side.name:24} turns 1-20 {early_rate:7.1f}/s"
                f" ({early_rate / base.rate(1, min(20, args.turns)):.2f}x)"
                f"   turns {late}-{args.turns} {late_rate:7.1f}/s"
                f" ({late_rate / base.rate(late, args.turns):.2f}x)   bytes 200/50 {growth}"
            )
        redis.close()
        ledger_sqlite.close()
        conn.close()


if __name__ == "__main__":
    main()
