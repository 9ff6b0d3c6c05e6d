"""A LangGraph thread in the ledger's own events: each message once, as message, model call,
tool call and tool result, with the runs of the nodes that wrote them; the messages kept as
deltas, so a thread's bytes grow with its turns, not with their square."""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph")

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.types import Command, interrupt

import ledger_bus as lb
from ledger_bus.adapters.langgraph import LedgerSaver, thread_session
from ledger_bus.model.errors import ConcurrentRun
from ledger_bus.model.records import RecordedEvent
from ledger_bus.store.base import ServerAdmin, need
from tests.support.graph_scenarios import (
    forks_at_several_depths,
    interrupts_and_subgraphs,
    tool_graph,
)
from tests.support.graphs import ask, build, delegating, echo_turn, echoing, saying
from tests.support.helpers import ledger_here, runs_of

MODEL = "model"


def normalized(store: lb.EventStore, session: str) -> list[RecordedEvent]:
    """The thread's events but the saver's own records (checkpoints, writes, starts)."""
    return [e for e in store.scan_session(session) if e.type != "mutation"]


@pytest.fixture(params=["memory", "redis"])
def ledger(request: pytest.FixtureRequest) -> lb.EventStore:
    if request.param == "redis":
        return request.getfixturevalue("redis_store")  # type: ignore[no-any-return]
    return lb.connect("memory://")


def test_a_turn_with_two_recorded_tools_is_written_as_the_ledger_s_events_once(
    ledger: lb.EventStore, tmp_path: Path
) -> None:
    graph = build(LedgerSaver(ledger), tmp_path)
    question, config = ask("events-1")
    graph.invoke(question, config)
    assert runs_of(tmp_path, "charge", "lookup") == {"charge": 1, "lookup": 1}

    events = normalized(ledger, "events-1")
    # In the thread's checkpoints: the question; the model's first reply (its call, with what
    # it cost, and what it said); its second, the answer. The tool calls it asked for are there
    # too, unless a tool ran before the checkpoint that asks for it was written (LangGraph
    # writes checkpoints on a thread of their own): its request is then the recorded tool's.
    said = [
        (e.type, e.agent, e.get("tool") or e.get("body"))
        for e in events
        if e.stream.name == "lg.ckpt" and (e.type == "message" or e.get("tool") == MODEL)
    ]
    assert said == [
        ("message", "user", "charge and look up order-7"),
        ("tool_call", "agent", MODEL),
        ("tool_result", "agent", MODEL),
        ("message", "agent", ""),
        ("tool_call", "agent", MODEL),
        ("tool_result", "agent", MODEL),
        ("message", "agent", "done: charged 5; order-7 shipped"),
    ]
    # One attempt per tool call, named by the model's call id, requested once and ended
    # once, whichever of the checkpoint and the recorded tool came first.
    calls = {e.attempt_id for e in events if e.type == "tool_call" and e["tool"] != MODEL}
    results = Counter(
        e.attempt_id for e in events if e.type == "tool_result" and e["tool"] != MODEL
    )
    assert calls == {"call_charge", "call_lookup"}
    assert results == Counter({"call_charge": 1, "call_lookup": 1})
    assert ledger.open_attempts("events-1") == []
    by_attempt = {e.attempt_id: e for e in events if e.type == "tool_call"}
    for result in (e for e in events if e.type == "tool_result"):
        assert by_attempt[result.attempt_id].event_id in result.parents
    # Each node execution is a run: the model's two turns, two runs of the node `agent`.
    agent_runs = {e.run_id for e in events if e.type == "message" and e.agent == "agent"}
    assert len(agent_runs) == 2
    assert None not in agent_runs


