"""Reconcile pass time: it should grow with open attempts, not with history or idle sessions.

    python scripts/bench_reconciler.py [--quick]

Compares a pass over a session of 1e6 events against one of 1e3, each with the same 10 open
attempts (target: within 1.5x), and times a pass over 10,000 sessions of which 100 have open
attempts (only those 100 are in the index).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import ledger_bus as lb
from ledger_bus.demo.server import LocalServer
from ledger_bus.operations.reconciler import Reconciler, ReconcilerConfig
from ledger_bus.store.base import EventStore

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import ARGS


def fill_history(store: EventStore, session: str, events: int) -> None:
    """A long history with nothing open in it."""
    ref = lb.StreamId(session, "history")
    event = {"type": "message", "agent": "a", "body": str(ARGS)}
    for start in range(0, events, 1000):
        store.append(ref, lb.ANY, f"h{start}", [event] * min(1000, events - start))


def open_calls(store: EventStore, session: str, count: int) -> None:
    calls = [
        {
            "type": "tool_call",
            "agent": "a",
            "tool": "deploy",
            "args": {},
            "attempt_id": f"{session}-a{i}",
        }
        for i in range(count)
    ]
    store.append(lb.StreamId(session, "calls"), lb.ANY, "open", calls)


def median_pass(reconciler: Reconciler, passes: int) -> float:
    samples = []
    for _ in range(passes):
        start = time.perf_counter()
        reconciler.run_pass()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    options = parser.parse_args()
    big = 10_000 if options.quick else 1_000_000
    with LocalServer(appendonly=False) as server:
        config = ReconcilerConfig(grace_s=0)
        reconcilers = {}
        for size in (1_000, big):
            store = lb.connect(server.url, prefix=f"r{size}")
            fill_history(store, "history", size)
            open_calls(store, "history", 10)
            reconcilers[size] = Reconciler(store, config, on_action=lambda r: None)
            reconcilers[size].run_pass()  # the first pass flags; the rest only look
        small_ms, big_ms = 0.0, 0.0
        for _ in range(5):  # alternate, so drift in machine speed hits both alike
            small_ms += median_pass(reconcilers[1_000], 20)
            big_ms += median_pass(reconcilers[big], 20)
        print(
            f"pass over 1 session, 10 open: {1_000:>9,} events {small_ms / 5:6.2f} ms;"
            f" {big:>9,} events {big_ms / 5:6.2f} ms; ratio {big_ms / small_ms:4.2f}x"
            "  (target <= 1.5x)"
        )

        store = lb.connect(server.url, prefix="many")
        sessions = 1_000 if options.quick else 10_000
        for s in range(sessions):
            ref = lb.StreamId(f"s{s}", "main")
            store.append(ref, 0, "m", [{"type": "message", "agent": "a", "body": "hello"}])
            if s % (sessions // 100) == 0:
                open_calls(store, f"s{s}", 1)
        reconciler = Reconciler(store, config, on_action=lambda r: None)
        first = reconciler.run_pass()
        print(
            f"pass over {sessions:,} sessions, {first.sessions} with open attempts:"
            f" {median_pass(reconciler, 20):6.2f} ms (the first pass, flagging"
            f" {first.flagged}: {first.seconds * 1000:.1f} ms)"
        )


if __name__ == "__main__":
    main()
