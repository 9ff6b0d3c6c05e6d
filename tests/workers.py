"""Programs the tests run as separate OS processes: `python -m tests.workers NAME ARGS...`."""

from __future__ import annotations

import sys

import ledger_bus as lb


def race(url: str, prefix: str, worker: str, appends: int) -> None:
    """Append to one shared stream with expected versions, retrying each conflict."""
    store = lb.connect(url, prefix=prefix)
    ref = lb.StreamId("race", "shared")
    conflicts = 0
    for number in range(appends):
        event = {"type": "message", "agent": worker, "body": f"{worker}-{number}"}
        while True:
            try:
                store.append(ref, store.stream_version(ref), f"{worker}-{number}", [event])
                break
            except lb.VersionConflict:
                conflicts += 1
    store.close()
    print(conflicts)


if __name__ == "__main__":
    name, *args = sys.argv[1:]
    if name == "race":
        race(args[0], args[1], args[2], int(args[3]))
    else:
        raise SystemExit(f"unknown worker {name}")