def test_a_fork_writes_only_what_it_adds_and_a_finished_thread_resumed_writes_nothing(
    ledger: lb.EventStore,
) -> None:
    saver = LedgerSaver(ledger)
    forks_at_several_depths(saver)
    graph = tool_graph(saver)
    config: RunnableConfig = {"configurable": {"thread_id": "thread/forks"}}
    session = thread_session("thread/forks")
    before = normalized(ledger, session)

    # A fork from an early checkpoint with one more message: that message, nothing else.
    past = list(graph.get_state_history(config))[5]
    graph.update_state(past.config, {"messages": [HumanMessage("one more")]})
    added = normalized(ledger, session)[len(before) :]
    assert [(e.type, e.agent, e["body"]) for e in added] == [("message", "user", "one more")]

    # Resumed where it stands (nothing left to run): nothing written.
    done = normalized(ledger, session)
    graph.invoke(None, config)
    graph.invoke(None, config)
    assert normalized(ledger, session) == done

    # Each model reply is one model call, even where forks share a past.
    models = Counter(e.event_id for e in done if e.type == "tool_call" and e["tool"] == MODEL)
    assert set(models.values()) == {1}


def test_a_subgraph_s_messages_are_written_once_in_its_own_namespace(
    ledger: lb.EventStore,
) -> None:
    def outer_model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage("from the top", id=f"top-{len(state['messages'])}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("outer_model", outer_model)
    builder.add_node("delegate", saying("inner_model", "from the subgraph", "sub"))
    builder.add_edge(START, "outer_model")
    builder.add_edge("outer_model", "delegate")
    graph = builder.compile(checkpointer=LedgerSaver(ledger))
    config: RunnableConfig = {"configurable": {"thread_id": "events-sub"}}
    graph.invoke({"messages": [HumanMessage("go")]}, config)

    said = [e for e in normalized(ledger, "events-sub") if e.type == "message"]
    assert Counter(e["body"] for e in said) == Counter(
        {"go": 1, "from the top": 1, "from the subgraph": 1}
    )
    # Written once, where it reaches the thread's own list, by the run of the subgraph's node.
    (sub,) = (e for e in said if e["body"] == "from the subgraph")
    assert (sub.stream.name, sub.agent) == ("lg.ckpt", "delegate")


def answering(saver: LedgerSaver) -> Any:
    """A MessagesState graph whose scripted model answers each question (~300 bytes)."""

    def model(state: MessagesState) -> dict[str, Any]:
        last: BaseMessage = state["messages"][-1]
        return {
            "messages": [AIMessage("an answer of about three hundred bytes " * 8 + str(last.id))]
        }

    builder = StateGraph(MessagesState)
    builder.add_node("model", model)
    builder.add_edge(START, "model")
    return builder.compile(checkpointer=saver)


def _grown(store: lb.EventStore, thread: str, turns: int) -> None:
    """`turns` turns on one thread."""
    graph = answering(LedgerSaver(store))
    config: RunnableConfig = {"configurable": {"thread_id": thread}}
    for turn in range(turns):
        graph.invoke({"messages": [HumanMessage(f"question {turn} " * 20)]}, config)


def test_a_thread_s_bytes_grow_with_its_turns_not_their_square(redis_store: lb.EventStore) -> None:
    """Redis memory of a 200-turn thread against a 50-turn one: linear is 4, the whole list
    written at every checkpoint is about 15."""
    admin = need(redis_store, ServerAdmin)
    _grown(redis_store, "grown-50", 50)
    _grown(redis_store, "grown-200", 200)
    sizes = admin.memory_of(["grown-50", "grown-200"])
    ratio = sum(sizes["grown-200"].values()) / sum(sizes["grown-50"].values())
    assert ratio <= 4.5, sizes

    # and what it reads back is the whole conversation, in order
    builder = StateGraph(MessagesState)
    builder.add_node("model", lambda state: {"messages": []})
    builder.add_edge(START, "model")
    graph = builder.compile(checkpointer=LedgerSaver(redis_store))
    config: RunnableConfig = {"configurable": {"thread_id": "grown-200"}}
    messages = graph.get_state(config).values["messages"]
    assert [type(m).__name__ for m in messages] == ["HumanMessage", "AIMessage"] * 200
    assert [m.content for m in messages[::2]] == [f"question {t} " * 20 for t in range(200)]


def test_a_saver_opened_from_a_url_works_and_closes_with_its_block(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    question, config = ask("from-url")
    with LedgerSaver.from_conn_string(redis_url, prefix=prefix, lease_ttl_ms=2000) as saver:
        assert saver.calls.lease_ttl_ms == 2000
        build(saver, tmp_path).invoke(question, config)

    async def resumed() -> list[Any]:
        async with LedgerSaver.from_conn_string(redis_url, prefix=prefix) as saver:
            assert saver.astore is not None
            state = await build(saver, tmp_path).aget_state(config)
            return list(state.values["messages"])

    messages = asyncio.run(resumed())
    assert messages[-1].content == "done: charged 5; order-7 shipped"


def test_tail_and_scan_show_a_thread_as_its_conversation_and_the_native_records_when_asked(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    store = lb.connect(redis_url, prefix=prefix)
    question, config = ask("readable")
    build(LedgerSaver(store), tmp_path).invoke(question, config)
    for command in (["tail", "readable", "-n", "100"], ["scan", "readable"]):
        shown = ledger_here(redis_url, prefix, *command)
        assert shown.returncode == 0, shown.stderr
        rows = [json.loads(line) for line in shown.stdout.splitlines()]
        kinds = {r.get("kind") for r in rows if r["type"] == "mutation"}
        assert not any(str(k).startswith("langgraph.") for k in kinds), kinds
        assert "charge and look up order-7" in shown.stdout
        assert "done: charged 5; order-7 shipped" in shown.stdout
        everything = ledger_here(redis_url, prefix, *command, "--native")
        assert "langgraph.checkpoint" in everything.stdout
        assert len(everything.stdout.splitlines()) > len(rows)
    # an export keeps everything: it is what a thread is imported and resumed from
    exported = ledger_here(redis_url, prefix, "export", "readable")
    assert "langgraph.checkpoint" in exported.stdout


def test_interrupts_and_resumes_are_written_once_each_as_mutations(ledger: lb.EventStore) -> None:
    """An interrupt in a node, one inside a subgraph (which reaches its parent's task too),
    each resumed: one `interrupt.asked` per interrupt, one `interrupt.resumed` per resume."""
    saver = LedgerSaver(ledger)
    interrupts_and_subgraphs(saver)
    session = thread_session("thread-approval")
    said = [
        (e["kind"], e.agent, e.get("value"))
        for e in ledger.scan_session(session)
        if e.type == "mutation" and str(e.get("kind")).startswith("interrupt.")
    ]
    asked = [s for s in said if s[0] == "interrupt.asked"]
    resumed = [s for s in said if s[0] == "interrupt.resumed"]
    assert ("interrupt.asked", "ask", {"question": "approve?", "seen": 1}) in asked
    assert ("interrupt.asked", "sub", "detail?") in asked
    assert sorted(str(v) for _, _, v in resumed) == ["blue", "no", "red", "yes"]
    ids = [
        e["interrupt_id"]
        for e in ledger.scan_session(session)
        if e.type == "mutation" and e.get("kind") == "interrupt.asked"
    ]
    assert len(ids) == len(set(ids))


def test_what_the_saver_keeps_in_the_process_is_capped_and_an_evicted_thread_reads_back(
    ledger: lb.EventStore,
) -> None:
    """Forty threads of five turns, a cap of about three threads: the saver holds no more
    than the cap and the thread in use, and every thread reads back whole."""
    saver = LedgerSaver(ledger, max_bytes=300_000)
    graph = answering(saver)
    largest = 0
    for thread in range(40):
        config: RunnableConfig = {"configurable": {"thread_id": f"capped-{thread}"}}
        for turn in range(5):
            graph.invoke({"messages": [HumanMessage(f"question {turn} " * 20)]}, config)
        largest = max(largest, saver.memory())
    one_thread = saver._views.of(lb.StreamId("capped-39", "lg.ckpt")).weight
    assert 0 < one_thread < 300_000
    assert 40 * one_thread > 4 * 300_000  # the forty would take more than four times the cap
    assert largest <= 300_000 + one_thread
    for thread in (0, 17, 39):
        config = {"configurable": {"thread_id": f"capped-{thread}"}}
        messages = graph.get_state(config).values["messages"]
        assert [m.content for m in messages[::2]] == [f"question {t} " * 20 for t in range(5)]


def test_a_model_reply_s_model_and_token_usage_are_its_model_call_s_record() -> None:
    store = lb.connect("memory://")

    def model(state: MessagesState) -> dict[str, Any]:
        reply = AIMessage(
            "four",
            id="reply-1",
            usage_metadata={"input_tokens": 12, "output_tokens": 3, "total_tokens": 15},
            response_metadata={"model_name": "gpt-test-1", "finish_reason": "stop"},
        )
        return {"messages": [reply]}

    builder = StateGraph(MessagesState)
    builder.add_node("model", model)
    builder.add_edge(START, "model")
    graph = builder.compile(checkpointer=LedgerSaver(store))
    graph.invoke({"messages": [HumanMessage("2 + 2?")]}, {"configurable": {"thread_id": "usage"}})
    call, result, said = (e for e in normalized(store, "usage") if e.agent == "model")
    assert (call.type, call["tool"], call["args"]) == ("tool_call", MODEL, {"model": "gpt-test-1"})
    assert result["result"] == {
        "model": "gpt-test-1",
        "usage": {"input_tokens": 12, "output_tokens": 3, "total_tokens": 15},
        "finish_reason": "stop",
    }
    assert (said.type, said["body"], said.parents) == ("message", "four", [call.event_id])


def runs_written(store: lb.EventStore, session: str) -> dict[str, dict[str, Any]]:
    """run id -> its run.started (or run.resumed) fields, with its last status from run.finished."""
    runs: dict[str, dict[str, Any]] = {}
    for e in store.scan_session(session):
        kind = e.get("kind") if e.type == "mutation" else None
        if kind in ("run.started", "run.resumed"):
            runs.setdefault(str(e.run_id), {}).update(e.fields, status=None)
        elif kind == "run.finished":
            runs[str(e.run_id)]["status"] = e["status"]
    return runs


def test_node_executions_are_runs_and_a_subgraph_and_a_send_are_delegations(
    ledger: lb.EventStore,
) -> None:
    graph = delegating(LedgerSaver(ledger))
    graph.invoke({"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": "runs-1"}})

    runs = runs_written(ledger, "runs-1")
    by_node = {(r["agent"], r.get("parent_run")): run_id for run_id, r in runs.items()}
    (plan_run,) = (run_id for run_id, r in runs.items() if r["agent"] == "plan")
    (delegate_run,) = (run_id for run_id, r in runs.items() if r["agent"] == "delegate")
    assert "parent_run" not in runs[plan_run]
    assert "parent_run" not in runs[delegate_run]
    # The two Sends: runs of `worker` whose parent is the run that sent them.
    workers = [run_id for run_id, r in runs.items() if r["agent"] == "worker"]
    assert len(workers) == 2, [(k, r["agent"], r.get("parent_run")) for k, r in runs.items()]
    assert {runs[w]["parent_run"] for w in workers} == {plan_run}
    # The subgraph's node: a run whose parent is the run of the node that ran the subgraph.
    assert ("inner_model", delegate_run) in by_node
    assert {r["status"] for r in runs.values()} == {"ok"}
    assert len(runs) == 5  # plan, two workers, delegate, inner_model: the input is no run
    # Each message names the run that wrote it, by the same name its run events give it.
    said = {e["body"]: e.run_id for e in normalized(ledger, "runs-1") if e.type == "message"}
    assert said["plan"] == plan_run
    assert {said["did part 1"], said["did part 2"]} == set(workers)
    assert said["inner"] == delegate_run


def test_an_interrupted_node_s_run_says_so_and_its_resume_is_the_same_run(
    ledger: lb.EventStore,
) -> None:
    def ask_human(state: MessagesState) -> dict[str, Any]:
        answer = interrupt("approve?")
        return {"messages": [AIMessage(f"approved: {answer}", id="approved")]}

    builder = StateGraph(MessagesState)
    builder.add_node("ask_human", ask_human)
    builder.add_edge(START, "ask_human")
    graph = builder.compile(checkpointer=LedgerSaver(ledger))
    config: RunnableConfig = {"configurable": {"thread_id": "runs-2"}}
    graph.invoke({"messages": [HumanMessage("go")]}, config)
    (run_id,) = runs_written(ledger, "runs-2")
    assert runs_written(ledger, "runs-2")[run_id]["status"] == "interrupted"

    graph.invoke(Command(resume="yes"), config)
    runs = runs_written(ledger, "runs-2")
    assert list(runs) == [run_id]
    assert (runs[run_id]["kind"], runs[run_id]["status"]) == ("run.resumed", "ok")


def test_two_runs_of_one_thread_at_once_never_fork_it_the_second_is_refused(
    redis_server: Any, prefix: str
) -> None:
    """langgraph#8796: two processes run one thread; both PostgresSaver writers succeed and the
    thread forks without a word. Here the run that read the thread before the other wrote it is
    refused at its checkpoint, naming the thread, and nothing of its step is written."""
    url = redis_server.url
    thread = "two-writers"
    config: RunnableConfig = {"configurable": {"thread_id": thread}}
    echo_turn(url, prefix, thread, "first")
    inside, go_on = threading.Event(), threading.Event()

    def hold() -> None:
        inside.set()
        assert go_on.wait(30)

    store = lb.connect(url, prefix=prefix)
    held = echoing(LedgerSaver(store), before_reply=hold)
    failure: list[BaseException] = []

    def run_held() -> None:
        try:
            held.invoke({"messages": [HumanMessage("from the held run")]}, config)
        except BaseException as err:
            failure.append(err)

    runner = threading.Thread(target=run_held)
    runner.start()
    assert inside.wait(30)  # it has read the thread and runs its node
    other = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from tests.support.graphs import echo_turn; echo_turn(*sys.argv[1:])",
            url,
            prefix,
            thread,
            "from another process",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert other.returncode == 0, other.stderr
    go_on.set()
    runner.join(30)

    (err,) = failure
    assert isinstance(err, ConcurrentRun)
    assert "thread 'two-writers'" in str(err)
    # One line of history, each checkpoint the child of the one before; the held run's
    # message nowhere.
    check = echoing(LedgerSaver(lb.connect(url, prefix=prefix)))
    history = list(check.get_state_history(config))
    for newer, older in itertools.pairwise(history):
        assert newer.parent_config is not None
        assert (
            newer.parent_config["configurable"]["checkpoint_id"]
            == older.config["configurable"]["checkpoint_id"]
        )
    # The held run's input was written before its node ran, and the other process continued
    # from there; the held run's step (its reply) was never written.
    said = [m.text for m in check.get_state(config).values["messages"]]
    assert said == [
        "first",
        "re: first",
        "from the held run",
        "from another process",
        "re: from another process",
    ]
    bodies = {e.get("body") for e in normalized(store, thread)}
    assert "re: from the held run" not in bodies

    # Run again, it continues the thread as it stands.
    go_on.set()
    held.invoke({"messages": [HumanMessage("again")]}, config)
    assert [m.text for m in check.get_state(config).values["messages"]][-2:] == [
        "again",
        "re: again",
    ]
