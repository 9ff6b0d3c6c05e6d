"""The Python recorder's events for the calls TestSameEventsAsPython makes in Go: one JSON line
per event of the session, in commit order, without its cursor and commit time (which only the
clock decides). Run by the Go test with the repository's Python."""

from __future__ import annotations

import contextlib
import json
import sys
from typing import Any

import ledger_bus as lb
from ledger_bus.agent.recorder import Recorder, Run, ToolFailed, UnresolvedAttempt
from ledger_bus.operations.resolve import resolve_attempt

SESSION = "shapes"
TTL_MS = 300
WAIT_MS = 5000


def crash(run: Run) -> None:
    """The process dies inside a call: no renewal, no release, nothing more written."""
    run._stop.set()
    if run._renewer:
        run._renewer.join()


def fail(why: str) -> Any:
    raise ValueError("bad")


def main() -> None:
    store = lb.connect("memory://")
    rec = Recorder(store, SESSION, "coder", lease_ttl_ms=TTL_MS)

    with rec.run("r1", parents=["p-1"], task="demo") as run:
        run.message("looking")
        run.call("search", {"q": "x", "n": 2}, lambda q, n: {"hits": [1, 2.5], "q": q})
        run.call("fetch", {}, lambda: "page", safe_to_replay=True)
        run.mutate("plan.set", steps=3, note=None)
        with contextlib.suppress(ValueError):
            run.call("boom", {"why": "test"}, fail)
        run.snapshot({"step": 4, "ratio": 0.5})
        d = run.delegate("tester", "check it", "child1")
        with Recorder(store, SESSION, "tester", lease_ttl_ms=TTL_MS).run(
            d.child_run_id, parents=[d.call_event_id]
        ) as child:
            child.message("checked")
        run.finish_delegation(d, "ok", {"checked": True})
        model_result = {
            "model": "m1",
            "usage": {"input_tokens": 12, "output_tokens": 5, "total_tokens": 17},
            "finish_reason": "stop",
            "cost_usd": 0.25,
            "output": "hi",
        }
        run.call("model", {"model": "m1"}, lambda model: model_result)
        run.call("lookup", {"k": "a"}, lambda k: 1.0, step="lookup-a")

    # r2 dies inside deploy; resumed, it stops there until an operator resolves the call.
    crashed = rec.run("r2")
    crashed.__enter__()
    crashed.call("read", {"path": "a"}, lambda path: "contents")
    crashed._drive(crashed.begin_call_op("deploy", {"env": "prod"}, False, None))
    crash(crashed)
    try:
        with rec.run("r2", resume=True, lease_wait_ms=WAIT_MS) as run:
            run.call("read", {"path": "a"}, lambda path: "again")
            run.call("deploy", {"env": "prod"}, lambda env: "deployed twice")
    except UnresolvedAttempt:
        pass
    resolve_attempt(store, SESSION, "r2/c2#1", "ok", result={"deployed": True})
    with rec.run("r2", resume=True, lease_wait_ms=WAIT_MS) as run:
        run.call("read", {"path": "a"}, lambda path: "again")
        run.call("deploy", {"env": "prod"}, lambda env: "deployed twice")

    # r3 dies inside a tool safe to replay: resumed, it closes the attempt and runs it again.
    crashed = rec.run("r3")
    crashed.__enter__()
    crashed._drive(crashed.begin_call_op("warm", {}, True, None))
    crash(crashed)
    with rec.run("r3", resume=True, lease_wait_ms=WAIT_MS) as run:
        run.call("warm", {}, lambda: "warmed", safe_to_replay=True)

    # r4 fails in its tool; resumed, the recorded error is raised again, the tool not run.
    try:
        with rec.run("r4") as run:
            run.call("t", {}, lambda: fail("once"))
    except ValueError:
        pass
    try:
        with rec.run("r4", resume=True) as run:
            run.call("t", {}, lambda: "yes")
    except ToolFailed:
        pass

    # r1 used again: another incarnation, whose attempt ids carry its run.started's version.
    with rec.run("r1") as run:
        run.call("search", {"q": "y"}, lambda q: {"hits": []})

    for event in store.scan_session(SESSION):
        line = event.to_dict()
        del line["cursor"], line["recorded_at"]
        print(json.dumps(line, sort_keys=True, ensure_ascii=False, separators=(",", ":")))


if __name__ == "__main__":
    sys.exit(main())
