"""A session as OpenTelemetry GenAI spans over OTLP/HTTP, received by a receiver in the test's
process: names, attributes, parents from the runs tree, ids the same on a second export, and
every span held to the conventions' required attributes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

import ledger_bus as lb
from ledger_bus.agent.recorder import Recorder
from ledger_bus.exports.otel_follow import Follower
from ledger_bus.otel import CONVENTIONS, Options, send_spans, span_id, spans_of, trace_id
from ledger_bus.store.base import EventStore
from tests.support.helpers import cli_env, delegated, ledger_here
from tests.support.otlp import receiver

# The GenAI semantic conventions (v1.44.0): for each operation, the attributes a span must
# have (Required), and those it must have where the ledger knows them (Conditionally Required:
# available, or on error).
REQUIRED: dict[str, tuple[str, ...]] = {
    "invoke_agent": ("gen_ai.operation.name", "gen_ai.provider.name"),
    "chat": ("gen_ai.operation.name", "gen_ai.provider.name"),
    "execute_tool": ("gen_ai.operation.name",),
}
WHEN_KNOWN: dict[str, tuple[str, ...]] = {
    "invoke_agent": ("gen_ai.agent.id", "gen_ai.agent.name", "gen_ai.conversation.id"),
    "chat": ("gen_ai.request.model", "gen_ai.conversation.id"),
    "execute_tool": ("gen_ai.tool.name", "gen_ai.tool.call.id", "gen_ai.conversation.id"),
}


def conforms(span: dict[str, Any]) -> list[str]:
    """What a span lacks of the conventions' table (its name's first word is its operation)."""
    attrs = span["attributes"]
    operation = attrs.get("gen_ai.operation.name")
    missing = []
    if not span["name"].startswith(str(operation)):
        missing.append("a name beginning with its operation")
    for name in REQUIRED.get(str(operation), ("gen_ai.operation.name",)):
        if name not in attrs:
            missing.append(name)
    for name in WHEN_KNOWN.get(str(operation), ()):
        if name not in attrs:
            missing.append(name)
    if span["status"] == 2 and "error.type" not in attrs:  # STATUS_CODE_ERROR
        missing.append("error.type")
    return missing


def by_name(spans: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in spans}


def follow_killed(
    redis_url: str, prefix: str, url: str, name: str, rounds: Any, step: Any, session: str
) -> None:
    """`ledger-bus otel --follow`, SIGKILLed after the pass that sent each round's last step,
    and started again for the next round."""
    args = ["otel", "--endpoint", url, "--follow", "--every", "0.1", "--name", name]
    for each in rounds:
        with subprocess.Popen(
            [sys.executable, "-m", "ledger_bus", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=cli_env(redis_url, prefix),
        ) as proc:
            try:
                for n in each:
                    step(n)
                    assert proc.stdout is not None
                    while True:  # its pass through that step, recorded
                        line = json.loads(proc.stdout.readline())
                        if line["session"] == session and line["spans"]:
                            break
            finally:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(10)


def test_a_recorder_s_runs_are_spans_under_the_runs_that_delegated_them() -> None:
    store = lb.connect("memory://")
    runs = delegated(store, "otel-tree")
    with receiver() as (url, got):
        send_spans(spans_of(store, "otel-tree"), url)
    spans = by_name(got.spans)
    assert CONVENTIONS == "1.44.0"
    assert {s["trace_id"] for s in got.spans} == {f"{trace_id('otel-tree'):032x}"}
    planner, writer = spans["invoke_agent planner"], spans["invoke_agent writer"]
    editor = spans["invoke_agent editor"]
    assert planner["parent_span_id"] is None
    assert writer["parent_span_id"] == planner["span_id"]
    assert editor["parent_span_id"] == writer["span_id"]
    assert writer["attributes"]["gen_ai.agent.id"] == runs["writer"]
    assert writer["attributes"]["gen_ai.conversation.id"] == "otel-tree"
    search = spans["execute_tool search"]
    assert search["parent_span_id"] == writer["span_id"]
    assert search["attributes"]["gen_ai.tool.name"] == "search"
    assert search["attributes"]["ledger.call.status"] == "ok"
    assert search["end"] >= search["start"]
    assert "gen_ai.tool.call.arguments" not in search["attributes"]  # opt-in only
    # The writer's delegate to the editor, never answered: a span that says so.
    delegates = [s for s in got.spans if s["name"] == "execute_tool delegate"]
    assert sorted(s["attributes"]["ledger.call.status"] for s in delegates) == [
        "ok",
        "unresolved",
    ]
    for span in got.spans:
        assert conforms(span) == [], span


def test_exporting_twice_sends_the_same_ids_and_content_only_when_asked() -> None:
    store = lb.connect("memory://")
    delegated(store, "twice")
    with receiver() as (url, got):
        send_spans(spans_of(store, "twice"), url)
        first = {(s["span_id"], s["parent_span_id"], s["name"]) for s in got.spans}
        got.spans.clear()
        send_spans(spans_of(store, "twice", Options(content=True)), url)
        second = {(s["span_id"], s["parent_span_id"], s["name"]) for s in got.spans}
    assert first == second
    search = by_name(got.spans)["execute_tool search"]
    assert search["attributes"]["gen_ai.tool.call.arguments"] == '{"q": "jwt"}'
    assert search["attributes"]["gen_ai.tool.call.result"] == '{"hits": 3}'
    assert by_name(got.spans)["invoke_agent planner"]["span_id"] == f"{span_id('run', 'plan'):016x}"


def test_a_langgraph_thread_s_model_calls_are_chat_spans_with_their_tokens(tmp_path: Path) -> None:
    pytest.importorskip("langgraph")
    from ledger_bus.adapters.langgraph import LedgerSaver
    from tests.support.graphs import ask, build

    store = lb.connect("memory://")
    graph = build(LedgerSaver(store), tmp_path)
    question, config = ask("otel-lg")
    graph.invoke(question, config)
    with receiver() as (url, got):
        send_spans(spans_of(store, "otel-lg"), url)
    chats = [s for s in got.spans if s["name"] == "chat scripted-1"]
    assert len(chats) == 2
    assert {c["attributes"]["gen_ai.usage.output_tokens"] for c in chats} == {30}
    agents = {s["span_id"]: s for s in got.spans if s["name"] == "invoke_agent agent"}
    for chat in chats:
        assert chat["parent_span_id"] in agents
    tools = [s for s in got.spans if s["name"] in ("execute_tool charge", "execute_tool lookup")]
    assert len(tools) == 2
    # A recorded tool's call is its own: its parent is the run of the node whose model asked.
    for tool in tools:
        assert tool["parent_span_id"] in agents
    for span in got.spans:
        assert conforms(span) == [], span


def test_export_sends_spans_and_refuses_what_it_cannot_do(
    redis_url: str, prefix: str, redis_store: EventStore
) -> None:
    delegated(redis_store, "cli-otel")
    with receiver() as (url, got):
        done = ledger_here(
            redis_url, prefix, "export", "cli-otel", "--format", "otlp", "--endpoint", url
        )
        assert done.returncode == 0, done.stderr
        assert f"exported {len(got.spans)} spans" in done.stderr
    assert {s["name"] for s in got.spans} >= {"invoke_agent planner", "execute_tool search"}
    for args in (
        ("--format", "otlp"),  # no endpoint
        ("--format", "otlp", "--endpoint", url, "--type", "message"),  # a filter
        ("--endpoint", url),  # not otlp
    ):
        refused = ledger_here(redis_url, prefix, "export", "cli-otel", *args)
        assert (refused.returncode, refused.stderr.count("\n")) == (2, 1), args
    missing = ledger_here(
        redis_url, prefix, "export", "nowhere", "--format", "otlp", "--endpoint", url
    )
    assert missing.returncode == 6
    # One pass of the follower, its cursors in the session it is told to keep them in.
    with receiver() as (url, got):
        once = ledger_here(redis_url, prefix, "otel", "--endpoint", url, "--state-session", "mine")
        assert once.returncode == 0, once.stderr
        said = [json.loads(line) for line in once.stdout.splitlines()]
    assert {"session": "cli-otel", "through": said[0]["through"], "spans": len(got.spans)} in said
    assert redis_store.read_stream(lb.StreamId("mine", "follow.default"))


def test_the_follower_sends_what_each_pass_settled_once(redis_store: EventStore) -> None:
    store = redis_store
    run = Recorder(store, "growing", "worker").run("w1")
    run.__enter__()
    run.message("starting")
    run.call("search", {"q": "a"}, lambda q: "found a")
    with receiver() as (url, got):
        follower = Follower(store, url, "t1")
        (first,) = follower.run_pass()
        # The call settled; the run, still going, not yet.
        assert {s["name"] for s in got.spans} == {"execute_tool search"}
        assert follower.run_pass() == []  # nothing new
        run.call("fetch", {"url": "x"}, lambda url: "page")
        run.__exit__(None, None, None)
        (second,) = Follower(store, url, "t1").run_pass()  # a new follower: the same cursors
        assert second["spans"] == 2
        ids = [s["span_id"] for s in got.spans]
        assert len(ids) == len(set(ids)) == 3
        assert {s["name"] for s in got.spans} == {
            "execute_tool search",
            "execute_tool fetch",
            "invoke_agent worker",
        }
        through = first["through"], second["through"]
        assert isinstance(through[0], str)
        assert isinstance(through[1], str)
        assert through[0] < through[1]


def test_the_follower_killed_and_started_again_sends_every_span_once(
    redis_url: str, prefix: str, redis_store: EventStore
) -> None:
    store = redis_store

    def step(n: int) -> None:
        with Recorder(store, "followed", "worker").run(f"w{n}") as run:
            run.call("search", {"q": n}, lambda q: f"found {q}")

    with receiver() as (url, got):
        follow_killed(redis_url, prefix, url, "killed", ((1, 2), (3, 4)), step, "followed")
    names = sorted(s["name"] for s in got.spans)
    assert names == ["execute_tool search"] * 4 + ["invoke_agent worker"] * 4
    ids = [s["span_id"] for s in got.spans]
    assert len(ids) == len(set(ids)), "a span was sent twice"


@pytest.mark.slow
def test_a_real_phoenix_takes_the_spans_once_with_their_links(
    redis_url: str, prefix: str, redis_store: EventStore, tmp_path: Path
) -> None:
    """End to end: `ledger-bus export --format otlp` and the follower, killed and started
    again, against Arize Phoenix; the spans read back from its API."""
    from tests.support.phoenix import phoenix, phoenix_spans

    store = redis_store
    runs = delegated(store, "phx-tree")
    with phoenix(tmp_path) as url:
        sent = ledger_here(
            redis_url, prefix, "export", "phx-tree", "--format", "otlp", "--endpoint", url
        )
        assert sent.returncode == 0, sent.stderr
        expected = len(spans_of(store, "phx-tree"))
        spans = phoenix_spans(url, expected)
        assert len(spans) == expected
        by = {s["name"]: s for s in spans}
        planner, writer = by["invoke_agent planner"], by["invoke_agent writer"]
        assert planner["parent_id"] is None
        assert writer["parent_id"] == planner["context"]["span_id"]
        assert by["invoke_agent editor"]["parent_id"] == writer["context"]["span_id"]
        assert by["execute_tool search"]["parent_id"] == writer["context"]["span_id"]
        assert writer["attributes"]["gen_ai.agent.id"] == runs["writer"]
        assert writer["attributes"]["gen_ai.conversation.id"] == "phx-tree"
        assert {s["context"]["trace_id"] for s in spans} == {f"{trace_id('phx-tree'):032x}"}
        # A second export adds no span.
        again = ledger_here(
            redis_url, prefix, "export", "phx-tree", "--format", "otlp", "--endpoint", url
        )
        assert again.returncode == 0
        time.sleep(2)
        assert len(phoenix_spans(url)) == expected

        # The follower, killed between passes and started again: each span once.
        def step(n: int) -> None:
            with Recorder(store, "phx-followed", "worker").run(f"w{n}") as run:
                run.call("search", {"q": n}, lambda q: f"found {q}")

        follow_killed(redis_url, prefix, url, "phx", ((1, 2), (3,)), step, "phx-followed")
        # The follower's first pass sent phx-tree's spans too, which Phoenix has already.
        everything = phoenix_spans(url, expected + 6)
        followed = [
            s for s in everything if s["attributes"].get("gen_ai.conversation.id") == "phx-followed"
        ]
        assert (
            sorted(s["name"] for s in followed)
            == ["execute_tool search"] * 3 + ["invoke_agent worker"] * 3
        )
        ids = [s["context"]["span_id"] for s in everything]
        assert len(ids) == len(set(ids)) == expected + 6
