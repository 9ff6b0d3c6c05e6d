"""The Google ADK adapter, held to ADK: the same Runner scenarios give the same sessions as ADK's
own InMemorySessionService and DatabaseSessionService (SQLite); the tracker's complaints
(#4751 interleaved concurrent runs, #4917 and #4673 whole-session reads, #3970 a call a crash
left without its result) as tests, marked where ADK's own services fail them; the record the
ledger keeps beside ADK's events, read by `tail`, the ATIF export (Harbor's validator) and the
OpenTelemetry export."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("google.adk")

from google.adk.apps import App
from google.adk.errors import StaleSessionError
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.runners import Runner
from google.adk.sessions import DatabaseSessionService, InMemorySessionService
from google.adk.sessions.base_session_service import BaseSessionService, GetSessionConfig
from google.adk.sessions.session import Session
from google.genai import types

import ledger_bus as lb
from ledger_bus import aio
from ledger_bus.adapters.adk import LedgerSessionService
from ledger_bus.adapters.adk.layout import CHECKPOINT_EVERY, EVENTS, session_of
from ledger_bus.adapters.adk.service import _Out
from ledger_bus.agent.recorder import UnresolvedAttempt
from ledger_bus.exports.otel import spans_of
from ledger_bus.model.ids import StreamId
from ledger_bus.model.records import RecordedEvent
from ledger_bus.operations.probes import Probed
from ledger_bus.operations.reconciler import Reconciler, ReconcilerConfig
from ledger_bus.store.base import EventStore
from tests.support.adk import APP, ScriptedModel, agents, calls, run_turn, said, scenario, user
from tests.support.harbor import harbor_errors
from tests.support.helpers import ROOT, ledger_cli, url_for

BACKENDS = ["memory", "redis", "sqlite", "postgresql"]


@pytest.fixture(scope="module")
def theirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The scenario on ADK's own services: its in-memory one and its database one on SQLite."""
    db = tmp_path_factory.mktemp("adk") / "adk.db"
    return {
        "in-memory": asyncio.run(scenario(InMemorySessionService())),
        "database": asyncio.run(on_database(f"sqlite+aiosqlite:///{db}", scenario)),
    }


async def close(service: BaseSessionService) -> None:
    """ADK's database service's engine closed on the loop that used it."""
    if isinstance(service, DatabaseSessionService):
        await service.close()


async def on_database(url: str, run: Callable[[BaseSessionService], Any]) -> Any:
    """`run` on ADK's database service at `url`, its engine closed after (on this loop)."""
    service = DatabaseSessionService(url)
    try:
        return await run(service)
    finally:
        await service.close()


@pytest.fixture(params=BACKENDS)
def adk_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return url_for(request, tmp_path / "adk.db")


def ours(url: str, prefix: str, asyncio_store: bool) -> Callable[[], Any]:
    async def make() -> Any:
        store = (
            await aio.connect(url, prefix=prefix)
            if asyncio_store
            else lb.connect(url, prefix=prefix)
        )
        try:
            return await scenario(LedgerSessionService(store))
        finally:
            await store.aclose() if asyncio_store else store.close()  # type: ignore[union-attr]

    return make


@pytest.mark.parametrize("asyncio_store", [True, False], ids=["asyncio", "blocking"])
def test_the_same_runs_give_the_same_sessions_as_adks_own_services(
    theirs: dict[str, Any], adk_url: str, prefix: str, asyncio_store: bool
) -> None:
    # Tools, a transfer between agents, state of every scope (app:, user:, temp:, the
    # session's), two users, reads with each config, a list, a delete: equal, and what the
    # models were asked equal too.
    assert theirs["in-memory"] == theirs["database"]
    got = asyncio.run(ours(adk_url, prefix, asyncio_store)())
    for key, value in theirs["in-memory"].items():
        assert got[key] == value, key


