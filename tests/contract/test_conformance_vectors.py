"""The golden vectors in conformance/, replayed against every store."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

import ledger_bus as lb
from ledger_bus.model.batch import Limits, prepare_append
from ledger_bus.store.base import EventStore
from tests.support.helpers import ROOT

VECTORS = ROOT / "conformance"
CANONICAL = json.loads((VECTORS / "canonical.json").read_text("utf-8"))["vectors"]
SCENARIOS = json.loads((VECTORS / "appends.json").read_text("utf-8"))["scenarios"]


@pytest.mark.parametrize("vector", CANONICAL, ids=[v["name"] for v in CANONICAL])
def test_canonical_vectors(vector: dict[str, Any]) -> None:
    prepared = prepare_append("s", "x", "a", vector["events"], Limits())
    assert prepared.digest == vector["sha256"]
    assert hashlib.sha256(vector["canonical"].encode()).hexdigest() == vector["sha256"]
    assert "[" + ",".join(vector["canonical_events"]) + "]" == vector["canonical"]


def _check_append(store: EventStore, session: str, step: dict[str, Any]) -> None:
    spec, expect = step["append"], step["expect"]
    ref = lb.StreamId(session, spec["stream"])
    expected = lb.ANY if spec["expected_version"] == "any" else spec["expected_version"]
    if "error" in expect:
        with pytest.raises(getattr(lb, expect["error"])) as raised:
            store.append(ref, expected, spec["append_id"], spec["events"])
        for attribute in ("expected", "actual", "index", "field"):
            if attribute in expect:
                assert getattr(raised.value, attribute) == expect[attribute]
        return
    result = store.append(ref, expected, spec["append_id"], spec["events"])
    assert (result.first_version, result.last_version, result.deduplicated) == (
        expect["first_version"],
        expect["last_version"],
        expect["deduplicated"],
    )


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s["name"] for s in SCENARIOS])
def test_append_scenarios(store: EventStore, scenario: dict[str, Any]) -> None:
    session = scenario["session"]
    for step in scenario["steps"]:
        if "append" in step:
            _check_append(store, session, step)
            continue
        expect = step["expect"]
        if "read" in step:
            ref = lb.StreamId(session, step["read"]["stream"])
            events = store.read_stream(ref, step["read"]["after_version"])
            assert [e.version for e in events] == expect["versions"]
        else:
            events = store.scan_session(session, step["scan"]["after"])
            assert [e.stream.name for e in events] == expect["streams"]
        if "bodies" in expect:
            assert [e["body"] for e in events] == expect["bodies"]
        if "event_ids" in expect:
            assert [e.event_id for e in events] == expect["event_ids"]


KEYS = json.loads((VECTORS / "idempotency_keys.json").read_text("utf-8"))["keys"]


@pytest.mark.parametrize("vector", KEYS, ids=[f"{v['run_id']}:{v['step_id']}" for v in KEYS])
def test_idempotency_key_vectors(vector: dict[str, Any]) -> None:
    inputs = (vector["session_id"], vector["run_id"], vector["step_id"], vector["incarnation"])
    assert lb.idempotency_key(*inputs) == vector["key"]
    joined = "\x1f".join(["ledger-bus idempotency key", *map(str, inputs)])
    assert vector["key"] == "lb1-" + hashlib.sha256(joined.encode()).hexdigest()[:32]


def test_the_key_vectors_are_all_different() -> None:
    assert len({v["key"] for v in KEYS}) == len(KEYS)
