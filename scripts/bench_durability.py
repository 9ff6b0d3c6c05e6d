"""What durability costs: single-event appends per second under each AOF setting.

    python scripts/bench_durability.py [--appends N]

Each setting gets its own private server in a temp dir on this machine's disk.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import ledger_bus as lb
from ledger_bus.server import LocalServer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import tool_call

SETTINGS = {
    "appendonly no": (False, []),
    "appendfsync everysec": (True, ["--appendfsync", "everysec"]),
    "appendfsync always": (True, ["--appendfsync", "always"]),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--appends", type=int, default=2000)
    options = parser.parse_args()
    for name, (aof, extra) in SETTINGS.items():
        with LocalServer(appendonly=aof, extra=extra) as server, lb.connect(server.url) as store:
            ref = lb.StreamId("durability", "run")
            best = 0.0
            for attempt in range(3):
                start = time.perf_counter()
                for i in range(options.appends):
                    n = attempt * options.appends + i
                    store.append(ref, n, f"a{n}", [tool_call(n)])
                best = max(best, options.appends / (time.perf_counter() - start))
        print(f"{name:<22} {best:8,.0f} single-event appends/s")


if __name__ == "__main__":
    main()
