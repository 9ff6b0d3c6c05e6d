"""Programs the tests run as separate OS processes:
`python -m tests.support.workers NAME ARGS...`."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Any

import ledger_bus as lb


def race(url: str, prefix: str, worker: str, appends: int, start_at: float) -> None:
    """Append to one shared stream with expected versions, retrying each conflict; all workers
    start at `start_at` (epoch seconds), so that they really overlap."""
    store = lb.connect(url, prefix=prefix)
    ref = lb.StreamId("race", "shared")
    store.stream_version(ref)  # connected before the start
    time.sleep(max(0.0, start_at - time.time()))
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


def consume(
    url: str,
    prefix: str,
    session: str,
    consumer: str,
    out_path: str,
    claim_idle_ms: int,
    handle_ms: int,
) -> None:
    """A group consumer logging each event handled ("H body") and each batch acked ("A ...")."""
    from ledger_bus.agent.tailer import Tailer, TailerOptions

    store = lb.connect(url, prefix=prefix)
    options = TailerOptions(count=20, block_ms=200, claim_idle_ms=claim_idle_ms or None)
    tailer = Tailer(store, session, "group", consumer, options)
    stop = install_stop()
    with open(out_path, "a", encoding="utf-8") as out:
        while not stop.is_set():
            batch = tailer.poll()
            for delivery in batch:
                time.sleep(handle_ms / 1000)
                out.write(f"H {delivery.event['body']}\n")
                out.flush()
            if batch:
                tailer.ack(batch)
                out.write("A " + " ".join(d.event["body"] for d in batch) + "\n")
                out.flush()
    store.close()


def install_stop() -> threading.Event:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    return stop


def recorded(url: str, prefix: str, session: str, run_id: str, marker: str, safe: str) -> None:
    """A run that completes one call, then hangs inside a second until it is killed."""
    from ledger_bus.agent.recorder import Recorder

    store = lb.connect(url, prefix=prefix)
    recorder = Recorder(store, session, "agent", lease_ttl_ms=3000)
    with recorder.run(run_id) as run:
        run.snapshot({"turn": 1, "notes": ["looked up the ticket"]})
        run.call("lookup", {"ticket": 7}, lambda ticket: side_effect(marker, f"lookup {ticket}"))
        print("calling the slow tool", flush=True)
        run.call(
            "deploy", {"env": "prod"}, lambda env: hang(marker, env), safe_to_replay=safe == "safe"
        )


def chatty(url: str, prefix: str, session: str, marker: str, ending: str) -> None:
    """A resumed run that says things, changes state and calls tools between them; with
    `ending` "hang" it hangs inside its last call until it is killed, else it finishes."""
    from ledger_bus.agent.recorder import Recorder

    store = lb.connect(url, prefix=prefix)
    recorder = Recorder(store, session, "w3", lease_ttl_ms=1000)
    with recorder.run("w3", resume=True, lease_wait_ms=5000) as run:
        run.message("w3 starting 30 lookups")
        run.mutate("task.claimed", task_id="t7")
        run.call("lookup", {"n": 1}, lambda n: side_effect(marker, f"lookup {n}"))
        run.message("halfway", step_id="s2")
        run.call(
            "deploy",
            {"env": "prod"},
            lambda env: hang(marker, env) if ending == "hang" else side_effect(marker, env),
            safe_to_replay=True,
        )
        run.mutate("task.done", task_id="t7")


def side_effect(marker: str, what: str) -> dict[str, str]:
    with open(marker, "a", encoding="utf-8") as out:
        out.write(what + "\n")
    return {"done": what}


def hang(marker: str, env: str) -> None:
    side_effect(marker, f"deploy {env} started")
    time.sleep(3600)


def rewrite_killed(url: str, prefix: str, what: str, kill_before: str) -> None:
    """Run one rewrite (`clear` of an Agents SDK session, `prune` or `delete_for_runs` of a
    LangGraph thread) and die by SIGKILL just before its `kill_before`-th write of a bound or an
    append, its appends made two events at most, so that a kill lands inside it."""
    import asyncio

    store = lb.connect(url, prefix=prefix)
    writes = 0

    def counted(write: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            nonlocal writes
            writes += 1
            if writes == int(kill_before):
                os.kill(os.getpid(), signal.SIGKILL)
            return write(*args, **kwargs)

        return wrapper

    store.append_op = counted(store.append_op)  # type: ignore[method-assign]
    store.bound_stream_op = counted(store.bound_stream_op)  # type: ignore[method-assign]
    if what == "clear":
        from ledger_bus.adapters.openai_agents import LedgerSession

        asyncio.run(LedgerSession("rewritten", store).clear_session())
        return
    from ledger_bus.adapters.langgraph import LedgerSaver

    saver = LedgerSaver(store)
    saver._chunk = lambda: 2  # type: ignore[method-assign]
    if what == "prune":
        saver.prune(["rewritten"], strategy="keep_latest")
    else:
        saver.delete_for_runs([str(run) for run in sys.argv[6:]])


def archive_killed(url: str, prefix: str, archive: str, session: str, kill_at: str) -> None:
    """Archive a session, and die by SIGKILL as step `kill_at` begins
    (ledger_bus.operations.archiving)."""
    from ledger_bus.operations.archiving import archive_session
    from ledger_bus.store.redis.tiered import TieredStore

    store = lb.connect(url, prefix=prefix, archive=archive)
    assert isinstance(store, TieredStore)

    def step(name: str) -> None:
        if name == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    archive_session(store, store.archive, session, on_step=step)


if __name__ == "__main__":
    name, *args = sys.argv[1:]
    if name == "race":
        race(args[0], args[1], args[2], int(args[3]), float(args[4]))
    elif name == "consume":
        consume(args[0], args[1], args[2], args[3], args[4], int(args[5]), int(args[6]))
    elif name == "recorded":
        recorded(*args)
    elif name == "chatty":
        chatty(*args)
    elif name == "rewrite_killed":
        rewrite_killed(*args[:4])
    elif name == "archive_killed":
        archive_killed(*args)
    else:
        raise SystemExit(f"unknown worker {name}")
