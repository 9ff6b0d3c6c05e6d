"""`ledger-bus mcp` through the MCP SDK's own client: every tool, resource and prompt in process,
and the command over stdio as a client starts it; what an identity may not do is refused and
writes nothing; a ledger error is one line that names it."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp_types import INVALID_PARAMS

import ledger_bus
from ledger_bus.access.identity import Identity
from ledger_bus.access.tokens import Tokens, add_token
from ledger_bus.demo.server import free_port
from ledger_bus.mcp.server import build_server
from ledger_bus.model.ids import CURSOR_ZERO
from ledger_bus.operations.probes import Probed
from ledger_bus.operations.reconciler import Reconciler, ReconcilerConfig
from ledger_bus.store.base import EventStore
from tests.support.helpers import cli_env, ledger_cli, ledger_serving

Scenario = Callable[[Client], Awaitable[None]]


def _run(server: Any, scenario: Scenario) -> None:
    async def go() -> None:
        async with Client(server) as client:
            await scenario(client)

    asyncio.run(go())


async def _call(client: Client, tool: str, **args: Any) -> Any:
    """A tool's structured result; a tool error fails the test, saying it."""
    result = await client.call_tool(tool, args)
    assert not result.is_error, result.content
    found = result.structured_content
    assert found is not None
    return found.get("result", found)


async def _refusal(client: Client, tool: str, **args: Any) -> str:
    """The one line of a tool's error."""
    result = await client.call_tool(tool, args)
    assert result.is_error
    (text,) = [c.text for c in result.content if c.type == "text"]
    return text


def _error_name(line: str) -> str:
    """The ledger error a tool error names: its first word, after the SDK's preamble."""
    said = re.sub(r"^Error executing tool [^:]+: ", "", line)
    return said.split(":", 1)[0]


def _everything(store: EventStore) -> list[dict[str, Any]]:
    return [e.to_dict() for s, _ in store.sessions() for e in store.iter_session(s)]


@pytest.fixture
def store() -> EventStore:
    return ledger_bus.connect("memory://")


Connect = Callable[[], AbstractAsyncContextManager[Client]]


@asynccontextmanager
async def _client(target: Any, token: str | None = None) -> AsyncIterator[Client]:
    """A connected client of the target (a server, stdio parameters or an HTTP URL)."""
    if token is None:
        async with Client(target) as client:
            yield client
        return
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http,
        Client(streamable_http_client(target, http_client=http)) as client,
    ):
        yield client


@pytest.fixture(params=["in process", "stdio", "http"])
def served(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[EventStore, Connect]]:
    """A store and a way to reach the server on it as the operator `coder`: in process, over
    stdio (the command, on a real redis-server) or over streamable HTTP (the command, with a
    token)."""
    if request.param == "in process":
        store = ledger_bus.connect("memory://")
        yield store, lambda: _client(build_server(store, Identity("coder", "operator")))
        return
    url, prefix = request.getfixturevalue("redis_url"), request.getfixturevalue("prefix")
    store = ledger_bus.connect(url, prefix=prefix)
    if request.param == "stdio":
        command = ["-m", "ledger_bus", "mcp", "--agent", "coder", "--role", "operator"]
        params = StdioServerParameters(
            command=sys.executable, args=command, env=cli_env(url, prefix)
        )
        yield store, lambda: _client(params)
    else:
        file = str(tmp_path / "tokens.json")
        token = add_token(file, Identity("coder", "operator"))
        port = free_port()
        args = ["mcp", "--http", "--port", str(port), "--tokens", file]
        with ledger_serving(url, prefix, port, tmp_path / "mcp.log", *args):
            yield store, lambda: _client(f"http://127.0.0.1:{port}/mcp", token)
    store.close()


