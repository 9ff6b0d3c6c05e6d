"""Sessions as ATIF trajectories, each checked by Harbor's own validator: a Recorder's runs with
delegation, an unresolved and a flagged call; a LangGraph thread with two tools in a subgraph;
an Agents SDK run with a handoff; the command line."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

import ledger_bus as lb
from ledger_bus.agent.recorder import Recorder
from ledger_bus.exports.atif import atif_of
from ledger_bus.operations.reconciler import Reconciler, ReconcilerConfig
from ledger_bus.store.base import EventStore
from tests.support.harbor import harbor_errors
from tests.support.helpers import delegated, ledger_cli, ledger_here


def test_a_recorder_s_runs_are_a_trajectory_with_subagents_and_open_calls_said(
    tmp_path: Path,
) -> None:
    store = lb.connect("memory://")
    runs = delegated(store, "tree")
    # Calls left open by processes gone (the writer's delegate to the editor, a worker's
    # charge), flagged by the reconciler; then a call opened after it looked, unresolved.
    dead = Recorder(store, "tree", "worker", lease_ttl_ms=50).run("w1")
    dead.__enter__()
    dead._drive(dead.begin_call_op("charge", {"amount": 5}, False, None))
    dead._stop_renewing_and_release()
    time.sleep(0.1)
    Reconciler(store, ReconcilerConfig(grace_s=0)).run_pass()
    store.append(
        lb.StreamId("tree", "main"),
        lb.ANY,
        "open-1",
        [{"type": "tool_call", "agent": "a", "tool": "fetch", "args": {}, "attempt_id": "f1"}],
    )

    doc = atif_of(store, "tree")
    assert harbor_errors({"tree": doc}, tmp_path) == {"tree": []}
    assert doc["schema_version"] == "ATIF-v1.7"
    assert (doc["session_id"], doc["trajectory_id"]) == ("tree", "tree")
    (writer,) = doc["subagent_trajectories"]
    assert (writer["trajectory_id"], writer["agent"]["name"]) == (runs["writer"], "writer")
    (editor,) = writer["subagent_trajectories"]
    assert (editor["trajectory_id"], editor["agent"]["name"]) == (runs["editor"], "editor")
    # The planner's delegate call names the writer's trajectory; its result is the outcome.
    delegate = doc["steps"][0]
    assert delegate["tool_calls"][0]["function_name"] == "delegate"
    (seen,) = delegate["observation"]["results"]
    assert seen["content"] == "drafted"
    assert seen["subagent_trajectory_ref"] == [
        {"trajectory_id": runs["writer"], "session_id": "tree"}
    ]
    # The writer's search and its result; its delegate to the editor open, and flagged.
    calls = {c["function_name"]: c for c in writer["steps"][0]["tool_calls"]}
    assert calls["search"]["arguments"] == {"q": "jwt"}
    assert calls["delegate"]["extra"]["status"] == "flagged"
    timed = calls["delegate"]["extra"]["ledger"]
    assert (timed["status"], timed["run"]) == ("flagged", runs["writer"])
    assert "settled" not in timed
    assert timed["flagged"] > timed["requested"]
    # A settled call says when it was asked for and when its result came.
    searched = calls["search"]["extra"]["ledger"]
    assert searched["requested"] < searched["settled"]
    assert searched["requested_at"] <= searched["settled_at"]
    assert "status" not in calls["search"]["extra"]
    ledger = doc["extra"]["ledger"]
    assert ledger["unresolved"] == ["f1"]
    assert len(ledger["flagged"]) == 2
    assert ledger["runs"][runs["editor"]]["status"] == "running"


def test_a_langgraph_thread_with_two_tools_in_a_subgraph_is_one_trajectory(
    tmp_path: Path,
) -> None:
    pytest.importorskip("langgraph")
    from langchain_core.messages import HumanMessage
    from langgraph.graph import START, MessagesState, StateGraph

    from ledger_bus.adapters.langgraph import LedgerSaver
    from tests.support.graphs import build

    store = lb.connect("memory://")
    saver = LedgerSaver(store)
    outer = StateGraph(MessagesState)
    outer.add_node("research", build(saver, tmp_path, as_subgraph=True))
    outer.add_edge(START, "research")
    graph = outer.compile(checkpointer=saver)
    graph.invoke(
        {"messages": [HumanMessage("charge and look up order-7")]},
        {"configurable": {"thread_id": "lg-atif"}},
    )

    doc = atif_of(store, "lg-atif")
    assert harbor_errors({"thread": doc}, tmp_path) == {"thread": []}
    steps = doc["steps"]
    assert [s["source"] for s in steps] == ["user", "agent", "agent"]
    asked, answered = steps[1], steps[2]
    assert sorted(c["function_name"] for c in asked["tool_calls"]) == ["charge", "lookup"]
    assert sorted(r["content"] for r in asked["observation"]["results"]) == [
        '{"content": "charged 5", "name": "charge", "status": "success"}',
        '{"content": "order-7 shipped", "name": "lookup", "status": "success"}',
    ]
    assert answered["message"] == "done: charged 5; order-7 shipped"
    assert answered["model_name"] == doc["agent"]["model_name"] == "scripted-1"
    assert answered["metrics"]["completion_tokens"] == 30
    assert doc["final_metrics"]["total_completion_tokens"] == 60
    # The subgraph's runs are in the document's runs, under the run of the node that ran it.
    ledger = doc["extra"]["ledger"]["runs"]
    (research,) = (r for r, v in ledger.items() if v["agent"] == "research")
    assert {v["agent"] for v in ledger.values() if v["parent"] == research} >= {"agent", "tools"}


def test_an_agents_sdk_run_with_a_handoff_is_a_trajectory_with_a_subagent(tmp_path: Path) -> None:
    pytest.importorskip("agents")
    from ledger_bus.adapters.openai_agents import LedgerSession
    from tests.support.agents_sdk import handed_off

    store = lb.connect("memory://")
    handed_off(LedgerSession("handoff", store))
    doc = atif_of(store, "handoff")
    assert harbor_errors({"handoff": doc}, tmp_path) == {"handoff": []}
    assert doc["steps"][0] == {**doc["steps"][0], "source": "user", "message": "refund order 7"}
    (sub,) = doc["subagent_trajectories"]
    assert sub["agent"]["name"] == "support"
    assert [s["source"] for s in sub["steps"]] == ["agent"]
    runs = doc["extra"]["ledger"]["runs"]
    (triage_run,) = (r for r, v in runs.items() if v["agent"] == "triage")
    assert runs[sub["trajectory_id"]]["parent"] == triage_run


def test_export_writes_the_trajectory_and_refuses_what_it_cannot_do(
    redis_url: str, prefix: str, redis_store: EventStore, tmp_path: Path
) -> None:
    delegated(redis_store, "cli-tree")
    out = tmp_path / "trajectory.json"
    done = ledger_here(redis_url, prefix, "export", "cli-tree", str(out), "--format", "atif")
    assert done.returncode == 0, done.stderr
    doc = json.loads(out.read_text())
    assert doc == atif_of(redis_store, "cli-tree")
    assert harbor_errors({"cli": doc}, tmp_path) == {"cli": []}
    printed = ledger_here(redis_url, prefix, "export", "cli-tree", "--format", "atif")
    assert json.loads(printed.stdout) == doc
    # A trajectory is of the whole session; a session that is not there is exit 6.
    filtered = ledger_here(
        redis_url, prefix, "export", "cli-tree", "--format", "atif", "--type", "message"
    )
    assert (filtered.returncode, filtered.stderr.count("\n")) == (2, 1)
    missing = ledger_here(redis_url, prefix, "export", "nowhere", "--format", "atif")
    assert missing.returncode == 6
    assert missing.stdout == ""


@pytest.mark.slow
def test_the_demo_s_session_is_a_valid_trajectory(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    """`ledger-bus demo` against a server it finds (its workers, one killed mid-call, the
    reconciler's flag), then its session exported."""
    demo = ledger_cli(redis_url, prefix, "--prefix", prefix, "demo", "--no-live", timeout=180)
    assert demo.returncode == 0, demo.stderr + demo.stdout
    store = lb.connect(redis_url, prefix=prefix)
    (session,) = [s for s, _ in store.sessions() if s.startswith("demo-")]
    doc = atif_of(store, session)
    assert harbor_errors({"demo": doc}, tmp_path) == {"demo": []}
    ledger = doc["extra"]["ledger"]
    assert doc["agent"]["name"] == ledger["runs"]["orchestrator"]["agent"] == "orchestrator"
    # The worker killed mid-call: its run never finished, its call the reconciler flagged.
    assert [r["status"] for r in ledger["runs"].values()].count("running") == 1
    assert len(ledger["flagged"]) == 1
    (flagged,) = (
        c
        for step in doc["steps"]
        for c in step.get("tool_calls", [])
        if c.get("extra", {}).get("status") == "flagged"
    )
    assert flagged["tool_call_id"] == ledger["flagged"][0]


def test_the_web_view_serves_the_same_trajectory(
    redis_url: str, prefix: str, redis_store: EventStore
) -> None:
    from starlette.testclient import TestClient

    from tests.support.ui import view_app

    delegated(redis_store, "ui-tree")
    with TestClient(view_app(redis_url, prefix)) as client:
        served = client.get("/s/ui-tree/trajectory")
        assert served.status_code == 200
        assert served.json() == atif_of(redis_store, "ui-tree")
        assert client.get("/s/nowhere/trajectory").status_code == 404


def test_a_trajectory_written_a_step_at_a_time_is_the_one_held_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The document is written keeping a trajectory's newest steps in memory (KEEP) and the
    rest in a file: kept to one step, results arrive after their steps were written out (the
    writer's delegate, the calls parallel tools answer), and the document is the same."""
    pytest.importorskip("langgraph")
    from langchain_core.messages import HumanMessage

    from ledger_bus.adapters.langgraph import LedgerSaver
    from ledger_bus.exports import atif
    from tests.support.graphs import build, delegating

    store = lb.connect("memory://")
    delegated(store, "tree")
    saver = LedgerSaver(store)
    build(saver, tmp_path).invoke(
        {"messages": [HumanMessage("charge and look up order-7")]},
        {"configurable": {"thread_id": "tools"}},
    )
    delegating(saver).invoke(
        {"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": "sends"}}
    )
    store.append(  # a result long after its call: many steps between
        lb.StreamId("tree", "main"),
        lb.ANY,
        "late-call",
        [{"type": "tool_call", "agent": "a", "tool": "fetch", "args": {}, "attempt_id": "late"}],
    )
    for n in range(5):
        store.append(
            lb.StreamId("tree", "main"),
            lb.ANY,
            f"said-{n}",
            [{"type": "message", "agent": "a", "body": f"meanwhile {n}"}],
        )
    store.append(
        lb.StreamId("tree", "main"),
        lb.ANY,
        "late-result",
        [
            {
                "type": "tool_result",
                "agent": "a",
                "tool": "fetch",
                "attempt_id": "late",
                "status": "ok",
                "result": "fetched",
            }
        ],
    )
    whole = {s: atif_of(store, s) for s in ("tree", "tools", "sends")}
    monkeypatch.setattr(atif, "KEEP", 1)
    stepwise = {s: atif_of(store, s) for s in ("tree", "tools", "sends")}
    assert stepwise == whole
    assert harbor_errors(stepwise, tmp_path) == {"tree": [], "tools": [], "sends": []}
    (fetch,) = (
        s
        for s in stepwise["tree"]["steps"]
        for c in s.get("tool_calls", ())
        if c["function_name"] == "fetch"
    )
    assert {"source_call_id": "late", "content": "fetched"} in fetch["observation"]["results"]
    (call,) = (c for c in fetch["tool_calls"] if c["tool_call_id"] == "late")
    assert "status" not in call["extra"]  # no longer open
    assert call["extra"]["ledger"]["status"] == "ok"
    assert call["extra"]["ledger"]["settled"] > call["extra"]["ledger"]["requested"]
