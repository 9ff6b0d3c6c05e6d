"""The exactly-once drill: agents charge a real payment service (examples/payments.py) under
their calls' idempotency keys and are SIGKILLed at points around the charge; the reconciler,
first without the service's probe and then with it, settles what they left open; every run is
resumed. Counted on the payment service's own ledger: each logical charge happened exactly once,
every run finished, and without the probe a resumed run stopped at the flag, charging nothing
twice.

Each run is one session and one logical charge (the charge's `to` is the session). The kill
points go round: not killed, before the request, after it was sent (its reply never read), after
the reply, after the result was recorded. 200 runs: the Python recorder, LangGraph and the Agents
SDK (agent processes forked from tests/support/payer.py), and the TypeScript and Go recorders
(their peers' "pay" request, a process each).
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import ledger_bus as lb
from ledger_bus.operations.reconciler import Reconciler, ReconcilerConfig
from ledger_bus.store.base import EventStore
from tests.support.gopeer import GoPeer, need_go
from tests.support.helpers import ROOT, wait_for
from tests.support.node import NodePeer, need_node
from tests.support.payer import KILL_POINTS, LEASE_MS
from tests.support.peer import PeerError

# The order of the kill points: LEDGER_BUS_DRILL_SEED repeats a drill; it is printed.
SEED = os.environ.get("LEDGER_BUS_DRILL_SEED") or str(random.SystemRandom().randrange(10**9))
# Lanes running at once: two keep the drill well inside the time CI has while leaving the
# machine's two cores to the tests beside it.
AT_ONCE = threading.Semaphore(2)
RUNS = {"recorder": 60, "langgraph": 35, "agents_sdk": 35, "typescript": 35, "go": 35}


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("payments", ROOT / "examples" / "payments.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def payments(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The example's payment service, on a free loopback port, its charges in tmp_path."""
    example = load_example()
    charges = example.Charges(tmp_path / "charges.jsonl")
    server = example.service(0, charges)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv("PAYMENTS_URL", url)
    yield example, charges, url
    server.shutdown()
    server.server_close()


Outcome = dict[str, Any]  # {"killed": True} | {"paid": ...} | {"error": kind, "message": ...}


class ForkServer:
    """tests/support/payer.py: a process per agent run, forked from one that imported it all."""

    def __init__(self, folder: Path):
        self.folder = folder
        folder.mkdir()
        self.count = 0
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.payer"],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def __call__(self, request: dict[str, Any]) -> Outcome:
        self.count += 1
        out = self.folder / f"out-{self.count}.json"
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.process.stdin.write(json.dumps({**request, "out": str(out)}) + "\n")
        self.process.stdin.flush()
        reply = json.loads(self.process.stdout.readline())
        if reply.get("killed"):
            return {"killed": True}
        found: Outcome = json.loads(out.read_text())
        return found

    def close(self) -> None:
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.process.stdin.close()
        self.process.wait(30)
        self.process.stdout.close()


def peer_agent(make: Callable[[], Any]) -> Callable[[dict[str, Any]], Outcome]:
    """An agent run in a peer process of its own (TypeScript or Go), killed or not."""

    def run(request: dict[str, Any]) -> Outcome:
        peer = make()
        try:
            return {"paid": peer.ask("pay", run_id=request["run"], lease_ms=LEASE_MS, **request)}
        except PeerError as err:
            return {"error": err.name, "message": err.message}
        except AssertionError:
            peer.process.wait(10)
            assert peer.process.returncode == -9, f"the peer ended with {peer.process.returncode}"
            return {"killed": True}
        finally:
            peer.close()

    return run


