"""A process that holds runs' leases as the Python recorder does, told what to do a line at a
time on stdin, answering a line each on stdout: what the fencing drills stop and continue.

    python -m tests.support.lease_holder URL PREFIX SESSION LEASE_TTL_MS

Commands (RUN a run id):
    start RUN        open the run (its lease taken, run.started written)
    take RUN         take a crashed run's lease for a resume, writing nothing yet
    go RUN           after take: the resume's run.resumed
    say RUN TEXT     the run's next message
    drop RUN         forget the run here, writing nothing (its holder lost it)
    end RUN          close the run (run.finished, the lease released)
Answers: `ok ...`, or `lost <error>` for a write refused because the lease was lost, or
`error <kind>: <message>` for anything else.
"""

from __future__ import annotations

import sys
import threading
import uuid
from typing import Any

import ledger_bus as lb
from ledger_bus.agent.recorder import Recorder, Run

WARM_UP = {"type": "message", "agent": "holder", "body": "ready"}


def serve(url: str, prefix: str, session: str, ttl_ms: int) -> None:
    store = lb.connect(url, prefix=prefix)
    # Warmed up before the first command: a first append imports the validators (a tenth of a
    # second), which a lease this short would not outlive.
    store.append(lb.StreamId(session, "warm-up"), lb.ANY, uuid.uuid4().hex, [WARM_UP])
    recorder = Recorder(store, session, "holder", lease_ttl_ms=ttl_ms)
    runs: dict[str, Run] = {}

    def answer(text: str) -> None:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()

    for line in sys.stdin:
        verb, run_id, *rest = line.split(maxsplit=2)
        try:
            answer(act(recorder, runs, verb, run_id, rest))
        except lb.LeaseLost as err:
            answer(f"lost {err}")
        except lb.LedgerError as err:
            answer(f"error {type(err).__name__}: {err}")
    store.close()


def act(recorder: Recorder, runs: dict[str, Run], verb: str, run_id: str, rest: list[str]) -> str:
    if verb == "start":
        runs[run_id] = recorder.run(run_id).__enter__()
        return f"ok {runs[run_id].version}"
    if verb == "take":
        run = runs[run_id] = recorder.run(run_id, resume=True)
        run.recorder.store.run_op(run.acquire_op())
        _renewing(run)
        return "ok"
    if verb == "go":
        run = runs[run_id]
        run.recorder.store.run_op(run.start_op())
        return f"ok {run.version}"
    if verb == "say":
        event_id = runs[run_id].message(rest[0].strip())
        return f"ok {runs[run_id].version} {event_id}"
    if verb == "drop":
        run = runs.pop(run_id)
        run._stop.set()  # its renewer, if it has one, stops; nothing is written or released
        return "ok"
    if verb == "end":
        runs.pop(run_id).__exit__(None, None, None)
        return "ok"
    raise lb.InvalidInput(f"unknown command {verb!r}")


def _renewing(run: Run) -> None:
    """The renewal Run.__enter__ starts, for a run taken in two steps (take, go)."""
    thread = threading.Thread(target=run._renew, daemon=True)
    run._renewer = thread
    thread.start()


def main(args: list[str]) -> Any:
    url, prefix, session, ttl = args
    serve(url, prefix, session, int(ttl))


if __name__ == "__main__":
    main(sys.argv[1:])