async def _open_call_probed(client: Client, store: EventStore) -> None:
    """task-1's open call, before and after a probe that cannot tell: what it said stands
    beside the call's flag."""
    (open_call,) = await _call(client, "open_calls", session="task-1")
    assert (open_call["attempt_id"], open_call["tool"]) == ("t1", "deploy")
    assert open_call["probe"] is None
    Reconciler(
        store,
        ReconcilerConfig(grace_s=0, sessions=("task-1",)),
        on_action=lambda record: None,
        probes={"deploy": lambda call: Probed.unknown("the deploy log is gone")},
    ).run_pass()
    (open_call,) = await _call(client, "open_calls", session="task-1")
    assert open_call["flagged"] is True
    assert open_call["probe"]["reason"] == "the deploy log is gone"


def test_every_tool_resource_and_prompt_through_the_sdks_client(
    served: tuple[EventStore, Connect],
) -> None:
    store, connect = served
    # a call a worker started and never finished, for open_calls and resolve
    store.append(
        ledger_bus.StreamId("task-1", "worker"),
        0,
        "w:1",
        [{"type": "tool_call", "agent": "w", "tool": "deploy", "args": {}, "attempt_id": "t1"}],
    )

    async def scenario(client: Client) -> None:
        tools = {t.name for t in (await client.list_tools()).tools}
        assert tools == {
            "sessions", "tail", "wait", "post", "open_calls", "resolve",
            "dispatch_open", "dispatch_close", "dispatch_list",
        }  # fmt: skip
        posted = await _call(client, "post", session="task-1", body="on it", append_id="c:1")
        assert (posted["stream"], posted["first_version"], posted["deduplicated"]) == (
            "posts-coder",
            1,
            False,
        )
        again = await _call(client, "post", session="task-1", body="on it", append_id="c:1")
        assert (again["deduplicated"], again["cursor"]) == (True, posted["cursor"])
        await _call(client, "post", session="task-1", kind="file.written", fields={"path": "a.py"})
        tail = await _call(client, "tail", session="task-1", n=10)
        assert [e["type"] for e in tail["events"]] == ["tool_call", "message", "mutation"]
        assert tail["context"].splitlines()[1].endswith("coder message: on it")
        assert tail["cursor"] == tail["events"][-1]["cursor"]
        only = await _call(client, "tail", session="task-1", types=["mutation"])
        assert [e["kind"] for e in only["events"]] == ["file.written"]
        (listed,) = await _call(client, "sessions")
        # (the Redis store's index of activity moves on at most so often: between the first
        # event's time and the last's)
        first_ms, last_ms = (int(e["cursor"].split("-")[0]) for e in tail["events"][::2])
        assert listed["session"] == "task-1"
        assert first_ms <= listed["last_active_ms"] <= last_ms
        quiet = await _call(client, "wait", session="task-1", after=tail["cursor"], timeout_s=0.1)
        assert (quiet["events"], quiet["cursor"]) == ([], tail["cursor"])

        work = {"session": "task-1", "role": "tester", "objective": "run it"}
        opened = await _call(client, "dispatch_open", **work, request_id="open-1")
        # a retry of an open whose reply was lost is given the same dispatch
        assert await _call(client, "dispatch_open", **work, request_id="open-1") == opened
        board = await _call(client, "dispatch_list", session="task-1")
        assert [(d["id"], d["window"], d["by"]) for d in board] == [(opened["id"], "live", "coder")]
        await _call(
            client, "dispatch_close", session="task-1", dispatch_id=opened["id"], outcome="done"
        )
        assert await _call(client, "dispatch_list", session="task-1") == []
        await _open_call_probed(client, store)
        resolved = await _call(
            client, "resolve", session="task-1", attempt_id="t1", outcome="ok", result={"n": 1}
        )
        assert resolved["attempt_id"] == "t1"
        assert await _call(client, "open_calls", session="task-1") == []

        read = await client.read_resource("ledger://sessions/task-1/tail")
        assert json.loads(read.contents[0].text)["cursor"] is not None  # type: ignore[union-attr]
        board_read = await client.read_resource("ledger://sessions/task-1/board")
        assert json.loads(board_read.contents[0].text) == []  # type: ignore[union-attr]
        prompts = {p.name for p in (await client.list_prompts()).prompts}
        assert prompts == {"join_session", "report_change", "dispatch_work"}
        joined = await client.get_prompt("join_session", {"session": "task-1"})
        assert "tail" in joined.messages[0].content.text  # type: ignore[union-attr]
        # a prompt asked without what it needs, or one that does not exist: one line, the
        # client's mistake (invalid params), not the server's
        for prompt, said in (
            ("join_session", "InvalidInput: prompt join_session needs session"),
            ("dispatch_work", "InvalidInput: prompt dispatch_work needs session, role, objective"),
            ("nope", "InvalidInput: no prompt named 'nope'"),
        ):
            with pytest.raises(MCPError) as refused:
                await client.get_prompt(prompt, {})
            assert refused.value.error.code == INVALID_PARAMS
            assert refused.value.error.message.startswith(said)

    async def go() -> None:
        async with connect() as client:
            await scenario(client)

    asyncio.run(go())