def test_an_adk_session_is_kept_once_with_the_ledgers_record_beside_it(
    redis_url: str, prefix: str, redis_store: EventStore, tmp_path: Path
) -> None:
    service = LedgerSessionService(redis_store)
    asyncio.run(scenario(service))
    stream = StreamId(session_of(APP, "ann", "s1"), EVENTS)
    records = redis_store.read_stream(stream)
    kept = [r.fields["event"] for r in records if r.fields.get("kind") == "adk.event"]
    got = asyncio.run(service.get_session(app_name=APP, user_id="ann", session_id="s1"))
    assert got is not None
    # ADK's events, each written once, as its database service stores them: lossless.
    assert kept == [e.model_dump(mode="json", exclude_none=True) for e in got.events]
    assert [Event.model_validate(k) for k in kept] == got.events
    normalized = [r for r in records if r.type != "mutation"]
    said_ = [(r.agent, r.fields["body"]) for r in normalized if r.type == "message"]
    assert said_ == [
        ("user", "weather in Paris?"),
        ("root", "sunny in Paris"),
        ("user", "and in Oslo?"),
        ("root", "sunny in Oslo too"),
        ("user", "I need a refund"),
        ("billing", "refund issued"),
        ("user", "thanks"),
        ("billing", "you're welcome"),
    ]
    asked = {c.id: c for e in got.events for c in e.get_function_calls()}
    tools = [r for r in normalized if r.type == "tool_call" and r.fields["tool"] != "model"]

    def tools_of(records: list[RecordedEvent], name: str) -> list[RecordedEvent]:
        return [r for r in records if r.type == "tool_call" and r.fields["tool"] == name]

    # Each function call a requested attempt keyed on ADK's id, with its response as result.
    assert [(r.fields["tool"], r.fields["attempt_id"] in asked) for r in tools] == [
        ("lookup", True),
        ("lookup", True),
        ("transfer_to_agent", True),
        ("delegate", False),
    ]
    results = {
        r.fields["attempt_id"]: r.fields["result"] for r in normalized if r.type == "tool_result"
    }
    for call_id in asked:
        assert call_id in results
    assert results[tools[0].fields["attempt_id"]] == {"city": "Paris", "weather": "sunny"}
    costs = [results[r.fields["attempt_id"]] for r in tools_of(normalized, "model")]
    assert [c["usage"]["input_tokens"] for c in costs if c["usage"]["output_tokens"]] == [
        12, 12, 30, 12,
    ]  # fmt: skip
    # The transfer, a delegation: the billing agent's run names root's as its parent.
    delegate = tools[3].fields
    assert delegate["args"]["agent"] == "billing"
    started = [r for r in records if r.fields.get("kind") == "run.started"]
    billing = next(r for r in started if r.agent == "billing")
    assert billing.fields["parent_run"] == delegate["run_id"]
    assert billing.fields["run_id"] == delegate["args"]["child_run"]
    assert redis_store.open_attempts(stream.session_id) == []

    # `tail` reads the conversation, ADK's records out of sight unless asked for.
    shown = ledger_cli(
        redis_url, prefix, "--output", "jsonl", "tail", stream.session_id, "-n", "200"
    )
    assert shown.returncode == 0, shown.stderr
    lines = [json.loads(line) for line in shown.stdout.splitlines()]
    assert [e["body"] for e in lines if e["type"] == "message"] == [b for _, b in said_]
    assert not [e for e in lines if str(e.get("kind", "")).startswith("adk.")]
    # As a trajectory Harbor accepts, and as OpenTelemetry spans.
    exported = ledger_cli(redis_url, prefix, "export", stream.session_id, "--format", "atif")
    assert exported.returncode == 0, exported.stderr
    document = json.loads(exported.stdout)
    assert harbor_errors({"adk": document}, tmp_path) == {"adk": []}
    steps = list(_steps(document))
    assert {s["source"] for s in steps} == {"user", "agent"}
    assert any(c["function_name"] == "lookup" for s in steps for c in s.get("tool_calls", []) or [])
    spans = spans_of(redis_store, stream.session_id)
    names = [s.name for s in spans]
    assert sum(n.startswith("execute_tool lookup") for n in names) == 2, names
    assert sum(n.startswith("chat") for n in names) == 7, names  # root 5, billing 2


def _steps(document: dict[str, Any]) -> list[dict[str, Any]]:
    found = list(document["steps"])
    for child in document.get("subagent_trajectories") or []:
        found.extend(_steps(child))
    return found


