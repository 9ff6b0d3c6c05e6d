"""Idempotency keys and probes: a call carries one key for all its attempts, and a reconciler
settles an open call with what its probe finds (operations/probes.py)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import rfc8785

import ledger_bus as lb
from ledger_bus.adapters.calls import Begun, CallLedger, ToolStep
from ledger_bus.agent.recorder import Attempt
from ledger_bus.model.batch import Limits, prepare_append
from ledger_bus.model.keys import idempotency_key
from ledger_bus.operations.probes import ProbeCall, Probed, load_probes, run_probe
from ledger_bus.operations.reconciler import FLAG_KIND, Reconciler, ReconcilerConfig
from ledger_bus.operations.resolve import resolve_attempt
from ledger_bus.store.base import EventStore
from tests.support.helpers import ROOT, cli_env, wait_for

SESSION = "pay"
TTL_MS = 150


@pytest.fixture(params=["memory", "redis", "sqlite"])
def some_store(request: pytest.FixtureRequest) -> EventStore:
    return request.getfixturevalue(f"{request.param}_store")  # type: ignore[no-any-return]


def crash_in_call(
    store: EventStore, run_id: str, args: dict[str, Any], tool: str = "charge"
) -> Attempt:
    """A run that committed its call's request and died in the tool: no result, no release;
    returns once its lease has lapsed."""
    run = lb.Recorder(store, SESSION, "payer", lease_ttl_ms=TTL_MS).run(run_id)
    run.__enter__()
    done, attempt = run._drive(run.begin_call_op(tool, args, False, None))
    assert not done
    run._stop.set()  # the process is gone: nothing renews or releases its lease
    assert run._renewer is not None
    run._renewer.join()
    wait_for(lambda: not store.lease_alive(SESSION, f"run-{run_id}"), "the lease to lapse")
    return attempt  # type: ignore[no-any-return]


def resume(store: EventStore, run_id: str, tool: Any, args: dict[str, Any]) -> Any:
    recorder = lb.Recorder(store, SESSION, "payer", lease_ttl_ms=TTL_MS)
    with recorder.run(run_id, resume=True, lease_wait_ms=5000) as run:
        return run.call("charge", args, tool)


@dataclass
class Watched(Reconciler):
    """A reconciler whose actions are kept, to be looked at."""

    actions: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.on_action = self.actions.append


def reconciler(store: EventStore, probes: dict[str, Any], **config: Any) -> Watched:
    return Watched(store, ReconcilerConfig(grace_s=0, **config), probes=probes)


def results_of(store: EventStore, run_id: str) -> list[lb.RecordedEvent]:
    ref = lb.StreamId(SESSION, f"run-{run_id}")
    return [e for e in store.read_stream(ref) if e.type == "tool_result"]


def flags_of(store: EventStore) -> list[lb.RecordedEvent]:
    ref = lb.StreamId(SESSION, "reconciler")
    return [e for e in store.read_stream(ref) if e.get("kind") == FLAG_KIND]


# -- the key ------------------------------------------------------------------------------------


def test_a_tool_is_given_its_call_and_the_key_is_the_same_for_every_attempt(
    some_store: EventStore,
) -> None:
    seen: list[lb.CurrentCall] = []

    def charge(amount: int) -> dict[str, Any]:
        seen.append(lb.current_call())
        return {"charged": amount}

    first = crash_in_call(some_store, "r1", {"amount": 5})
    assert first.idempotency_key == idempotency_key(SESSION, "r1", "r1/c1")
    reconciler(some_store, {"charge": lambda call: Probed.not_done("no charge")}).run_pass()
    assert resume(some_store, "r1", charge, {"amount": 5}) == {"charged": 5}

    (call,) = seen
    assert call.idempotency_key == first.idempotency_key
    assert (call.tool, call.session_id, call.run_id, call.step_id) == (
        "charge",
        SESSION,
        "r1",
        "r1/c1",
    )
    assert call.attempt_id == "r1/c1#2"
    assert call.args == {"amount": 5}
    requests = [
        e for e in some_store.read_stream(lb.StreamId(SESSION, "run-r1")) if e.type == "tool_call"
    ]
    assert [e["idempotency_key"] for e in requests] == [first.idempotency_key] * 2
    with pytest.raises(lb.NoCurrentCall):
        lb.current_call()


def test_two_calls_with_the_same_arguments_have_two_keys(memory_store: EventStore) -> None:
    keys: list[str] = []

    def charge(amount: int) -> int:
        keys.append(lb.current_call().idempotency_key)
        return amount

    with lb.Recorder(memory_store, SESSION, "payer").run("r2") as run:
        run.call("charge", {"amount": 5}, charge)
        run.call("charge", {"amount": 5}, charge)
    assert len(set(keys)) == 2
    # a run id used again is another execution: its calls are other calls
    with lb.Recorder(memory_store, SESSION, "payer").run("r2") as run:
        run.call("charge", {"amount": 5}, charge)
    assert len(set(keys)) == 3


# -- what a probe finds -------------------------------------------------------------------------


def test_a_call_its_probe_finds_done_is_settled_and_not_run_again(
    some_store: EventStore,
) -> None:
    crash_in_call(some_store, "r1", {"amount": 7})
    asked: list[ProbeCall] = []

    def probe(call: ProbeCall) -> Probed:
        asked.append(call)
        return Probed.done({"charged": 7}, {"charge_id": "ch_1"})

    worker = reconciler(some_store, {"charge": probe})
    report = worker.run_pass()
    assert (report.probed, report.settled, report.flagged) == (1, 1, 0)
    (call,) = asked
    assert call.idempotency_key == idempotency_key(SESSION, "r1", "r1/c1")
    assert (call.tool, call.args, call.run_id, call.step_id) == (
        "charge",
        {"amount": 7},
        "r1",
        "r1/c1",
    )
    (settled,) = results_of(some_store, "r1")
    assert settled["status"] == "ok"
    assert settled["result"] == {"charged": 7}
    by = settled["settled_by"]
    assert by["state"] == "done"
    assert by["evidence"] == {"charge_id": "ch_1"}
    assert by["by"] == "reconciler"
    assert by["probe"].endswith("probe")
    assert some_store.open_attempts(SESSION) == []
    assert worker.run_pass().probed == 0  # nothing open: nothing asked again

    def must_not_run(amount: int) -> None:
        raise AssertionError("a settled call ran again")

    assert resume(some_store, "r1", must_not_run, {"amount": 7}) == {"charged": 7}


def test_a_call_its_probe_finds_not_done_runs_again_with_the_same_key(
    some_store: EventStore,
) -> None:
    first = crash_in_call(some_store, "r1", {"amount": 3})
    reconciler(some_store, {"charge": lambda call: Probed.not_done({"found": None})}).run_pass()
    (closed,) = results_of(some_store, "r1")
    assert closed["status"] == "error"
    assert closed["result"] == {"outcome": "not_done"}
    keys: list[str] = []

    def charge(amount: int) -> str:
        keys.append(lb.current_call().idempotency_key)
        return "ok"

    # not declared safe to replay: the evidence says the first attempt did nothing
    assert resume(some_store, "r1", charge, {"amount": 3}) == "ok"
    assert keys == [first.idempotency_key]
    assert some_store.open_attempts(SESSION) == []


def test_a_call_its_probe_cannot_tell_about_is_flagged_with_the_reason(
    some_store: EventStore,
) -> None:
    crash_in_call(some_store, "r1", {"amount": 1})
    worker = reconciler(some_store, {"charge": lambda call: Probed.unknown("the service is down")})
    report = worker.run_pass()
    assert (report.probed, report.probe_unknown, report.flagged) == (1, 1, 1)
    (flag,) = flags_of(some_store)
    assert flag["probe"]["state"] == "unknown"
    assert flag["probe"]["reason"] == "the service is down"
    assert results_of(some_store, "r1") == []
    with pytest.raises(lb.UnresolvedAttempt):
        resume(some_store, "r1", lambda amount: None, {"amount": 1})
    # asked again no sooner than reprobe_s; then settled once the service can say
    assert worker.run_pass().probed == 0
    later = reconciler(some_store, {"charge": lambda call: Probed.done("paid", "ch_9")})
    assert later.run_pass().settled == 1
    assert len(flags_of(some_store)) == 1
    assert resume(some_store, "r1", lambda amount: None, {"amount": 1}) == "paid"


def hangs(call: ProbeCall) -> Probed:
    time.sleep(30)
    return Probed.done()


def raises(call: ProbeCall) -> Probed:
    raise ConnectionError("refused")


@pytest.mark.parametrize(
    ("probe", "reason"),
    [
        (raises, "the probe raised ConnectionError: refused"),
        (hangs, "the probe did not answer within 0.2 s"),
        (lambda call: {"done": True}, "the probe returned dict, not a Probed"),
        (lambda call: None, "the probe returned NoneType, not a Probed"),
        (
            lambda call: Probed.done(result={"bad": float("nan")}),
            "the probe's finding is not JSON the ledger keeps",
        ),
        (
            lambda call: Probed.done("ok", evidence={"bad": float("nan")}),
            "the probe's finding is not JSON the ledger keeps",
        ),
        (
            lambda call: Probed.not_done(evidence={"big": 2**60}),
            "the probe's finding is not JSON the ledger keeps",
        ),
    ],
)
def test_a_probe_that_misbehaves_leaves_its_call_flagged_and_the_pass_goes_on(
    memory_store: EventStore, probe: Any, reason: str
) -> None:
    crash_in_call(memory_store, "r1", {"amount": 1})
    crash_in_call(memory_store, "r2", {"amount": 2}, tool="refund")
    worker = reconciler(
        memory_store,
        {"charge": probe, "refund": lambda call: Probed.done("refunded")},
        probe_timeout_s=0.2,
    )
    report = worker.run_pass()
    assert (report.probed, report.settled, report.probe_unknown) == (2, 1, 1)
    (flag,) = flags_of(memory_store)
    assert flag["tool"] == "charge"
    assert flag["probe"]["reason"].startswith(reason)
    assert [e["result"] for e in results_of(memory_store, "r2")] == ["refunded"]
    assert results_of(memory_store, "r1") == []


def test_a_probe_is_not_asked_while_the_run_is_alive(some_store: EventStore) -> None:
    recorder = lb.Recorder(some_store, SESSION, "payer", lease_ttl_ms=10_000)
    asked: list[ProbeCall] = []

    def probe(call: ProbeCall) -> Probed:
        asked.append(call)
        return Probed.done()

    with recorder.run("live") as run:
        run._drive(run.begin_call_op("charge", {"amount": 1}, False, None))
        assert reconciler(some_store, {"charge": probe}).run_pass().probed == 0
    assert asked == []


def test_two_reconcilers_settle_each_call_once(redis_store: EventStore) -> None:
    for n in range(12):
        crash_in_call(redis_store, f"r{n}", {"amount": n})
    # A call settled by hand first is not settled again by a probe.
    (first,) = redis_store.open_attempts(SESSION)[:1]
    resolve_attempt(redis_store, SESSION, first.attempt_id, "ok", result="by hand")
    asked: Counter[str] = Counter()
    lock = threading.Lock()

    def slow(call: ProbeCall) -> Probed:
        with lock:
            asked[call.attempt_id] += 1
        time.sleep(0.02)
        return Probed.done({"charged": call.args["amount"]}, call.idempotency_key)

    workers = [reconciler(redis_store, {"charge": slow}, agent=f"rec-{n}") for n in range(2)]
    threads = [threading.Thread(target=w.run_pass) for w in workers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for n in range(12):
        assert len(results_of(redis_store, f"r{n}")) == 1, n
    assert redis_store.open_attempts(SESSION) == []
    assert sum(1 for w in workers for a in w.actions if a["action"] == "settle") == 11


def test_probes_are_named_on_the_command_line_as_module_attr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "my_probes.py").write_text(
        "from ledger_bus import Probed\n"
        "def charge(call):\n    return Probed.unknown('x')\n"
        "PROBES = {'charge': charge}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    found = load_probes(["my_probes:PROBES"])
    assert set(found) == {"charge"}
    for bad, said in [
        ("nocolon", "expected module:attr"),
        ("no_such_module_x:P", "cannot import no_such_module_x"),
        ("my_probes:charge", "not a mapping of tool names to probes"),
    ]:
        with pytest.raises(lb.InvalidInput, match=said):
            load_probes([bad])


def test_run_probe_answers_within_its_timeout() -> None:
    call = ProbeCall("s", None, None, "a#1", "t", {}, None, "2026-01-01T00:00:00.000Z", "x", "1-0")
    found = run_probe(hangs, call, 0.1)  # a probe that answered would have said done
    assert found == Probed.unknown("the probe did not answer within 0.1 s")


# -- what people see ----------------------------------------------------------------------------

PROBES_MODULE = """
from ledger_bus import Probed

