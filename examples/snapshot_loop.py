"""A plain agent loop that survives a SIGKILL: snapshot plus tail replay.

    python examples/snapshot_loop.py redis://127.0.0.1:6379 loop-1 run-1 [TURNS]

Each turn the loop does its work, records what the turn did, and every fifth turn snapshots its
whole state. Killed at any point and started again, it rebuilds its state from the newest
snapshot and the turns recorded after it, and goes on from the turn after the last one recorded:
no turn is done twice, none is lost.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import ledger_bus as lb
from ledger_bus import RecordedEvent, Recorder

SNAPSHOT_EVERY = 5


def apply(state: dict[str, Any], event: RecordedEvent) -> None:
    """One recorded turn, applied to the loop's state."""
    if event.get("kind") == "turn.done":
        state["turn"] = event["turn"]
        state["total"] += event["value"]


def main(url: str, session: str, run_id: str, turns: int) -> None:
    store = lb.connect(url, prefix=os.environ.get("LEDGER_BUS_PREFIX", "lb"))
    # The run holds a lease while it runs; a killed loop's lasts lease_ttl_ms more, which its
    # successor waits out.
    recorder = Recorder(store, session, "looper", lease_ttl_ms=2_000)
    with recorder.run(run_id, resume=True, lease_wait_ms=5_000) as run:
        recovered = run.recovered
        state = recovered.state or {"turn": 0, "total": 0}
        for event in recovered.events:
            apply(state, event)
        while state["turn"] < turns:
            turn = state["turn"] + 1
            value = turn * turn  # the turn's work
            run.mutate("turn.done", turn=turn, value=value)
            state["turn"], state["total"] = turn, state["total"] + value
            if turn % SNAPSHOT_EVERY == 0:
                run.snapshot(state)
            print(turn, state["total"], flush=True)
    store.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]) if len(sys.argv) > 4 else 100)
