"""Each adapter's sessions in headless Chromium, recorded the way that adapter records them: with
the adapter itself (Google ADK, LangGraph, the Agents SDK, the Recorder), AgentGo's scripted Go
program, Pi's agent through the TypeScript SDK on Node 22. Each session is opened on the web
view; its runs are drawn as its events say, in the runs tree and on the trace, each call under
its run and none under "session", and its counts are in words that agree with them."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ledger_bus.agent.recorder import Recorder
from ledger_bus.store.base import EventStore
from ledger_bus.ui.app import session_path
from tests.support.adapter_sessions import (
    adk_session,
    agentgo_session,
    agents_sdk_session,
    langgraph_session,
    pi_session,
)
from tests.support.ui import needs_chromium

pytestmark = needs_chromium


@dataclass
class Drawn:
    """What a session's page draws of its runs: the counts of its summary line by what they
    count ({"stream": "1 stream", "run": "5 runs", ...}), the runs tree (run id, agent, depth),
    the trace's runs in order, the tools of the calls drawn under each run (the calls under
    "session" as those of the run ""), and the count above the trace."""

    said: dict[str, str]
    tree: list[tuple[str, str, int]]
    runs: list[str]
    calls: dict[str, list[str]] = field(default_factory=dict)
    counted: str = ""

    def agents(self) -> list[tuple[str, int]]:
        """The runs tree's agents, each with its depth."""
        return [(agent, depth) for _, agent, depth in self.tree]

    def calls_of(self) -> list[list[str]]:
        """The tools called under each run of the tree, in tree order, each run's sorted."""
        return [sorted(self.calls.get(run, [])) for run, _, _ in self.tree]


COUNTED = re.compile(r"(\d[\d,]*) (event|stream|open call|run|dispatch)(e?s)?\b")


def drawn(page: Any, url: str) -> Drawn:
    """The session's page at `url`, read once its trace is drawn."""
    page.goto(url)
    page.wait_for_selector("#trace[data-ready]")
    tree = page.eval_on_selector_all(
        "#runs li",
        "lis => lis.map(li => [li.dataset.run, li.querySelector('span').textContent,"
        " parseInt(li.style.marginLeft) / 20])",
    )
    rows = page.eval_on_selector_all(
        ".wf-rows > .wf-row",
        "rows => rows.map(r => ({kind: [...r.classList].find(c => c.startsWith('kind-')),"
        " run: r.dataset.run || '', under: r.dataset.under, tool: r.dataset.tool}))",
    )
    found = Drawn(
        {m[2]: m[0] for m in COUNTED.finditer(page.inner_text("#summary"))},
        [(run, agent, int(depth)) for run, agent, depth in tree],
        [r["run"] for r in rows if r["kind"] == "kind-run"],
        counted=page.inner_text(".wf-axis .wf-label"),
    )
    under = ""
    for row in rows:
        if row["kind"] == "kind-group":
            under = ""
        elif row["kind"] == "kind-run":
            under = row["run"]
        else:
            assert row["under"] == under, row  # what the row says is where it is drawn
            found.calls.setdefault(under, []).append(row["tool"])
    return found


def test_a_langgraph_thread_reads_as_its_conversation_with_no_serialized_state_on_screen(
    redis_store: EventStore, base: str, page: Any, tmp_path: Any
) -> None:
    langgraph_session(redis_store, tmp_path, "lg-chat")
    page.goto(f"{base}/s/lg-chat")
    text = page.inner_text("#timeline")
    # The conversation: the question, the model's calls with their tokens, both tool calls with
    # their results and durations, the answer.
    assert "charge and look up order-7" in text
    assert "done: charged 5; order-7 shipped" in text
    calls = page.locator("#timeline tr[data-type=tool_call]")
    tools = calls.locator("td.text").all_inner_texts()
    assert sum(t.startswith("model(") for t in tools) == 2
    assert any(t.startswith("charge(") for t in tools)
    assert any(t.startswith("lookup(") for t in tools)
    for outcome in calls.locator("td.outcome").all_inner_texts():
        assert re.search(r"^ok \d+ ms", outcome), outcome
    tokens = page.locator("#timeline .tokens").all_inner_texts()
    assert len(tokens) == 2
    assert all(t.endswith("in · 30 out tokens") for t in tokens)
    # No checkpoint, no pending writes, no base64 of the saver's serde on screen.
    assert "langgraph.checkpoint" not in text
    assert "langgraph.writes" not in text
    assert not re.search(r"[A-Za-z0-9+/]{60,}", text)
    # Asked for, the native records are there.
    page.goto(f"{base}/s/lg-chat?native=1")
    assert "langgraph.checkpoint" in page.inner_text("#timeline")