def charge(call):
    evidence = {"charge_id": "ch_1", "key": call.idempotency_key}
    return Probed.done({"charged": call.args["amount"]}, evidence)

def refund(call):
    return Probed.unknown("refunds cannot be looked up")

PROBES = {"charge": charge, "refund": refund}
"""


def test_the_command_line_settles_with_probes_and_shows_what_they_said(
    redis_url: str, prefix: str, redis_store: EventStore, tmp_path: Path
) -> None:
    ref = lb.StreamId("ops", "main")
    calls = [
        {
            "type": "tool_call",
            "agent": "w",
            "tool": tool,
            "args": {"amount": 3},
            "attempt_id": attempt,
        }
        for tool, attempt in [("charge", "c1"), ("refund", "r1"), ("notify", "n1")]
    ]
    calls[0]["idempotency_key"] = idempotency_key("ops", "w-run", "c1")
    redis_store.append(ref, 0, "calls", calls)
    (tmp_path / "shop_probes.py").write_text(PROBES_MODULE)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "ledger_bus", *args],
            cwd=tmp_path,  # where the probes' module is, as a user runs it
            env={**cli_env(redis_url, prefix), "PYTHONPATH": str(ROOT)},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    before = redis_store.session_info("ops").events
    for bad, said in [
        ("no_such_probes:PROBES", "cannot import no_such_probes"),
        ("shop_probes", "expected module:attr"),
        ("shop_probes:charge", "not a mapping of tool names to probes"),
    ]:
        refused = run("reconcile", "--once", "--grace", "0", "--session", "ops", "--probes", bad)
        assert refused.returncode == 2, refused.stderr
        assert said in refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1
    assert redis_store.session_info("ops").events == before  # refused: nothing written

    done = run(
        "reconcile", "--once", "--grace", "0", "--session", "ops", "--probes", "shop_probes:PROBES"
    )
    assert done.returncode == 0, done.stderr
    actions = [json.loads(line) for line in done.stdout.splitlines()]
    (settled,) = [a for a in actions if a["action"] == "settle"]
    assert settled["attempt_id"] == "c1"
    assert settled["settled_by"]["evidence"]["charge_id"] == "ch_1"
    assert settled["settled_by"]["evidence"]["key"] == calls[0]["idempotency_key"]
    (asked,) = [a for a in actions if a["action"] == "probe"]
    assert (asked["attempt_id"], asked["reason"]) == ("r1", "refunds cannot be looked up")

    listed = [json.loads(line) for line in run("unresolved", "ops").stdout.splitlines()]
    assert {r["attempt_id"]: (r["flagged"], r["probe"]) for r in listed} == {
        "r1": (
            True,
            {
                "name": "shop_probes:refund",
                "state": "unknown",
                "reason": "refunds cannot be looked up",
            },
        ),
        "n1": (True, None),
    }
    inspected = run("inspect", "ops", "-o", "jsonl")
    assert inspected.returncode == 0, inspected.stderr
    opened = json.loads(inspected.stdout)["open_calls"]
    assert [(r["attempt_id"], r["probe"] and r["probe"]["state"]) for r in opened] == [
        ("r1", "unknown"),
        ("n1", None),
    ]
    # A settled call's evidence: on its tool_result, as reading the stream shows it.
    read = run("read", "ops", "main", "-o", "jsonl")
    (result,) = [e for e in map(json.loads, read.stdout.splitlines()) if e["type"] == "tool_result"]
    assert result["settled_by"]["state"] == "done"
    assert result["result"] == {"charged": 3}


def framework_call_left_open(
    store: EventStore, amount: int, *, safe: bool
) -> tuple[CallLedger, lb.StreamId, Begun]:
    """An Agents SDK-like call (`c-1`, matched by its arguments) whose process died in the
    tool: its request recorded, its lease lapsed."""
    calls = CallLedger(store, agent="framework", lease_ttl_ms=TTL_MS)
    stream = lb.StreamId(SESSION, "oa.tools")
    first = ToolStep("c-1", "charge", {"amount": amount}, safe, match_args=True, named=True)
    done, begun = store.run_op(calls.begin_op(stream, first))
    assert not done
    wait_for(lambda: not store.lease_alive(SESSION, f"run-{begun.run_id}"), "the lease")
    return calls, stream, begun


def test_a_call_asked_again_under_a_new_id_takes_the_settlement_and_the_first_call_s_key(
    memory_store: EventStore,
) -> None:
    # A framework whose call ids do not outlive a crash (the Agents SDK): the model asks again
    # under a new id; the rerun takes what the probe found, under the first call's key.
    calls, stream, begun = framework_call_left_open(memory_store, 4, safe=False)
    found = Probed.done({"charged": 4}, "ch_4")
    assert reconciler(memory_store, {"charge": lambda call: found}).run_pass().settled == 1

    again = ToolStep("c-2", "charge", {"amount": 4}, False, match_args=True, named=True)
    done, taken = memory_store.run_op(calls.begin_op(stream, again))
    assert done
    assert taken["result"] == {"charged": 4}
    events = memory_store.read_stream(stream)
    request, outcome = events[-2:]
    assert (request.type, request.attempt_id, outcome.type) == ("tool_call", "c-2#1", "tool_result")
    assert request["idempotency_key"] == begun.idempotency_key
    assert outcome.parents[0] == request.event_id  # the taken result follows from its request


def test_a_settlement_s_evidence_is_canonical_json_as_every_sdk_writes_it() -> None:
    # settled_by holds any JSON: the append digest covers it by RFC 8785, as TS and Go compute it
    settled: dict[str, Any] = {
        "type": "tool_result",
        "agent": "reconciler",
        "tool": "charge",
        "attempt_id": "a#1",
        "status": "ok",
        "result": {"amount": 5.0},
        "settled_by": {"probe": "p", "state": "done", "evidence": {"amount": 5.0, "x": 1e21}},
    }
    digest = prepare_append("s", "x", "a", [settled], Limits()).digest
    assert digest == hashlib.sha256(b"[" + rfc8785.dumps(settled) + b"]").hexdigest()


def test_an_operator_s_decision_while_a_probe_asks_is_refused_and_one_outcome_stands(
    redis_store: EventStore,
) -> None:
    crash_in_call(redis_store, "r1", {"amount": 9})
    (attempt,) = redis_store.open_attempts(SESSION)
    asking, answer = threading.Event(), threading.Event()

    def slow(call: ProbeCall) -> Probed:
        asking.set()
        answer.wait(10)
        return Probed.not_done("no charge")

    worker = threading.Thread(target=reconciler(redis_store, {"charge": slow}).run_pass)
    worker.start()
    assert asking.wait(10)
    with pytest.raises(lb.Refused, match="holds its lease"):
        resolve_attempt(
            redis_store, SESSION, attempt.attempt_id, "ok", result="by hand", lease_wait_s=0.3
        )
    answer.set()
    worker.join()
    (only,) = results_of(redis_store, "r1")
    assert only["settled_by"]["state"] == "not_done"
    with pytest.raises(lb.Refused, match="closed already"):
        resolve_attempt(redis_store, SESSION, attempt.attempt_id, "ok", result="by hand")


def test_a_call_asked_again_under_a_new_id_waits_for_a_reconciler_settling_the_first(
    memory_store: EventStore,
) -> None:
    # Safe to replay, asked again under a new id while a reconciler holds the first call's run
    # lease (asking its probe): the rerun does not close the first call beside the settlement.
    calls, stream, begun = framework_call_left_open(memory_store, 6, safe=True)
    held = memory_store.acquire_lease(SESSION, f"run-{begun.run_id}", "reconciler", 10_000)
    again = ToolStep("c-2", "charge", {"amount": 6}, True, match_args=True, named=True)
    with pytest.raises(lb.LedgerError, match="held by another live process"):
        memory_store.run_op(calls.begin_op(stream, again))
    assert [e.type for e in memory_store.read_stream(stream)].count("tool_result") == 0
    # The reconciler's probe settles it done; the rerun then takes that outcome, once.
    found = Probed.done({"charged": 6}, "ch_6")
    assert held
    memory_store.release_lease(SESSION, f"run-{begun.run_id}", "reconciler")
    assert reconciler(memory_store, {"charge": lambda call: found}).run_pass().settled == 1
    done, taken = memory_store.run_op(calls.begin_op(stream, again))
    assert done
    assert taken["result"] == {"charged": 6}
    results = [e for e in memory_store.read_stream(stream) if e.type == "tool_result"]
    assert [r.attempt_id for r in results] == ["c-1", "c-2#1"]
