"""What a LangGraph saver keeps in its process, with many long threads: 1,000 threads of 200
turns read through one LedgerSaver, its cap against what it holds and the process's RSS.

One thread is grown turn by turn with the graph of bench_adapters.py (a MessagesState graph whose
scripted model asks for one tool and then answers, ~300-byte messages); its events are then
written again as 999 more threads (the same records in sessions of their own, so the store's
work is not the subject). One saver then reads every thread's state, the least recent first:
each read folds the thread into the saver's view, and past the cap the threads used least
recently are forgotten. Printed every 100 threads: `saver.memory()`, the cap, the RSS.

    python scripts/bench_memory.py                         # 1,000 threads, the default cap
    python scripts/bench_memory.py --threads 200 --cap 64  # a cap of 64 MiB
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path
from typing import Any

from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig

import ledger_bus as lb
from ledger_bus.adapters.langgraph import LedgerSaver
from ledger_bus.adapters.langgraph.saver import DEFAULT_MAX_BYTES
from ledger_bus.demo.server import LocalServer
from ledger_bus.store.base import ServerAdmin

sys.path.insert(0, str(Path(__file__).parent))
from bench_adapters import TEXT, graph_on

MIB = 1024 * 1024


def rss_mib() -> float:
    """The process's resident set now, from /proc (ru_maxrss is the peak)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def grow(store: lb.EventStore, thread: str, turns: int) -> None:
    graph = graph_on(LedgerSaver(store))
    config: RunnableConfig = {"configurable": {"thread_id": thread}}
    for turn in range(1, turns + 1):
        graph.invoke({"messages": [HumanMessage(f"{TEXT} #{turn}")]}, config)


def copy_records(store: lb.EventStore, source: str, target: str) -> None:
    """The source thread's records, written again as the session `target`."""
    info = store.session_info(source)
    limit = store.limits.max_events_per_append
    for s in info.streams:
        events = [dict(e.fields) for e in store.read_stream(lb.StreamId(source, s.name))]
        for n in range(0, len(events), limit):
            chunk = events[n : n + limit]
            store.append(lb.StreamId(target, s.name), lb.ANY, f"copy:{n}", chunk)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1000)
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--cap", type=int, default=DEFAULT_MAX_BYTES // MIB, help="MiB")
    args = parser.parse_args()
    with LocalServer(appendonly=False) as server:
        store = lb.connect(server.url)
        start = time.perf_counter()
        grow(store, "thread-0", args.turns)
        grown = time.perf_counter() - start
        for n in range(1, args.threads):
            copy_records(store, "thread-0", f"thread-{n}")
        one = (
            sum(store.memory_of(["thread-0"])["thread-0"].values())
            if isinstance(store, ServerAdmin)
            else 0
        )
        print(
            f"{args.threads} threads of {args.turns} turns: one grown in {grown:.0f} s,"
            f" {one / MIB:.1f} MiB of Redis each; cap {args.cap} MiB; RSS {rss_mib():.0f} MiB"
            " before reading"
        )
        saver = LedgerSaver(store, max_bytes=args.cap * MIB)
        graph = graph_on(saver)
        largest = 0
        start = time.perf_counter()
        for n in range(args.threads):
            config: RunnableConfig = {"configurable": {"thread_id": f"thread-{n}"}}
            values: Any = graph.get_state(config).values
            assert len(values["messages"]) == 4 * args.turns
            largest = max(largest, saver.memory())
            if (n + 1) % 100 == 0 or n + 1 == args.threads:
                print(
                    f"  {n + 1:5} threads read: saver.memory() {saver.memory() / MIB:7.1f} MiB"
                    f" (largest {largest / MIB:.1f}), RSS {rss_mib():7.0f} MiB,"
                    f" {(n + 1) / (time.perf_counter() - start):.1f} threads/s"
                )
        store.close()


if __name__ == "__main__":
    main()