def test_a_waiting_client_gets_what_another_agent_posts(store: EventStore) -> None:
    async def scenario(client: Client) -> None:
        async def later() -> None:
            await asyncio.sleep(0.2)
            store.append(
                ledger_bus.StreamId("s", "other"),
                0,
                "o:1",
                [{"type": "message", "agent": "planner", "body": "go"}],
            )

        task = asyncio.create_task(later())
        # Waited for before anyone posted: its first event (no cursor: the session's newest)
        found = await _call(client, "wait", session="s", timeout_s=5)
        await task
        assert [e["body"] for e in found["events"]] == ["go"]
        assert found["cursor"] == found["events"][0]["cursor"]

    _run(build_server(store, Identity("coder")), scenario)


def test_a_post_is_the_identitys_and_keeps_the_ledgers_rules(store: EventStore) -> None:
    async def scenario(client: Client) -> None:
        posted = await _call(
            client, "post", session="s", kind="task.taken", fields={"agent": "someone-else"}
        )
        (event,) = store.read_stream(ledger_bus.StreamId("s", posted["stream"]))
        assert event.agent == "coder"  # the identity's, not what the request said
        before = _everything(store)
        lines = [
            await _refusal(client, "post", session="s", body="x", kind="y"),
            await _refusal(
                client, "post", session="s", body="on it", append_id="c:1", fields={"z": 1}
            ),
            await _refusal(client, "post", session="s\x07", body="x"),
            await _refusal(client, "post", session="s", kind="k", fields={"deep": _deep(200)}),
            await _refusal(client, "tail", session="s", n=10_000),
            await _refusal(client, "wait", session="s", timeout_s=3600),
            await _refusal(
                client,
                "dispatch_close",
                session="s",
                dispatch_id="d-2026-01-01-001",
                outcome="done",
            ),
            await _refusal(client, "tail", session=3),
            await _refusal(client, "tail", session="s", n="ten"),
            await _refusal(client, "post", session="s", kind="k", fields="not an object"),
        ]
        assert _everything(store) == before
        for line in lines:
            assert "\n" not in line, line
        assert [line.split(": ")[1] for line in lines] == [
            "InvalidInput", "InvalidInput", "InvalidInput", "InvalidEvent",
            "InvalidInput", "InvalidInput", "NotFound",
            "InvalidInput", "InvalidInput", "InvalidInput",
        ]  # fmt: skip
        await _call(client, "post", session="s", body="one", append_id="c:9")
        conflict = await _refusal(client, "post", session="s", body="two", append_id="c:9")
        assert conflict.split(": ")[1] == "IdempotencyConflict"

    _run(build_server(store, Identity("coder")), scenario)


