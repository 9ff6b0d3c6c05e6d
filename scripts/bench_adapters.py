"""The LangGraph checkpointer beside LangGraph's own savers, measured in the same run.

One operation is a `put` of a checkpoint (three channels, one of them changed, a few hundred
bytes of state) followed by a `get_tuple` of the thread's latest checkpoint, as a graph's step
does. Savers: LangGraph's InMemorySaver and SqliteSaver (a file), and LedgerSaver on a private
Redis, on SQLite (a file) and in memory. Alternating rounds; the median operations per second.

    python scripts/bench_adapters.py            # 9 rounds of 300 operations
    python scripts/bench_adapters.py --quick    # 3 rounds of 100
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver

import ledger_bus as lb
from ledger_bus.adapters.langgraph import LedgerSaver
from ledger_bus.server import LocalServer

MESSAGES = [{"role": "user", "content": "look up the auth service's jwt rotation policy"}] * 4


def operation(saver: BaseCheckpointSaver[Any]) -> Callable[[int], None]:
    """put + get_tuple on a thread of its own, the checkpoint chained to the one before."""
    thread = uuid.uuid4().hex
    config: RunnableConfig = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    versions = {"messages": 0, "step": 0, "plan": 1}

    def step(i: int) -> None:
        nonlocal config
        checkpoint = empty_checkpoint()
        versions["messages"] += 1
        versions["step"] += 1
        checkpoint["channel_values"] = {"messages": MESSAGES, "step": i, "plan": "refund"}
        checkpoint["channel_versions"] = dict(versions)
        new: dict[str, str | int | float] = {
            "messages": versions["messages"],
            "step": versions["step"],
        }
        if i == 0:
            new["plan"] = 1
        config = saver.put(config, checkpoint, {"source": "loop", "step": i}, new)
        found = saver.get_tuple({"configurable": {"thread_id": thread}})
        assert found is not None
        assert found.checkpoint["channel_values"]["step"] == i

    return step


def rate(step: Callable[[int], None], n: int) -> float:
    start = time.perf_counter()
    for i in range(n):
        step(i)
    return n / (time.perf_counter() - start)


def main(rounds: int, n: int) -> None:
    with LocalServer(appendonly=False) as server, tempfile.TemporaryDirectory() as where:
        base = Path(where)
        savers: dict[str, BaseCheckpointSaver[Any]] = {
            "InMemorySaver (LangGraph)": InMemorySaver(),
            "SqliteSaver (LangGraph)": SqliteSaver(
                sqlite3.connect(base / "lg.db", check_same_thread=False)
            ),
            "LedgerSaver, Redis": LedgerSaver(lb.connect(server.url, prefix="bench")),
            "LedgerSaver, SQLite": LedgerSaver(lb.connect(f"sqlite:///{base / 'ledger.db'}")),
            "LedgerSaver, memory://": LedgerSaver(lb.connect("memory://")),
        }
        found: dict[str, list[float]] = {name: [] for name in savers}
        for saver in savers.values():
            rate(operation(saver), max(1, n // 10))
        for _ in range(rounds):
            for name, saver in savers.items():
                found[name].append(rate(operation(saver), n))
        print(f"server: {server.binary}; {rounds} rounds of {n} put + get_tuple")
        reference = statistics.median(found["SqliteSaver (LangGraph)"])
        for name, rates in found.items():
            median = statistics.median(rates)
            print(f"{name:<28} {median:>9,.0f} ops/s   {median / reference:5.2f}x SqliteSaver")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds of 100")
    args = parser.parse_args()
    main(3 if args.quick else 9, 100 if args.quick else 300)
