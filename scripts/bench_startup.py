"""How long the `ledger-bus` command takes to start and do a small thing, as a user runs it
(a process of its own each time), on a private server: `--version` (target < 0.15 s) and `tail`
of a ten-event session (target < 0.3 s). Prints the median of several runs, and what the
imports of a `tail` cost (python -X importtime), the largest first. Never part of the tests.

    python scripts/bench_startup.py [--runs 9]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import ledger_bus as lb
from ledger_bus.demo.server import LocalServer

COMMAND = str(Path(sys.executable).parent / "ledger-bus")


# The command as a user without the `otel` extra runs it: redis-py (8.1) imports the
# OpenTelemetry SDK when it is installed, whether anything uses it or not.
WITHOUT_OTEL = [
    sys.executable,
    "-c",
    "import runpy, sys; sys.modules['opentelemetry'] = None; sys.argv[0] = 'ledger-bus';"
    " runpy.run_module('ledger_bus', run_name='__main__')",
]


def median_run(
    args: list[str], env: dict[str, str], runs: int, command: list[str] | None = None
) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run(
            [*(command or [COMMAND]), *args], env=env, capture_output=True, check=False
        )
        times.append(time.perf_counter() - start)
        if done.returncode != 0:
            raise SystemExit(f"ledger-bus {' '.join(args)} failed: {done.stderr.decode()}")
    return statistics.median(times)


def heaviest_imports(env: dict[str, str], count: int = 8) -> list[tuple[int, str]]:
    """The top-level imports of a `tail` by their cumulative time, in microseconds."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "ledger_bus", "tail", "s1"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    found = []
    for line in done.stderr.splitlines():
        parts = line.removeprefix("import time:").split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            name = parts[2].rstrip()
            depth = len(name) - len(name.lstrip())
            if depth <= 2:  # a module the command itself asked for, or one level below
                found.append((int(parts[1]), name.strip()))
    return sorted(found, reverse=True)[:count]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=9)
    options = parser.parse_args()
    with LocalServer(appendonly=False) as server:
        with lb.connect(server.url) as store:
            events = [{"type": "message", "agent": "a", "body": f"m{i}"} for i in range(10)]
            store.append(lb.StreamId("s1", "main"), 0, "a1", events)
        env = {**os.environ, "LEDGER_BUS_URL": server.url}
        version = median_run(["--version"], env, options.runs)
        tail = median_run(["-o", "jsonl", "tail", "s1"], env, options.runs)
        print(f"ledger-bus --version       {version:6.3f} s   (target < 0.15 s)")
        bare = median_run(["-o", "jsonl", "tail", "s1"], env, options.runs, WITHOUT_OTEL)
        print(f"ledger-bus tail s1         {tail:6.3f} s   (target < 0.3 s)")
        print(f"  the same, OpenTelemetry not installed: {bare:6.3f} s")
        print("the heaviest imports of a tail:")
        for micros, name in heaviest_imports(env):
            print(f"  {micros / 1000:7.1f} ms  {name}")


if __name__ == "__main__":
    main()