def _deep(n: int) -> Any:
    value: Any = 1
    for _ in range(n):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("who", "refused"),
    [
        (Identity("viewer", "reader"), {"post", "dispatch_open", "resolve"}),
        (Identity("coder", "writer"), {"resolve"}),
        (Identity("ops", "operator"), set()),
        (
            Identity("other-team", "operator", "team-b-*"),
            {"tail", "post", "dispatch_open", "resolve", "open_calls"},
        ),
    ],
)
def test_each_role_may_do_what_it_is_given_and_nothing_else(
    store: EventStore, who: Identity, refused: set[str]
) -> None:
    call = {"type": "tool_call", "agent": "worker", "tool": "deploy", "attempt_id": "a1"}
    store.append(ledger_bus.StreamId("team-a-1", "run-r1"), 0, "r1:1", [call])  # an open call
    calls: dict[str, dict[str, Any]] = {
        "tail": {"session": "team-a-1"},
        "open_calls": {"session": "team-a-1"},
        "post": {"session": "team-a-1", "body": "hi"},
        "dispatch_open": {"session": "team-a-1", "role": "r", "objective": "o"},
        "resolve": {"session": "team-a-1", "attempt_id": "a1", "outcome": "unknown"},
    }

    async def scenario(client: Client) -> None:
        for tool, args in calls.items():
            before = _everything(store)
            result = await client.call_tool(tool, args)
            text = " ".join(c.text for c in result.content if c.type == "text")
            if tool in refused:
                assert result.is_error, tool
                assert ": Refused: " in text, (tool, text)
                assert _everything(store) == before, tool
            else:
                assert ": Refused: " not in text, (tool, text)

    _run(build_server(store, who), scenario)


def test_the_command_serves_a_client_over_stdio(redis_url: str, prefix: str) -> None:
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "ledger_bus", "mcp", "--agent", "coder"],
        env=cli_env(redis_url, prefix),
    )

    async def scenario(client: Client) -> None:
        assert "post" in {t.name for t in (await client.list_tools()).tools}
        await _call(client, "post", session="over-stdio", body="hello from an MCP client")
        tail = await _call(client, "tail", session="over-stdio")
        assert [e["body"] for e in tail["events"]] == ["hello from an MCP client"]

    _run(server, scenario)
    shown = ledger_cli(redis_url, prefix, "--output", "jsonl", "tail", "over-stdio")
    assert [json.loads(line)["agent"] for line in shown.stdout.splitlines()] == ["coder"]


def test_the_command_refuses_a_bad_identity_and_a_memory_store() -> None:
    bad = ledger_cli("redis://127.0.0.1:1/0", "p", "mcp", "--agent", "has space")
    assert (bad.returncode, bad.stderr.count("\n")) == (2, 1), bad.stderr
    memory = ledger_cli("memory://", "p", "mcp", "--agent", "coder")
    assert memory.returncode == 2
    assert "memory://" in memory.stderr


def _nested(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    # a function, not a lambda: hypothesis reads a lambda's source to see that it recurses,
    # and a lambda over several lines is misread as one that does not
    return st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    _nested,
    max_leaves=12,
)
# The tools and their arguments; wait is left out, as a valid wait waits.
ARGUMENTS = {
    "sessions": ["limit"],
    "tail": ["session", "n", "types", "agents"],
    "post": ["session", "body", "kind", "fields", "append_id"],
    "open_calls": ["session"],
    "resolve": ["session", "attempt_id", "outcome", "result"],
    "dispatch_open": ["session", "role", "objective", "fields", "request_id"],
    "dispatch_close": ["session", "dispatch_id", "outcome"],
    "dispatch_list": ["session"],
    "no_such_tool": ["session"],
}