# -- #4751: two runs on one session at once ----------------------------------------------------


def _ledger_on_redis(request: pytest.FixtureRequest) -> BaseSessionService:
    store: EventStore = request.getfixturevalue("redis_store")
    return LedgerSessionService(store)


SERVICES: dict[str, Callable[[pytest.FixtureRequest, Path], BaseSessionService]] = {
    "ledger": lambda request, _: _ledger_on_redis(request),
    "adk-in-memory": lambda _, __: InMemorySessionService(),
    "adk-database": lambda _, folder: DatabaseSessionService(
        f"sqlite+aiosqlite:///{folder / 'adk.db'}"
    ),
}


@pytest.mark.parametrize(
    "service_kind",
    [
        "ledger",
        pytest.param(
            "adk-in-memory",
            marks=pytest.mark.xfail(
                strict=True, reason="ADK's in-memory service appends a stale session's events"
            ),
        ),
        "adk-database",  # since ADK 1.24-1.2x's reload-and-continue (#4751) was undone
    ],
)
def test_a_run_whose_session_another_run_appended_to_is_refused_and_interleaves_nothing(
    service_kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    service = SERVICES[service_kind](request, tmp_path)

    async def main() -> tuple[BaseException | None, list[tuple[str, str]]]:
        inside = asyncio.Event()
        go_on = asyncio.Event()

        async def slow_lookup(city: str) -> dict[str, Any]:
            """A lookup that takes its time."""
            inside.set()
            await go_on.wait()
            return {"city": city}

        first = agents([calls("slow_lookup", {"city": "Rome"}), said("done")], [])
        first.tools = [slow_lookup]
        second = agents([said("hello from the second run")], [])
        await service.create_session(app_name=APP, user_id="ann", session_id="s")
        one = Runner(app_name=APP, agent=first, session_service=service)
        two = Runner(app_name=APP, agent=second, session_service=service)
        running = asyncio.create_task(run_turn(one, "ann", "s", "first run"))
        await inside.wait()  # the first run's call is out; the second run takes a whole turn
        await run_turn(two, "ann", "s", "second run")
        go_on.set()
        refused: BaseException | None = None
        try:
            await running
        except StaleSessionError as err:
            refused = err
        got = await service.get_session(app_name=APP, user_id="ann", session_id="s")
        assert got is not None
        await close(service)
        return refused, [(e.author, _what(e)) for e in got.events]

    refused, events = asyncio.run(main())
    assert isinstance(refused, StaleSessionError)
    if isinstance(service, LedgerSessionService):
        # The refused run's call is left to the reconciler: no lease of this process keeps it.
        [attempt] = service.store.open_attempts(session_of(APP, "ann", "s"))
        assert attempt.tool == "slow_lookup"
        assert not service.store.lease_alive(attempt.session_id, f"run-{attempt.run_id}")
    # The first run's events up to its call, then the second's whole turn, and no more.
    assert events == [
        ("user", "first run"),
        ("root", "call slow_lookup"),
        ("user", "second run"),
        ("root", "hello from the second run"),
    ]


def _what(event: Event) -> str:
    parts = event.content.parts or [] if event.content else []
    for part in parts:
        if part.function_call:
            return f"call {part.function_call.name}"
        if part.function_response:
            return f"response {part.function_response.name}"
        if part.text:
            return part.text
    return ""


# -- #4917 and #4673: a long session read by its tail ------------------------------------------


def test_a_3000_event_sessions_recent_events_are_read_from_its_tail_with_its_state(
    memory_store: EventStore,
) -> None:
    service = LedgerSessionService(memory_store)
    read: list[int] = []
    reads = memory_store.read_stream_op

    def counted(stream: StreamId, *args: Any, **kwargs: Any) -> Any:
        found = yield from reads(stream, *args, **kwargs)
        if stream.name == EVENTS:
            read.append(len(found))
        return found

    async def main() -> None:
        session = await service.create_session(app_name=APP, user_id="ann", session_id="long")
        for n in range(3000):
            delta = {"n": n, f"key{n % 7}": n} if n % 3 == 0 else {}
            author = "user" if n % 2 == 0 else "root"
            text = types.Content(
                role="user" if n % 2 == 0 else "model", parts=[types.Part(text=f"{n}")]
            )
            event = Event(
                invocation_id=f"i{n // 2}",
                author=author,
                content=text,
                actions=EventActions(state_delta=delta),
            )
            await service.append_event(session, event)
        whole = await service.get_session(app_name=APP, user_id="ann", session_id="long")
        assert whole is not None
        assert len(whole.events) == 3000
        memory_store.read_stream_op = counted  # type: ignore[method-assign]
        recent = await service.get_session(
            app_name=APP,
            user_id="ann",
            session_id="long",
            config=GetSessionConfig(num_recent_events=20),
        )
        memory_store.read_stream_op = reads  # type: ignore[method-assign]
        assert recent is not None
        assert recent.events == whole.events[-20:]
        assert recent.state == whole.state == session.state
        # The tail and the newest state checkpoint: a bounded read, however long the session.
        events_read = sum(read)
        assert events_read <= 6 * (20 + CHECKPOINT_EVERY) < 3000
        # A Runner given the config reads the same tail (the field #4673 asked for).
        model = ScriptedModel(script=[said("ok")])
        agent = agents([], [])
        agent.model = model
        runner = Runner(app_name=APP, agent=agent, session_service=service)
        from google.adk.agents.run_config import RunConfig

        config = RunConfig(get_session_config=GetSessionConfig(num_recent_events=20))
        async for _ in runner.run_async(
            user_id="ann", session_id="long", new_message=user("go on"), run_config=config
        ):
            pass
        assert len(model.requests[0].contents) <= 21

    asyncio.run(main())


# -- #3970: a call a crash left without its result ---------------------------------------------

CRASHING = """
import asyncio, sys
sys.path.insert(0, {root!r})
from google.adk.runners import Runner
from google.adk.sessions import DatabaseSessionService
from tests.support.adk import APP, agents, calls, said, run_turn

async def deploy(target: str) -> dict:
    \"\"\"Deploy to a target; this one never returns.\"\"\"
    print("inside", flush=True)
    await asyncio.Event().wait()
    return {{}}

async def main() -> None:
    kind, url = sys.argv[1], sys.argv[2]
    if kind == "ledger":
        from ledger_bus import aio
        from ledger_bus.adapters.adk import LedgerSessionService
        service = LedgerSessionService(await aio.connect(url, prefix=sys.argv[3]), lease_ttl_ms=500)
    else:
        service = DatabaseSessionService(url)
    root = agents([calls("deploy", {{"target": "prod"}})], [])
    root.tools = [deploy]
    await service.create_session(app_name=APP, user_id="ann", session_id="crash")
    runner = Runner(app_name=APP, agent=root, session_service=service)
    await run_turn(runner, "ann", "crash", "deploy it")

asyncio.run(main())
"""


@pytest.mark.parametrize(
    ("service_kind", "decided_by"),
    [
        ("ledger", "resolve"),
        ("ledger", "probe"),
        pytest.param(
            "adk-database",
            None,
            marks=pytest.mark.xfail(
                strict=True,
                reason="ADK drops a call left without its response: the model never learns it",
            ),
        ),
    ],
)
def test_a_call_a_killed_process_left_open_is_flagged_and_after_resolve_the_agent_gets_its_outcome(
    service_kind: str,
    decided_by: str | None,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    prefix: str,
) -> None:
    """Decided by an operator's resolve after the flag, or settled by a probe instead."""
    script = tmp_path / "crash.py"
    script.write_text(CRASHING.format(root=str(ROOT)))
    if service_kind == "ledger":
        url = request.getfixturevalue("redis_url")
        service: BaseSessionService = LedgerSessionService(lb.connect(url, prefix=prefix))
    else:
        url = f"sqlite+aiosqlite:///{tmp_path / 'adk.db'}"
        service = DatabaseSessionService(url)
    child = subprocess.Popen(
        [sys.executable, str(script), service_kind, url, prefix], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "inside"  # the call is out, its tool running
    child.kill()  # SIGKILL, inside the tool
    child.wait()
    child.stdout.close()

    if isinstance(service, LedgerSessionService):
        ledger = session_of(APP, "ann", "crash")
        store = service.store
        [attempt] = store.open_attempts(ledger)
        assert attempt.tool == "deploy"
        actions: list[dict[str, Any]] = []
        probes = {"deploy": lambda call: Probed.done({"deployed": True}, "the deploy log")}
        reconciler = Reconciler(
            store,
            ReconcilerConfig(grace_s=0),
            on_action=actions.append,
            probes=probes if decided_by == "probe" else {},
        )
        deadline = time.monotonic() + 10
        while not actions and time.monotonic() < deadline:
            reconciler.run_pass()  # flagged (or settled) once the dead process's lease lapsed
            time.sleep(0.1)
        done = "settle" if decided_by == "probe" else "flag"
        assert [(a["action"], a["attempt_id"]) for a in actions] == [(done, attempt.attempt_id)]
        if decided_by == "resolve":
            resolved = ledger_cli(
                url, prefix, "resolve", ledger, attempt.attempt_id, "--ok", '{"deployed": true}'
            )
            assert resolved.returncode == 0, resolved.stderr

    async def resume() -> list[types.Content]:
        model = ScriptedModel(script=[said("deployed, as the record says")])
        root = agents([], [])
        root.model = model
        runner = Runner(app_name=APP, agent=root, session_service=service)
        await run_turn(runner, "ann", "crash", "is it deployed?")
        await close(service)
        return list(model.requests[0].contents)

    contents = asyncio.run(resume())
    kinds = [
        ("call" if p.function_call else "response" if p.function_response else "text")
        for c in contents
        for p in c.parts or []
    ]
    # The call with its outcome, then the question: a request any model API takes.
    assert kinds == ["text", "call", "response", "text"]
    response = next(
        p.function_response for c in contents for p in c.parts or [] if p.function_response
    )
    assert response is not None
    assert response.response == {"deployed": True}


# -- the rest of the contract ------------------------------------------------------------------


def test_a_session_made_by_hand_is_taken_at_the_head_and_refused_behind_it(
    memory_store: EventStore,
) -> None:
    service = LedgerSessionService(memory_store)

    async def main() -> None:
        made = await service.create_session(app_name=APP, user_id="u", session_id="h")
        first = Event(invocation_id="i", author="user", content=user("one"))
        await service.append_event(made, first)
        # A Session built elsewhere (no storage marker), holding what is stored: taken.
        by_hand = Session(id="h", app_name=APP, user_id="u", events=list(made.events))
        assert by_hand._storage_update_marker is None
        await service.append_event(
            by_hand, Event(invocation_id="i", author="user", content=user("two"))
        )
        # One built from what was stored before that: refused.
        behind = Session(id="h", app_name=APP, user_id="u", events=[first])
        with pytest.raises(StaleSessionError):
            await service.append_event(behind, Event(invocation_id="i", author="user"))
        got = await service.get_session(app_name=APP, user_id="u", session_id="h")
        assert got is not None
        assert [_what(e) for e in got.events] == ["one", "two"]

    asyncio.run(main())


def test_a_deleted_session_can_be_made_again_on_a_service_from_a_url(
    redis_url: str, prefix: str
) -> None:
    service = LedgerSessionService.from_url(redis_url, prefix=prefix)

    async def main() -> None:
        await service.create_session(app_name=APP, user_id="u", session_id="again", state={"a": 1})
        await service.delete_session(app_name=APP, user_id="u", session_id="again")
        await service.delete_session(app_name=APP, user_id="u", session_id="again")  # no error
        assert await service.get_session(app_name=APP, user_id="u", session_id="again") is None
        made = await service.create_session(app_name=APP, user_id="u", session_id="again")
        assert made.state == {}
        listed = await service.list_sessions(app_name=APP, user_id="u")
        assert [(s.id, s.state) for s in listed.sessions] == [("again", {})]
        await service.close()

    asyncio.run(main())


def test_an_event_for_a_session_not_there_is_adks_session_not_found(
    memory_store: EventStore,
) -> None:
    from google.adk.errors.session_not_found_error import SessionNotFoundError

    service = LedgerSessionService(memory_store)
    missing = Session(id="nope", app_name=APP, user_id="u")
    with pytest.raises(SessionNotFoundError):
        asyncio.run(service.append_event(missing, Event(invocation_id="i", author="user")))
    assert memory_store.session_count() == 0


def test_under_the_guard_a_call_a_crash_left_unresolved_is_not_run_again(
    memory_store: EventStore,
) -> None:
    # ADK leaves a call without a response out of the model's request: a model that asks for
    # it again would run it twice. Under the guard the tool is not run, and the model is told.
    service = LedgerSessionService(memory_store)
    ran: list[str] = []

    async def deploy(target: str) -> dict[str, Any]:
        """Deploy to a target."""
        ran.append(target)
        return {"deployed": target}

    def runner(guard: Any) -> Runner:
        root = agents([calls("deploy", {"target": "prod"}), said("done")], [])
        root.tools = [deploy]
        return Runner(app=App(name=APP, root_agent=root, plugins=[guard]), session_service=service)

    async def main() -> None:
        crashed = LedgerSessionService(memory_store)  # another process's, which died
        made = await crashed.create_session(app_name=APP, user_id="ann", session_id="g")
        asked = types.FunctionCall(id="call-old", name="deploy", args={"target": "prod"})
        for event in (
            Event(invocation_id="old", author="user", content=user("deploy it")),
            Event(
                invocation_id="old",
                author="root",
                content=types.Content(role="model", parts=[types.Part(function_call=asked)]),
            ),
        ):
            await crashed.append_event(made, event)
        events = await run_turn(runner(service.guard()), "ann", "g", "deploy it again")
        assert ran == []
        [refused] = [r.response for e in events for r in e.get_function_responses()]
        assert refused is not None
        assert refused["error"] == f"not run: {UnresolvedAttempt('call-old', 'deploy')}"
        await run_turn(runner(service.guard(safe_to_replay=["deploy"])), "ann", "g", "and now?")
        assert ran == ["prod"]
        await service.close()

    asyncio.run(main())


def test_what_a_model_or_a_tool_hands_over_is_kept_whatever_it_is(memory_store: EventStore) -> None:
    # A tool's result that is not plain JSON (a datetime, bytes), a state value alike, a call
    # named with a control character: kept as ADK's database service keeps them, the record
    # beside them in the ledger's terms; two events of one Session appended at once both land.
    import datetime

    service = LedgerSessionService(memory_store)

    async def main() -> None:
        made = await service.create_session(app_name=APP, user_id="u", session_id="odd")
        when = datetime.datetime(2026, 12, 4, 12, 0, tzinfo=datetime.UTC)
        asked = types.FunctionCall(id="call\n1", name="search\n", args={"q": "x"})
        answer = types.FunctionResponse(id="call\n1", name="search\n", response={"at": when})
        events = [
            Event(
                invocation_id="i",
                author="root",
                content=types.Content(role="model", parts=[types.Part(function_call=asked)]),
            ),
            Event(
                invocation_id="i",
                author="root",
                content=types.Content(role="user", parts=[types.Part(function_response=answer)]),
                actions=EventActions(state_delta={"seen": when, "blob": b"\x00\x01"}),
            ),
        ]
        await service.append_event(made, events[0])
        await asyncio.gather(
            service.append_event(made, events[1]),
            service.append_event(made, Event(invocation_id="i", author="user", content=user("hi"))),
        )
        assert service._locks == {}  # a session's lock goes once nobody holds or awaits it
        got = await service.get_session(app_name=APP, user_id="u", session_id="odd")
        assert got is not None
        assert len(got.events) == 3
        assert got.state == {"seen": "2026-12-04T12:00:00Z", "blob": "AAE="}
        assert memory_store.open_attempts(session_of(APP, "u", "odd")) == []
        listed = await service.list_sessions(app_name=APP, user_id="u")
        # A session from the list is at the head: an event appended through it lands.
        await service.append_event(listed.sessions[0], Event(invocation_id="j", author="user"))

    asyncio.run(main())


def test_a_resolution_given_back_by_two_readers_at_once_is_written_once(
    memory_store: EventStore,
) -> None:
    service = LedgerSessionService(memory_store)
    ledger = session_of(APP, "u", "r")

    async def main() -> None:
        made = await service.create_session(app_name=APP, user_id="u", session_id="r")
        asked = types.FunctionCall(id="call-1", name="deploy", args={})
        content = types.Content(role="model", parts=[types.Part(function_call=asked)])
        await service.append_event(made, Event(invocation_id="i", author="root", content=content))
        await service.close()  # the process is gone; its call is resolved
        memory_store.append(
            StreamId(ledger, EVENTS),
            "any",
            "resolve:call-1",
            [{"type": "tool_result", "agent": "operator", "tool": "deploy",
              "attempt_id": "call-1", "status": "ok", "result": {"done": True}}],
        )  # fmt: skip
        stream = StreamId(ledger, EVENTS)
        seen = memory_store.run_op(service._read_op(stream, None, None))
        assert seen is not None
        # One reader gives the outcome back; the other, which read before it, does the same.
        first = await service.get_session(app_name=APP, user_id="u", session_id="r")
        memory_store.run_op(service._give_back_op(stream, seen, service._given_back(seen)))
        again = await service.get_session(app_name=APP, user_id="u", session_id="r")
        assert first is not None
        assert again is not None
        assert [e.id for e in again.events] == [e.id for e in first.events]
        responses = [r.response for e in again.events for r in e.get_function_responses()]
        assert responses == [{"done": True}]

    asyncio.run(main())


def test_the_guard_stops_a_resumed_invocation_running_its_call_again(
    memory_store: EventStore,
) -> None:
    from types import SimpleNamespace

    service = LedgerSessionService(memory_store)
    asked = types.FunctionCall(id="call-1", name="deploy", args={"target": "prod"})
    session = Session(
        id="s",
        app_name=APP,
        user_id="u",
        events=[
            Event(
                invocation_id="i",
                author="root",
                content=types.Content(role="model", parts=[types.Part(function_call=asked)]),
            )
        ],
    )
    tool: Any = SimpleNamespace(name="deploy")
    # A resumable app's invocation, resumed in another process, runs its unanswered call again:
    # the same invocation, the same call id, not out in this process.
    replay: Any = SimpleNamespace(
        session=session, invocation_id="i", function_call_id="call-1", agent_name="root"
    )
    refused = asyncio.run(
        service.guard().before_tool_callback(
            tool=tool, tool_args={"target": "prod"}, tool_context=replay
        )
    )
    assert refused == {"error": f"not run: {UnresolvedAttempt('call-1', 'deploy')}"}
    # The call this process asked for and is about to run is let through.
    service._out["run"] = _Out("s", {"call-1"}, None)
    assert (
        asyncio.run(
            service.guard().before_tool_callback(
                tool=tool, tool_args={"target": "prod"}, tool_context=replay
            )
        )
        is None
    )


def test_under_the_guard_a_tool_gets_its_call_and_the_key_its_request_carries(
    memory_store: EventStore,
) -> None:
    service = LedgerSessionService(memory_store)
    seen: list[lb.CurrentCall] = []

    async def charge(amount: int) -> dict[str, Any]:
        """Charge an amount."""
        seen.append(lb.current_call())
        return {"charged": amount}

    async def main() -> None:
        root = agents([calls("charge", {"amount": 5}), said("done")], [])
        root.tools = [charge]
        app = App(name=APP, root_agent=root, plugins=[service.guard()])
        runner = Runner(app=app, session_service=service)
        await service.create_session(app_name=APP, user_id="ann", session_id="k")
        await run_turn(runner, "ann", "k", "charge 5")
        await service.close()

    asyncio.run(main())
    (call,) = seen
    ledger = session_of(APP, "ann", "k")
    (request,) = [
        e
        for e in memory_store.scan_session(ledger)
        if e.type == "tool_call" and e.get("tool") == "charge"
    ]
    assert call.idempotency_key == request["idempotency_key"]
    assert (call.tool, call.session_id, call.attempt_id, call.args) == (
        "charge",
        ledger,
        request.attempt_id,
        {"amount": 5},
    )
    assert call.run_id == request.run_id
    with pytest.raises(lb.NoCurrentCall):
        lb.current_call()
