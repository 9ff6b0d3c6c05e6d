"""The Go, TypeScript and Python SDKs side by side, each beside its own raw client (go-redis,
ioredis, redis-py), in one run on one private server: a single-event append against one XADD
round trip (target: >= 0.7x), a 100-event append against 100 pipelined XADDs, and the floor the
append script's server time sets for a single-event append on this machine. Each SDK's appends
are also given as a ratio to Python's in the same run. Never part of the tests: wall-clock
numbers depend on the machine.

    python scripts/bench_languages.py [--seconds 2]
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

ROOT = Path(__file__).resolve().parent.parent
TYPESCRIPT = ROOT / "typescript"
GO = ROOT / "go"


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


def go_side(url: str, seconds: float) -> dict[str, float]:
    """The Go SDK's measures (go/internal/benchappend), and the server time of its script."""
    go = subprocess.run(
        ["go", "run", "./internal/benchappend", url, str(seconds)],
        cwd=GO,
        capture_output=True,
        text=True,
        check=True,
    )
    found: dict[str, float] = json.loads(go.stdout)
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
        sides = {
            "Go": go_side(server.url, options.seconds),
            "TypeScript": json.loads(node.stdout),
            "Python": python_side(server.url, options.seconds),
        }

    def row(label: str, value: Callable[[dict[str, float]], float], unit: str = "") -> None:
        cells = "".join(
            f"{value(m):>12.2f}{unit}" if unit else f"{value(m):>12.0f}" for m in sides.values()
        )
        print(f"{label:36}{cells}")

    print(f"{'':36}" + "".join(f"{name:>12}" for name in sides))
    row("raw XADD round trips/s", lambda m: m["raw_xadd"])
    python = sides["Python"]
    row("single-event appends/s", lambda m: m["append_1"])
    row("  ratio to raw (target >= 0.7x)", lambda m: m["append_1"] / m["raw_xadd"], "x")
    row("  ratio to Python's", lambda m: m["append_1"] / python["append_1"], "x")
    row("100 pipelined XADDs/s", lambda m: m["raw_xadd_100"])
    row("100-event appends/s", lambda m: m["append_100"])
    row("  ratio to raw", lambda m: m["append_100"] / m["raw_xadd_100"], "x")
    row("  ratio to Python's", lambda m: m["append_100"] / python["append_100"], "x")
    # The floor: a single-event append is one round trip whose server side is the script, so
    # at best it takes a raw XADD's round trip with the XADD's server time swapped for the
    # script's (INFO commandstats, measured by the Go side on the same server).
    go = sides["Go"]
    round_trip_us = 1e6 / go["raw_xadd"]
    floor_us = round_trip_us - go["xadd_us"] + go["script_us"]
    print(
        f"server time per call: append script {go['script_us']:.1f} us,"
        f" XADD {go['xadd_us']:.1f} us; raw round trip {round_trip_us:.1f} us"
    )
    print(f"floor for a single-event append: {floor_us:.1f} us ({1e6 / floor_us:.0f}/s)")
    for name, m in sides.items():
        print(
            f"  {name:<11} single-event append {1e6 / m['append_1']:.1f} us:"
            f" {floor_us * m['append_1'] / 1e6:.2f}x of the floor's rate"
        )


if __name__ == "__main__":
    main()
