"""A small payment service that takes idempotency keys, a tool that charges it, and a probe that
asks it whether a charge happened (docs/reconcile.md).

    python payments.py serve PORT CHARGES_FILE      # the service, on 127.0.0.1:PORT
    PAYMENTS_URL=http://127.0.0.1:PORT python payments.py pay LEDGER_URL SESSION RUN AMOUNT
    PAYMENTS_URL=http://127.0.0.1:PORT ledger-bus reconcile --probes payments:PROBES ...

`pay` with PAYMENTS_CRASH=1 dies (SIGKILL) once its charge is sent and before the reply is read:
the crash the reconciler's probe is for.

The service keeps its own ledger of charges, one JSON line each, written before it answers:
`POST /charges` with an `Idempotency-Key` header charges once per key (the same key again gets
the first charge back, a different body under it is refused with 409), and `GET /charges/KEY`
answers whether a charge with that key exists (200 with it, 404 without). That is all a tool and
a probe need: the tool hands the service `ledger_bus.current_call().idempotency_key`, the same
for every attempt at one logical call, and the probe asks the service about that key.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, NoReturn

import ledger_bus as lb
from ledger_bus import ProbeCall, Probed


class Charges:
    """The service's own ledger: a file of charges, one JSON line each, read back on start."""

    def __init__(self, path: Path):
        self.path = path
        self.lock = threading.Lock()
        self.by_key: dict[str, dict[str, Any]] = {}
        if path.exists():
            for line in path.read_text().splitlines():
                charge = json.loads(line)
                self.by_key[charge["key"]] = charge

    def charge(self, key: str, amount: int, to: str) -> tuple[int, dict[str, Any]]:
        """(201, the new charge), (200, the charge this key made before), or (409, why)."""
        with self.lock:
            found = self.by_key.get(key)
            if found is not None:
                if (found["amount"], found["to"]) != (amount, to):
                    return 409, {"error": "this key was used for another charge"}
                return 200, found
            charge = {"id": f"ch_{len(self.by_key) + 1}", "key": key, "amount": amount, "to": to}
            with self.path.open("a") as f:  # on disk before the answer: a charge made is kept
                f.write(json.dumps(charge) + "\n")
                f.flush()
                os.fsync(f.fileno())
            self.by_key[key] = charge
            return 201, charge


def service(port: int, charges: Charges) -> ThreadingHTTPServer:
    """The HTTP service on 127.0.0.1:port (0: a free port); serve_forever() runs it."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass  # quiet: the charges file is the service's record

        def answer(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            key = self.headers.get("Idempotency-Key")
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
            if self.path != "/charges" or not key:
                self.answer(400, {"error": "POST /charges with an Idempotency-Key header"})
                return
            self.answer(*charges.charge(key, int(body["amount"]), str(body["to"])))

        def do_GET(self) -> None:
            key = self.path.removeprefix("/charges/")
            found = charges.by_key.get(key) if self.path.startswith("/charges/") else None
            self.answer(200, found) if found else self.answer(404, {"error": "no such charge"})

    class Server(ThreadingHTTPServer):
        def handle_error(self, request: Any, client_address: Any) -> None:
            if not isinstance(sys.exc_info()[1], ConnectionError):
                super().handle_error(request, client_address)
            # A client gone before its answer (a crash): the charge is kept all the same.

    return Server(("127.0.0.1", port), Handler)


def payments_url() -> str:
    return os.environ.get("PAYMENTS_URL", "http://127.0.0.1:8650")


def charge(amount: int, to: str) -> dict[str, Any]:
    """The tool: charge `amount` to `to`, once per logical call whatever the retries."""
    key = lb.current_call().idempotency_key
    request = urllib.request.Request(
        f"{payments_url()}/charges",
        data=json.dumps({"amount": amount, "to": to}).encode(),
        headers={"Content-Type": "application/json", "Idempotency-Key": key},
        method="POST",
    )
    if os.environ.get("PAYMENTS_CRASH"):
        return crash_after_sending(request)
    with urllib.request.urlopen(request, timeout=10) as reply:
        found: dict[str, Any] = json.loads(reply.read())
        return found


def crash_after_sending(request: urllib.request.Request) -> NoReturn:
    """A crash at the worst moment: the charge is on its way, its answer never read."""
    where = urllib.parse.urlsplit(request.full_url)
    connection = http.client.HTTPConnection(where.hostname or "", where.port)
    connection.request("POST", where.path, request.data, dict(request.header_items()))
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("unreachable")


def probe_charge(call: ProbeCall) -> Probed:
    """The probe: ask the service whether the open call's charge happened, by its key."""
    if call.idempotency_key is None:
        return Probed.unknown("the call was recorded without an idempotency key")
    try:
        with urllib.request.urlopen(f"{payments_url()}/charges/{call.idempotency_key}") as reply:
            found = json.loads(reply.read())
            return Probed.done(found, {"charge_id": found["id"], "status": reply.status})
    except urllib.error.HTTPError as err:
        if err.code == 404:
            return Probed.not_done({"status": 404})
        return Probed.unknown(f"the payment service answered {err.code}")
    except OSError as err:
        return Probed.unknown(f"the payment service cannot be reached: {err}")


PROBES = {"charge": probe_charge}


def pay(url: str, session: str, run_id: str, amount: int) -> None:
    """One agent run that charges `amount` once; run it again after a crash to resume it."""
    store = lb.connect(url)
    recorder = lb.Recorder(store, session, "payer", lease_ttl_ms=2_000)
    with recorder.run(run_id, resume=True, lease_wait_ms=5_000) as run:
        paid = run.call("charge", {"amount": amount, "to": "acct-7"}, charge)
    print(json.dumps(paid))


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        server = service(int(sys.argv[2]), Charges(Path(sys.argv[3])))
        print(f"payments on http://127.0.0.1:{server.server_address[1]}", flush=True)
        server.serve_forever()
    elif sys.argv[1:2] == ["pay"]:
        pay(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
    else:
        sys.exit(__doc__)
