"""The TypeScript SDK beside raw ioredis and beside the Python package, in one run on one
private server: a single-event append against one XADD round trip (target: >= 0.7x), a
100-event append against 100 pipelined XADDs, and the same appends from Python against raw
redis-py. Never part of the tests: wall-clock numbers depend on the machine.

    python scripts/bench_typescript.py [--seconds 2]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import redis

import ledger_bus as lb
from ledger_bus.demo.server import LocalServer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import PAYLOAD, pipelined_xadds, tool_call

TYPESCRIPT = Path(__file__).resolve().parent.parent / "typescript"


def rate(op: Callable[[int], object], seconds: float) -> float:
    """Operations a second of `op(i)`, back to back for `seconds`, after a warm-up."""
    for i in range(200):
        op(-i - 1)
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        op(n)
        n += 1
    return n / (time.perf_counter() - start)


def python_side(url: str, seconds: float) -> dict[str, float]:
    raw = redis.Redis.from_url(url)
    store = lb.connect(url, prefix=f"benchpy{time.time_ns()}")
    single, batch = lb.StreamId("bench-py", "single"), lb.StreamId("bench-py", "batch")
    state = {"version": 0, "batches": 0}

    def append_1(i: int) -> None:
        done = store.append(single, state["version"], f"s{i}", [tool_call(i)])
        state["version"] = done.last_version

    def append_100(_: int) -> None:
        n = state["batches"]
        store.append(batch, lb.ANY, f"b{n}", [tool_call(n * 100 + k) for k in range(100)])
        state["batches"] = n + 1

    found = {
        "raw_xadd": rate(lambda _: raw.xadd("raw:py", {"p": PAYLOAD}), seconds),
        "append_1": rate(append_1, seconds),
        "raw_xadd_100": rate(lambda _: pipelined_xadds(raw), seconds),
        "append_100": rate(append_100, seconds),
    }
    store.close()
    raw.close()
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="per measure")
    options = parser.parse_args()
    with LocalServer(appendonly=False) as server:
        node = subprocess.run(
            ["node", "--import", "tsx", "bench/append.ts", server.url, str(options.seconds)],
            cwd=TYPESCRIPT,
            capture_output=True,
            text=True,
            check=True,
        )
        ts = json.loads(node.stdout)
        py = python_side(server.url, options.seconds)
    print(f"{'':34} {'TypeScript':>12} {'Python':>12}")
    print(f"{'raw XADD round trips/s':34} {ts['raw_xadd']:12.0f} {py['raw_xadd']:12.0f}")
    print(f"{'single-event appends/s':34} {ts['append_1']:12.0f} {py['append_1']:12.0f}")
    print(
        f"{'  ratio to raw (target >= 0.7x)':34} {ts['append_1'] / ts['raw_xadd']:11.2f}x"
        f" {py['append_1'] / py['raw_xadd']:11.2f}x"
    )
    print(f"{'100 pipelined XADDs/s':34} {ts['raw_xadd_100']:12.0f} {py['raw_xadd_100']:12.0f}")
    print(f"{'100-event appends/s':34} {ts['append_100']:12.0f} {py['append_100']:12.0f}")
    print(
        f"{'  ratio to raw':34} {ts['append_100'] / ts['raw_xadd_100']:11.2f}x"
        f" {py['append_100'] / py['raw_xadd_100']:11.2f}x"
    )
    print(f"{'TypeScript single appends / Python':34} {ts['append_1'] / py['append_1']:11.2f}x")


if __name__ == "__main__":
    main()