@st.composite
def calls(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    tool = draw(st.sampled_from(sorted(ARGUMENTS)))
    names = draw(st.lists(st.sampled_from(ARGUMENTS[tool] + ["extra"]), unique=True))
    session = st.sampled_from(["s", "s\x00", "", "x" * 300]) | st.text(max_size=12)
    return tool, {n: draw(session if n == "session" else JSON) for n in names}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(call=calls())
def test_any_arguments_are_a_one_line_error_or_a_call_and_an_error_writes_nothing(
    call: tuple[str, dict[str, Any]],
) -> None:
    store = ledger_bus.connect("memory://")
    tool, args = call

    async def scenario(client: Client) -> None:
        before = _everything(store)
        result = await client.call_tool(tool, args)
        if result.is_error:
            (text,) = [c.text for c in result.content if c.type == "text"]
            assert "\n" not in text, text
            assert _everything(store) == before

    _run(build_server(store, Identity("ops", "operator")), scenario)


def test_the_skill_names_only_the_servers_own_tools(store: EventStore) -> None:
    printed = ledger_cli("memory://", "p", "skill")
    assert printed.returncode == 0, printed.stderr
    front, _, body = printed.stdout.removeprefix("---\n").partition("\n---\n")
    assert front.splitlines()[0] == "name: ledger-bus"
    assert front.splitlines()[1].startswith("description: ")

    async def scenario(client: Client) -> None:
        tools = {t.name for t in (await client.list_tools()).tools}
        named = {word for word in re.findall(r"`([a-z_]+)`", body) if "_" in word or word in tools}
        assert named <= tools | {"append_id", "timeout_s"}, named - tools
        assert {"tail", "wait", "post", "dispatch_open", "dispatch_close"} <= named

    _run(build_server(store, Identity("coder")), scenario)


def test_a_token_is_printed_once_and_its_file_keeps_only_its_digest(tmp_path: Any) -> None:
    file = tmp_path / "tokens.json"
    made = ledger_cli("memory://", "p", "token", str(file), "--agent", "alice", "--role", "reader")
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip()
    assert token.startswith("lbt_")
    assert token not in file.read_text()
    assert oct(file.stat().st_mode & 0o777) == "0o600"
    assert Tokens.load(str(file)).identify(token) == Identity("alice", "reader", "*")
    assert Tokens.load(str(file)).identify(token + "x") is None
    bad = ledger_cli("memory://", "p", "token", str(file), "--agent", "has space")
    assert (bad.returncode, bad.stderr.count("\n")) == (2, 1), bad.stderr
    file.write_text("not json")
    broken = ledger_cli("redis://127.0.0.1:1/0", "p", "mcp", "--http", "--tokens", str(file))
    assert (broken.returncode, broken.stderr.count("\n")) == (2, 1), broken.stderr


def test_a_subscription_to_a_sessions_tail_is_told_when_it_grows(store: EventStore) -> None:
    ref = ledger_bus.StreamId("s", "planner")
    store.append(ref, 0, "p:0", [{"type": "message", "agent": "planner", "body": "start"}])

    async def scenario(client: Client) -> None:
        uri = "ledger://sessions/s/tail"
        async with client.listen(resource_subscriptions=[uri]) as subscription:
            store.append(ref, 1, "p:1", [{"type": "message", "agent": "planner", "body": "next"}])
            with anyio.fail_after(1.0):  # the bound: told within a second
                told = await subscription.__anext__()
            assert told.uri == uri  # type: ignore[union-attr]
        read = await client.read_resource(uri)
        tail = json.loads(read.contents[0].text)  # type: ignore[union-attr]
        assert [e["body"] for e in tail["events"]] == ["start", "next"]

    _run(build_server(store, Identity("coder")), scenario)


def test_a_subscription_to_another_teams_session_is_never_told_it_grew(store: EventStore) -> None:
    ours, theirs = ledger_bus.StreamId("team-a-1", "p"), ledger_bus.StreamId("team-b-1", "p")

    async def scenario(client: Client) -> None:
        uris = ["ledger://sessions/team-b-1/tail", "ledger://sessions/team-a-1/board"]
        async with client.listen(resource_subscriptions=uris) as subscription:
            # Their session grows first, then ours: the first word is of ours
            store.append(theirs, 0, "b:0", [{"type": "message", "agent": "b", "body": "x"}])
            await asyncio.sleep(0.3)  # three turns of the watcher: theirs published first
            store.append(ours, 0, "a:0", [{"type": "message", "agent": "a", "body": "y"}])
            with anyio.fail_after(2.0):
                told = await subscription.__anext__()
            assert told.uri == "ledger://sessions/team-a-1/board"  # type: ignore[union-attr]
            store.append(theirs, 1, "b:1", [{"type": "message", "agent": "b", "body": "z"}])
            with pytest.raises(TimeoutError), anyio.fail_after(0.5):
                await subscription.__anext__()

    _run(build_server(store, Identity("coder", "reader", "team-a-*")), scenario)


NOTE = {"session": "s", "kind": "note"}
OPEN = {"session": "s", "role": "r", "objective": "o"}
FORGERIES: list[tuple[str, dict[str, Any]]] = [
    ("post", {**NOTE, "kind": "reconcile.unresolved", "fields": {"attempt_id": "att-1"}}),
    ("post", {**NOTE, "kind": "tool.declared", "fields": {"tool": "pay", "safe_to_replay": True}}),
    ("post", {**NOTE, "kind": "run.finished"}),
    ("post", {**NOTE, "kind": "dispatch.open", "fields": {"record": {}}}),
    ("post", {**NOTE, "kind": "langgraph.checkpoint"}),
    ("post", {**NOTE, "kind": "native.checkpoint"}),
    ("post", {**NOTE, "fields": {"event_id": "x"}}),
    ("post", {**NOTE, "fields": {"run_id": "r1"}}),
    ("post", {**NOTE, "fields": {"parents": ["x"]}}),
    ("dispatch_open", {**OPEN, "fields": {"id": "d-2026-01-01-001"}}),
    ("dispatch_open", {**OPEN, "fields": {"completedAt": "now"}}),
    ("no_such_tool", {"session": "s"}),
]


def test_a_post_may_not_speak_for_the_ledger_a_run_or_a_framework(store: EventStore) -> None:
    call = {"type": "tool_call", "agent": "worker", "tool": "pay", "attempt_id": "att-1"}
    store.append(ledger_bus.StreamId("s", "run-r1"), 0, "r1:1", [{**call, "run_id": "r1"}])

    async def scenario(client: Client) -> None:
        before = _everything(store)
        refused = [await _refusal(client, tool, **args) for tool, args in FORGERIES]
        assert _everything(store) == before
        assert {_error_name(line) for line in refused} == {"InvalidInput"}, refused
        (flagless,) = await _call(client, "open_calls", session="s")
        assert flagless["flagged"] is False

    _run(build_server(store, Identity("coder")), scenario)


def test_cursors_lose_nothing_and_move_past_what_they_leave_out(store: EventStore) -> None:
    async def scenario(client: Client) -> None:
        store.append(
            ledger_bus.StreamId("new", "a"),
            0,
            "a:1",
            [{"type": "message", "agent": "a", "body": "first"}],
        )
        found = await _call(client, "wait", session="new", after=CURSOR_ZERO, timeout_s=1)
        assert [e["body"] for e in found["events"]] == ["first"]
        native = {"type": "mutation", "agent": "lg", "kind": "langgraph.checkpoint", "state": {}}
        store.append(ledger_bus.StreamId("new", "lg.ckpt"), 0, "lg:1", [native])
        hidden = await _call(client, "wait", session="new", after=found["cursor"], timeout_s=1)
        assert hidden["events"] == []
        assert hidden["cursor"] > found["cursor"]  # past the native record: no busy loop

    _run(build_server(store, Identity("coder")), scenario)


def test_sessions_are_found_among_other_teams_newer_ones(store: EventStore) -> None:
    store.append(
        ledger_bus.StreamId("team-a-1", "x"),
        0,
        "x",
        [{"type": "message", "agent": "a", "body": "."}],
    )
    for n in range(30):
        store.append(
            ledger_bus.StreamId(f"team-b-{n}", "x"),
            0,
            "x",
            [{"type": "message", "agent": "b", "body": "."}],
        )

    async def scenario(client: Client) -> None:
        assert [s["session"] for s in await _call(client, "sessions", limit=5)] == ["team-a-1"]

    _run(build_server(store, Identity("alice", "reader", "team-a-*")), scenario)


def test_a_resource_refused_says_why_in_one_line(store: EventStore) -> None:
    async def scenario(client: Client) -> None:
        for uri, name in [
            ("ledger://sessions/team-b-1/tail", "Refused"),
            ("ledger://sessions/team-a-1/board", "Refused"),
        ]:
            with pytest.raises(MCPError) as raised:
                await client.read_resource(uri)
            assert raised.value.error.message.startswith(f"{name}: "), raised.value.error.message
            assert "\n" not in raised.value.error.message

    _run(build_server(store, Identity("alice", "reader", "team-a-x")), scenario)


def test_a_read_of_a_session_that_does_not_exist_is_not_found_as_on_the_command_line(
    store: EventStore,
) -> None:
    store.append(
        ledger_bus.StreamId("orders-2026", "x"),
        0,
        "x",
        [{"type": "message", "agent": "a", "body": "."}],
    )

    async def scenario(client: Client) -> None:
        before = _everything(store)
        lines = [
            await _refusal(client, "tail", session="orders-2025"),
            await _refusal(client, "open_calls", session="orders-2025"),
            await _refusal(client, "dispatch_list", session="orders-2025"),
        ]
        for line in lines:
            assert _error_name(line) == "NotFound", line
            assert "no such session 'orders-2025'; did you mean orders-2026?" in line
            assert "a post starts it" in line
        with pytest.raises(MCPError) as raised:
            await client.read_resource("ledger://sessions/orders-2025/tail")
        assert raised.value.error.message.startswith("NotFound: no such session 'orders-2025'")
        # Another team's session is refused as it was, whether it exists or not
        assert _error_name(await _refusal(client, "tail", session="team-b-1")) == "Refused"
        assert _everything(store) == before

    _run(build_server(store, Identity("coder", "reader", "orders-*")), scenario)


def test_a_session_is_found_by_the_id_its_framework_knows(store: EventStore) -> None:
    # ADK sessions t1 (in shop) and t2 (in shop and in desk), as LedgerSessionService names them
    for session in ("adk~shop~ann~t1", "adk~shop~ann~t2", "adk~desk~bob~t2"):
        store.append(
            ledger_bus.StreamId(session, "adk.events"),
            0,
            "e",
            [{"type": "message", "agent": "adk", "body": session}],
        )

    async def everyone(client: Client) -> None:
        tail = await _call(client, "tail", session="t1")
        assert [e["session"] for e in tail["events"]] == ["adk~shop~ann~t1"]
        assert await _call(client, "open_calls", session="t1") == []
        quiet = await _call(client, "wait", session="t1", after=tail["cursor"], timeout_s=0)
        assert quiet["cursor"] == tail["cursor"]
        several = await _refusal(client, "tail", session="t2")
        assert _error_name(several) == "NotFound"
        assert "did you mean adk~desk~bob~t2, adk~shop~ann~t2?" in several

    async def shop_only(client: Client) -> None:
        # Of the two t2, the one its identity may read is the one it means; the other is
        # neither found nor named
        tail = await _call(client, "tail", session="t2")
        assert [e["session"] for e in tail["events"]] == ["adk~shop~ann~t2"]
        missing = await _refusal(client, "tail", session="t3")
        assert "desk" not in missing

    _run(build_server(store, Identity("ops", "operator")), everyone)
    _run(build_server(store, Identity("shop", "reader", "adk~shop~*")), shop_only)
