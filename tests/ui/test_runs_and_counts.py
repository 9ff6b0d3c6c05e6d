"""The web view's model of a session's runs, without a browser: the runs are what the events
say, in whichever stream an adapter wrote them, kept up to date as the session grows and made
again when it is rewritten; and every count a page prints is in words that agree with it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

import ledger_bus as lb
from ledger_bus.store.base import EventStore
from ledger_bus.ui.words import counted
from tests.support.events import call, msg
from tests.support.ui import view_app


@pytest.fixture
def client(redis_url: str, prefix: str) -> Iterator[TestClient]:
    with TestClient(view_app(redis_url, prefix)) as c:
        yield c


def started(run: str, **more: Any) -> dict[str, Any]:
    return {"type": "mutation", "agent": "a", "kind": "run.started", "run_id": run, **more}


def finished(run: str) -> dict[str, Any]:
    return {"type": "mutation", "agent": "a", "kind": "run.finished", "run_id": run}


def summary(page: str) -> str:
    """The session page's summary line, its words alone."""
    found = re.search(r'<section id="summary" class="muted">(.*?)·\s*<a', page, re.S)
    assert found is not None
    return " ".join(found.group(1).split())


def test_a_count_agrees_with_its_word() -> None:
    assert [counted(n, "run") for n in (0, 1, 2, 1_500)] == [
        "0 runs",
        "1 run",
        "2 runs",
        "1,500 runs",
    ]
    assert counted(1, "dispatch", "dispatches") == "1 dispatch"
    assert counted(2, "dispatch", "dispatches") == "2 dispatches"


def test_the_pages_count_in_words_that_agree_in_number(
    redis_store: EventStore, client: TestClient
) -> None:
    # Given a session of one event, and one of a run with an open call in two streams
    redis_store.append(lb.StreamId("one", "main"), 0, "a1", [msg("hi")])
    redis_store.append(lb.StreamId("two", "run-r1"), 0, "a1", [started("r1"), call("t1", "r1")])
    redis_store.append(lb.StreamId("two", "notes"), 0, "a2", [msg("noted")])
    # Then each page says one of a thing, or many
    assert summary(client.get("/s/one").text) == (
        "1 event in 1 stream · 0 open calls · 0 runs · 0 dispatches in flight"
    )
    assert summary(client.get("/s/two").text) == (
        "3 events in 2 streams · 1 open call · 1 run · 0 dispatches in flight"
    )
    assert '<p class="muted">1 session matching' in client.get("/?q=one").text
    assert '<p class="muted">2 sessions</p>' in client.get("/").text


def test_runs_are_what_the_events_say_in_whichever_stream_they_are_written(
    redis_store: EventStore, client: TestClient
) -> None:
    # Given a framework's runs in a stream of its own, beside its records, one run naming the
    # one that handed it on (parent_run), and a call of each
    ref = lb.StreamId("fw", "fw.events")
    native = {"type": "mutation", "agent": "fw", "kind": "fw.record", "raw": {"x": 1}}
    redis_store.append(
        ref, 0, "a1", [native, started("lead"), call("c1", "lead"), finished("lead")]
    )
    redis_store.append(ref, 4, "a2", [started("helper", parent_run="lead"), call("c2", "helper")])
    # Then the view draws both, the helper under the lead, each as it stands
    spans = client.get("/s/fw/runs").json()
    assert [(s["run"], s["parent"], s["depth"], s["status"]) for s in spans] == [
        ("lead", None, 0, "ok"),
        ("helper", "lead", 1, "running"),
    ]
    page = client.get("/s/fw").text
    assert re.findall(r'<li data-run="([^"]+)"', page) == ["lead", "helper"]
    assert "· 2 runs ·" in summary(page) + " ·"


def test_the_runs_follow_the_session_as_it_grows_and_as_it_is_rewritten(
    redis_store: EventStore, client: TestClient
) -> None:
    ref = lb.StreamId("grow", "main")
    redis_store.append(ref, 0, "a1", [started("first")])
    assert [s["run"] for s in client.get("/s/grow/runs").json()] == ["first"]
    # When a run ends and another starts, in another stream
    redis_store.append(ref, 1, "a2", [finished("first")])
    redis_store.append(lb.StreamId("grow", "side"), 0, "a3", [started("second")])
    spans = client.get("/s/grow/runs").json()
    assert [(s["run"], s["status"]) for s in spans] == [("first", "ok"), ("second", "running")]
    # When the session is deleted and written again, its old runs are gone
    redis_store.delete_session("grow")
    redis_store.append(ref, 0, "b1", [started("third")])
    assert [s["run"] for s in client.get("/s/grow/runs").json()] == ["third"]
    # and so when one of its streams is
    redis_store.append(lb.StreamId("grow", "side"), 0, "b2", [started("fourth")])
    assert [s["run"] for s in client.get("/s/grow/runs").json()] == ["third", "fourth"]
    redis_store.delete_stream(lb.StreamId("grow", "side"))
    assert [s["run"] for s in client.get("/s/grow/runs").json()] == ["third"]
