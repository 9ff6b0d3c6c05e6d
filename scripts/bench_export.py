"""Exporting a grown session as a trajectory: events per second and the exporting process's
peak RSS, for ATIF (`ledger-bus export --format atif`, written as the command writes it) and
OTLP spans (to a receiver in the benchmark's process that decodes nothing), at 10,000 and
100,000 events.

A session of runs that each say something, call a tool and get its result (a message, a call,
a result; three events a step), written to a private Redis first. Each export runs in a process
of its own, so its peak RSS is its own.

    python scripts/bench_export.py                 # 10,000 and 100,000 events
    python scripts/bench_export.py --sizes 10000   # one size
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import ledger_bus as lb
from ledger_bus.demo.server import LocalServer

STEPS_PER_RUN = 50


def grow(store: lb.EventStore, session: str, events: int) -> None:
    """`events` events: runs of STEPS_PER_RUN steps, each a message, a call and its result."""
    written, run = 0, 0
    while written < events:
        run += 1
        stream = lb.StreamId(session, f"run-r{run}")
        batch: list[dict[str, Any]] = [
            {
                "type": "mutation",
                "agent": f"agent-{run % 7}",
                "kind": "run.started",
                "run_id": f"r{run}",
            }
        ]
        for step in range(STEPS_PER_RUN):
            attempt = f"r{run}-c{step}"
            batch += [
                {
                    "type": "message",
                    "agent": f"agent-{run % 7}",
                    "run_id": f"r{run}",
                    "body": f"step {step} " * 8,
                },
                {
                    "type": "tool_call",
                    "agent": f"agent-{run % 7}",
                    "run_id": f"r{run}",
                    "tool": "search",
                    "args": {"q": f"query {step}"},
                    "attempt_id": attempt,
                },
                {
                    "type": "tool_result",
                    "agent": f"agent-{run % 7}",
                    "run_id": f"r{run}",
                    "tool": "search",
                    "status": "ok",
                    "result": {"hits": step},
                    "attempt_id": attempt,
                },
            ]
        batch.append(
            {
                "type": "mutation",
                "agent": f"agent-{run % 7}",
                "kind": "run.finished",
                "run_id": f"r{run}",
                "status": "ok",
            }
        )
        for start in range(0, len(batch), 500):
            store.append(stream, lb.ANY, f"a{run}-{start}", batch[start : start + 500])
        written += len(batch)


def exported(url: str, session: str, form: str, endpoint: str) -> tuple[float, float]:
    """(seconds, peak RSS in MiB) of one export in a process of its own."""
    code = f"""
import json, resource, sys, time
import ledger_bus as lb
store = lb.connect({url!r})
start = time.perf_counter()
if {form!r} == "atif":
    import os
    from ledger_bus.exports.atif import write_atif
    with open(os.devnull, "w") as out:
        write_atif(store, {session!r}, out)
else:
    from ledger_bus.otel import send_spans, streamed
    send_spans(streamed(store, {session!r}), {endpoint!r})
took = time.perf_counter() - start
print(json.dumps([took, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024]))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    took, rss = json.loads(done.stdout.strip().splitlines()[-1])
    return float(took), float(rss)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000")
    args = parser.parse_args()
    sizes = [int(n) for n in args.sizes.split(",")]

    class Sink(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    sink = ThreadingHTTPServer(("127.0.0.1", 0), Sink)
    threading.Thread(target=sink.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{sink.server_address[1]}"
    results: dict[tuple[str, int], tuple[float, float]] = {}
    with LocalServer(appendonly=False) as server:
        store = lb.connect(server.url)
        for size in sizes:
            grow(store, f"s{size}", size)
            events = store.session_info(f"s{size}").events
            for form in ("atif", "otlp"):
                took, rss = exported(server.url, f"s{size}", form, endpoint)
                results[(form, size)] = (took, rss)
                print(
                    f"{form:5} {events:7,} events: {events / took:9,.0f} events/s,"
                    f" peak RSS {rss:7.1f} MiB"
                )
        store.close()
    sink.shutdown()
    if len(sizes) == 2:
        for form in ("atif", "otlp"):
            small, large = results[(form, sizes[0])], results[(form, sizes[1])]
            print(
                f"{form}: peak RSS {sizes[1]:,} / {sizes[0]:,} events: {large[1] / small[1]:.2f}x"
            )


if __name__ == "__main__":
    main()