@dataclass
class Lane:
    """The runs of one SDK or adapter, one after another, on a thread of their own."""

    kind: str
    agent: Callable[[dict[str, Any]], Outcome]
    store: EventStore
    url: str
    prefix: str
    payments: Any
    tally: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)

    def reconciler(self, session: str, probes: dict[str, Any]) -> Reconciler:
        config = ReconcilerConfig(grace_s=0, sessions=(session,), agent="drill-reconciler")
        return Reconciler(self.store, config, on_action=lambda record: None, probes=probes)

    def charges(self, session: str) -> list[dict[str, Any]]:
        _, charges, _ = self.payments
        return [c for c in list(charges.by_key.values()) if c["to"] == session]

    def run(self, n: int, kill_at: str) -> None:
        session = f"{self.kind}-{n}"
        example, _, payments_url = self.payments
        request = {
            "kind": self.kind,
            "url": self.url,
            "prefix": self.prefix,
            "session": session,
            "run": "pay",
            "payments": payments_url,
            "amount": 100 + n,
        }
        first = self.agent({**request, "kill_at": kill_at})
        self.tally[f"kill:{kill_at}"] += 1
        if first.get("killed"):
            assert kill_at != "none", f"{session}: killed unasked"
            self.after_a_kill(session, request, example)
            final = self.agent({**request, "kill_at": "none"})
        else:
            assert kill_at in ("none",), f"{session}: not killed at {kill_at}: {first}"
            final = first
        assert "paid" in final, f"{session}: the run did not finish: {final}"
        (charge,) = self.charges(session)  # exactly once, on the service's own ledger
        paid = final["paid"]
        if isinstance(paid, str):  # a framework's tool message: the charge as JSON text
            paid = json.loads(paid)
        assert paid["id"] == charge["id"], (session, paid, charge)
        assert paid["amount"] == 100 + n, (session, paid)
        assert self.store.open_attempts(session) == []
        self.tally["finished"] += 1

    def after_a_kill(self, session: str, request: dict[str, Any], example: Any) -> None:
        """Without the probe: flagged, and a resumed run stops at the flag; with it: settled."""
        plain = self.reconciler(session, {})
        wait_for(
            lambda: (
                plain.run_pass() is not None
                and all(a.flagged_cursor for a in self.store.open_attempts(session))
            ),
            f"{session}'s open call to be flagged",
        )
        if not self.store.open_attempts(session):
            self.tally["nothing open"] += 1  # killed after its result was recorded
            return
        stopped = self.agent({**request, "kill_at": "none"})
        assert "error" in stopped, f"{session}: resumed past an unresolved call: {stopped}"
        said = f"{stopped['error']}: {stopped.get('message')} {stopped.get('trace', '')}"
        assert "was requested and has no result" in said, said
        assert len(self.charges(session)) <= 1
        self.tally["stopped at the flag"] += 1
        probing = self.reconciler(session, example.PROBES)
        wait_for(
            lambda: probing.run_pass() is not None and not self.store.open_attempts(session),
            f"{session}'s open call to be settled by the probe",
        )
        (settled,) = [
            e
            for name in set(self.streams(session))
            for e in self.store.read_stream(lb.StreamId(session, name))
            if e.type == "tool_result" and e.get("settled_by")
        ]
        self.tally[f"settled:{settled['settled_by']['state']}"] += 1

    def streams(self, session: str) -> list[str]:
        return [s.name for s in self.store.session_info(session).streams]

    def __call__(self) -> None:
        with AT_ONCE:
            self.all_runs()

    def all_runs(self) -> None:
        # Every kill point as often as the others, in an order drawn from the seed.
        runs = RUNS[self.kind]
        points = [KILL_POINTS[n % len(KILL_POINTS)] for n in range(runs)]
        random.Random(f"{SEED}:{self.kind}").shuffle(points)
        for n, kill_at in enumerate(points):
            try:
                self.run(n, kill_at)
            except BaseException as err:
                self.failures.append(f"{self.kind}-{n}: {type(err).__name__}: {err}"[:600])


@pytest.mark.slow
@pytest.mark.timeout(600)  # about 2 minutes alone; more beside the rest of the suite
def test_each_logical_charge_happens_exactly_once_across_kills_and_resumes(
    redis_store: EventStore, redis_url: str, prefix: str, payments: Any, tmp_path: Path
) -> None:
    need_node()
    need_go()
    servers = {
        kind: ForkServer(tmp_path / kind) for kind in ("recorder", "langgraph", "agents_sdk")
    }
    agents: dict[str, Callable[[dict[str, Any]], Outcome]] = {
        **servers,
        "typescript": peer_agent(lambda: NodePeer(redis_url, prefix)),
        "go": peer_agent(lambda: GoPeer(redis_url, prefix)),
    }
    lanes = [
        Lane(kind, agent, redis_store, redis_url, prefix, payments)
        for kind, agent in agents.items()
    ]
    threads = [threading.Thread(target=lane, name=lane.kind) for lane in lanes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for server in servers.values():
        server.close()
    report = {lane.kind: dict(lane.tally) for lane in lanes}
    print(json.dumps({"seed": SEED, **report}, indent=1))
    failures = [f for lane in lanes for f in lane.failures]
    assert not failures, f"seed {SEED}:\n" + "\n".join(failures[:20])
    assert sum(lane.tally["finished"] for lane in lanes) == sum(RUNS.values()) == 200
    _, charges, _ = payments
    assert len(charges.by_key) == 200  # one charge per logical call, none twice
    for lane in lanes:  # each lane met every kill point, and its probe found both answers
        for point in KILL_POINTS:
            assert lane.tally[f"kill:{point}"] >= 7, (lane.kind, point)
        assert lane.tally["settled:done"], lane.kind
        assert lane.tally["settled:not_done"], lane.kind