def test_an_adk_session_reads_as_its_conversation_with_adks_records_out_of_sight(
    redis_store: EventStore, base: str, page: Any
) -> None:
    session = adk_session(redis_store)
    page.goto(f"{base}/s/{session}")
    text = page.inner_text("#timeline")
    # The conversation: what was said on both sides, the model's calls with their tokens, the
    # tool's calls with their results, the transfer as a delegation.
    for said in ("weather in Paris?", "sunny in Oslo too", "I need a refund", "refund issued"):
        assert said in text
    tools = page.locator("#timeline tr[data-type=tool_call] td.text").all_inner_texts()
    assert sum(t.startswith("model(") for t in tools) == 7
    assert sum(t.startswith("lookup(") for t in tools) == 2
    assert any(t.startswith("delegate(") for t in tools)
    assert page.locator("#timeline .tokens").count() == 7
    native = re.compile(r"adk\.event(?!s)")  # the record's kind, not the stream's name
    assert not native.search(text)
    page.goto(f"{base}/s/{session}?native=1")
    assert native.search(page.inner_text("#timeline"))


def test_an_adk_session_draws_each_agent_s_turn_as_a_run_with_its_calls(
    redis_store: EventStore, base: str, page: Any
) -> None:
    # Given ADK's Runner on the ledger: four turns of ann's, the third transferred to billing
    session = adk_session(redis_store)
    # When her session is opened by the id ADK knows it by
    shown = drawn(page, f"{base}/s/s1")
    assert page.url == base + session_path(session)
    # Then each agent's part of each turn is a run, billing's first under root's, who sent it
    assert shown.agents() == [("root", 0), ("root", 0), ("root", 0), ("billing", 1), ("billing", 0)]
    invocation = shown.tree[2][0].rsplit("/", 1)[0]
    assert shown.tree[3][0] == f"{invocation}/billing"
    assert shown.runs == [run for run, _, _ in shown.tree]
    # and each call is under its run, none under "session"
    assert shown.calls_of() == [
        ["lookup", "model", "model"],
        ["lookup", "model", "model"],
        ["delegate", "model", "transfer_to_agent"],
        ["model"],
        ["model"],
    ]
    assert "" not in shown.calls
    # with the counts in words that agree with them
    assert {thing: n for thing, n in shown.said.items() if thing != "event"} == {
        "stream": "1 stream",
        "open call": "0 open calls",
        "run": "5 runs",
        "dispatch": "0 dispatches",
    }
    assert shown.counted == "11 calls · 5 runs"


def test_a_langgraph_thread_draws_each_node_execution_as_a_run_with_its_calls(
    redis_store: EventStore, base: str, page: Any, tmp_path: Path
) -> None:
    # Given a graph whose agent node asks for two tools, which its tools node runs
    langgraph_session(redis_store, tmp_path, "lg-runs")
    # When the thread is opened
    shown = drawn(page, f"{base}/s/lg-runs")
    # Then each node's execution is a run
    # Then each node's execution is a run (in the order LangGraph committed them, which its
    # threads may interleave)
    assert sorted(shown.agents()) == [("agent", 0), ("agent", 0), ("plan", 0), ("tools", 0)]
    assert shown.runs == [run for run, _, _ in shown.tree]
    # with the model's calls under the agent's runs, and the tools the model asked for (recorded
    # under ids of their own, which no run.started names) under the run that asked for them
    called = sorted(zip([a for a, _ in shown.agents()], shown.calls_of(), strict=True))
    assert called == [
        ("agent", ["charge", "lookup", "model"]),
        ("agent", ["model"]),
        ("plan", []),
        ("tools", []),
    ]
    assert "" not in shown.calls
    assert (shown.said["stream"], shown.said["run"]) == ("2 streams", "4 runs")
    assert shown.counted == "4 calls · 4 runs"


def test_an_agents_sdk_session_draws_a_handoff_as_a_child_run_with_its_calls(
    redis_store: EventStore, base: str, page: Any, tmp_path: Path
) -> None:
    # Given triage handing off to support, which refunds, on a LedgerSession with its run hooks
    agents_sdk_session(redis_store, "oa-runs")
    # When the session is opened
    shown = drawn(page, f"{base}/s/oa-runs")
    # Then triage's run is drawn with support's under it, each with its calls
    assert shown.agents() == [("triage", 0), ("support", 1)]
    assert shown.runs == [run for run, _, _ in shown.tree]
    assert shown.calls_of() == [["model", "transfer_to_support"], ["model", "model", "refund"]]
    assert "" not in shown.calls
    assert shown.said["run"] == "2 runs"
    assert shown.counted == "5 calls · 2 runs"


def test_a_recorder_s_runs_draw_with_the_delegated_run_under_its_parent(
    redis_store: EventStore, base: str, page: Any
) -> None:
    # Given a planner's run that calls a model and delegates to a writer, which searches
    planner = Recorder(redis_store, "rec", "planner")
    with planner.run("plan") as run:
        run.call("model", {"model": "m-1"}, lambda model: {"model": model})
        delegation = run.delegate("writer", "Draft it")
        with Recorder(redis_store, "rec", "writer").run(delegation.child_run_id) as child:
            child.call("search", {"q": "x"}, lambda q: "found")
        run.finish_delegation(delegation, "ok", "done")
    # When the session is opened
    shown = drawn(page, f"{base}/s/rec")
    # Then the writer's run is drawn under the planner's, each with its calls
    assert shown.tree == [("plan", "planner", 0), (delegation.child_run_id, "writer", 1)]
    assert shown.runs == ["plan", delegation.child_run_id]
    assert shown.calls_of() == [["delegate", "model"], ["search"]]
    assert "" not in shown.calls
    assert (shown.said["stream"], shown.said["run"]) == ("2 streams", "2 runs")
    assert shown.counted == "3 calls · 2 runs"


def test_an_agentgo_run_draws_its_subagent_as_a_child_run_with_its_calls(
    redis_url: str, prefix: str, base: str, page: Any, tmp_path: Path
) -> None:
    # Given AgentGo's scripted agent (docs/go.md's wiring): lookup and research, a subagent in
    # a child run, then deploy
    agentgo_session(redis_url, prefix, tmp_path, "ship")
    # When the session is opened
    shown = drawn(page, f"{base}/s/ship")
    # Then the subagent's run is drawn under r1's, each with its calls
    # (the child's id named from the call that runs it: its turn and AgentGo's call id)
    assert shown.tree == [("r1", "agentgo", 0), ("r1.t1.call-2", "agentgo", 1)]
    assert shown.runs == ["r1", "r1.t1.call-2"]
    assert shown.calls_of() == [
        ["deploy", "lookup", "model", "model", "model", "research"],
        ["model"],
    ]
    assert "" not in shown.calls
    # two runs, each with its run-<id> stream and AgentGo's own agentgo.<id> beside it
    assert (shown.said["stream"], shown.said["run"]) == ("4 streams", "2 runs")
    assert shown.counted == "7 calls · 2 runs"


def test_a_pi_session_draws_as_one_run_with_its_calls(
    redis_url: str, prefix: str, redis_store: EventStore, base: str, page: Any
) -> None:
    # Given a Pi agent killed inside its deploy tool, the call resolved by an operator, and the
    # Pi session opened again, which gives Pi the outcome and goes on to its answer
    _, opened = pi_session(redis_url, prefix, redis_store, "pi")
    # When the session is opened
    shown = drawn(page, f"{base}/s/pi")
    # Then the Pi session is one run (its stream pi.<id>), its call under it
    assert shown.tree == [(f"pi.{opened}", "pi", 0)]
    assert shown.runs == [f"pi.{opened}"]
    assert shown.calls_of() == [["deploy", "model", "model"]]
    assert "" not in shown.calls
    assert (shown.said["stream"], shown.said["run"]) == ("1 stream", "1 run")
    assert shown.counted == "3 calls · 1 run"
