"""The OpenAI Agents SDK adapter: its Session on every store, and function tools recorded around
a run driven by the SDK's ScriptedModel, killed inside a tool and run again."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents")

from agents.exceptions import UserError
from agents.memory.session import Session

import ledger_bus as lb
from ledger_bus import aio
from ledger_bus.adapters.openai_agents import CAPABILITIES, LedgerSession
from ledger_bus.agent.recorder import UnresolvedAttempt
from ledger_bus.demo.server import LocalServer
from ledger_bus.model.records import AppendResult
from ledger_bus.operations.reconciler import Reconciler, ReconcilerConfig
from ledger_bus.operations.resolve import resolve_attempt
from ledger_bus.store.memory import MemoryStore
from ledger_bus.store.steps import Op
from tests.support.agents_sdk import build, handed_off, run
from tests.support.helpers import kill_when_ready, ledger_here, runs_of, url_for
from tests.support.proxy import DropProxy


@pytest.fixture(params=["redis", "cluster", "sqlite", "memory"])
def agents_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return url_for(request, tmp_path / "agents.db")


def item(text: str, role: str = "user") -> dict[str, Any]:
    return {"role": role, "content": text}


def test_the_session_keeps_adds_pops_and_clears_items(agents_url: str, prefix: str) -> None:
    async def main() -> None:
        store = await aio.connect(agents_url, prefix=prefix)
        session = LedgerSession("chat 1", store)  # not a session id: kept under a digest of it
        assert isinstance(session, Session)
        assert await session.get_items() == []
        assert await session.pop_item() is None
        await session.add_items([item("a"), item("b", "assistant")])
        await session.add_items([item("c")])
        assert await session.get_items() == [item("a"), item("b", "assistant"), item("c")]
        assert await session.get_items(limit=2) == [item("b", "assistant"), item("c")]
        assert await session.get_items(limit=0) == []
        assert await session.pop_item() == item("c")
        assert await session.get_items() == [item("a"), item("b", "assistant")]

        # Another process's session object reads what this one wrote.
        other = LedgerSession("chat 1", store)
        assert await other.get_items(limit=1) == [item("b", "assistant")]

        await session.clear_session()
        assert await other.get_items() == []
        # The same id at once, the same items: written anew, never taken for a retry.
        await other.add_items([item("a"), item("b", "assistant")])
        assert await session.get_items() == [item("a"), item("b", "assistant")]
        await store.aclose()

    asyncio.run(main())


@pytest.mark.parametrize("agents_url", ["memory", "sqlite"], indirect=True)
def test_what_a_caller_changes_in_the_items_it_gave_or_was_given_changes_no_session(
    agents_url: str, prefix: str
) -> None:
    """As SQLiteSession's: the items read back are the ones added, whatever a caller did to
    the lists and dicts it passed or was handed."""

    async def main() -> None:
        store = lb.connect(agents_url, prefix=prefix)
        session = LedgerSession("chat", store)
        given = [
            item("a"),
            {"type": "function_call", "call_id": "c1", "name": "t", "arguments": "{}"},
        ]
        await session.add_items(given)
        given[0]["content"] = "changed after the add"
        got = await session.get_items()
        got[0]["content"] = "changed after the read"
        got[1]["name"] = "another"
        expected = [
            item("a"),
            {"type": "function_call", "call_id": "c1", "name": "t", "arguments": "{}"},
        ]
        assert await session.get_items() == expected
        assert await LedgerSession("chat", store).get_items() == expected  # views are shared
        popped = await session.pop_item()
        assert popped == expected[1]
        popped["name"] = "changed after the pop"
        await session.add_items([popped])
        assert (await session.get_items())[-1]["name"] == "changed after the pop"
        store.close()

    asyncio.run(main())


# Items of every shape the SDK writes, and some it might: each must read back as given, its keys
# in their order, whether its event could take its text out of it or it was kept whole.
SHAPES: list[Any] = [
    {"content": "a user's words, content first", "role": "user"},
    {"role": "system", "content": [{"type": "input_text", "text": "be brief"}]},
    {
        "id": "msg_1",
        "content": [{"annotations": [], "text": "the answer", "type": "output_text"}],
        "role": "assistant",
        "status": "completed",
        "type": "message",
    },
    {"role": "assistant", "content": [{"type": "output_text", "text": ""}]},
    {"role": "assistant", "content": [{"type": "output_text", "text": "a"}, {"text": "b"}]},
    {"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]},
    {"role": "assistant", "content": [{"type": "output_text", "text": None}]},
    {"role": "user", "content": None},
    {"role": "developer"},
    {"role": "tool", "content": "not a role the ledger has a message for"},
    {"type": "function_call", "call_id": "s", "name": "t", "arguments": '{"b": 1, "a": [2]}'},
    {"type": "function_call", "call_id": "c", "name": "t", "arguments": '{"b":1,"a":"é"}'},
    {"type": "function_call", "call_id": "u", "name": "t", "arguments": '{"a": "\\u00e9"}'},
    {"type": "function_call", "call_id": "w", "name": "t", "arguments": '{ "a" : 1 }'},
    {"type": "function_call", "call_id": "l", "name": "t", "arguments": "[1, 2]"},
    {"type": "function_call", "call_id": "x", "name": "t", "arguments": "not json"},
    {"type": "function_call", "call_id": "e", "name": "t", "arguments": ""},
    {"type": "function_call", "call_id": "d", "name": "t", "arguments": '{"a": 1, "a": 2}'},
    {"type": "function_call", "call_id": "n", "name": "t"},
    {"type": "function_call", "call_id": "z", "name": "t", "arguments": "{}"},
    {"arguments": '{"k": 1.5}', "call_id": "o", "name": "t", "type": "function_call"},
    {"type": "function_call_output", "call_id": "s", "output": "text out"},
    {"type": "function_call_output", "call_id": "c", "output": ""},
    {
        "type": "function_call_output",
        "call_id": "u",
        "output": [{"type": "input_text", "text": "x"}],
    },
    {"type": "function_call_output", "call_id": "w"},
    {"output": "output first", "call_id": "o", "type": "function_call_output"},
    {"type": "reasoning", "id": "r1", "summary": [{"type": "summary_text", "text": "hm"}]},
    "a string item",
]


@pytest.mark.parametrize("agents_url", ["memory", "sqlite", "redis"], indirect=True)
def test_every_kind_of_item_reads_back_exactly_as_given_its_keys_in_order(
    agents_url: str, prefix: str
) -> None:
    """Messages, calls and outputs keep their text in their events only; the rest of each item
    is kept beside, and the item is put back together on reading, exactly (compared as JSON
    text, so the order of its keys counts), or kept whole where it could not be."""

    async def main() -> None:
        store = lb.connect(agents_url, prefix=prefix)
        session = LedgerSession("shapes", store)
        await session.add_items(SHAPES[:12])
        await session.add_items(SHAPES[12:])
        assert json.dumps(await session.get_items()) == json.dumps(SHAPES)
        # read again from the store alone, as a process that never saw the adds
        fresh = LedgerSession("shapes", store)
        fresh._views.forget_session(fresh.items.session_id)
        assert json.dumps(await fresh.get_items()) == json.dumps(SHAPES)
        popped = [await fresh.pop_item() for _ in SHAPES]
        assert json.dumps(popped[::-1]) == json.dumps(SHAPES)
        assert await session.get_items() == []
        store.close()

    asyncio.run(main())


def turn_items(n: int) -> list[Any]:
    """A turn as the SDK writes it: the user's message, a call, its output, the answer."""
    answer = {"type": "output_text", "text": f"answer {n:03d} " + "a" * 200, "annotations": []}
    return [
        {"content": f"question {n:03d} " + "q" * 200, "role": "user"},
        {
            "arguments": json.dumps({"key": f"k{n}"}),
            "call_id": f"call_{n}",
            "name": "lookup",
            "type": "function_call",
            "id": f"fc_{n}",
            "status": "completed",
        },
        {
            "call_id": f"call_{n}",
            "output": f"output {n:03d} " + "o" * 200,
            "type": "function_call_output",
        },
        {
            "id": f"msg_{n}",
            "content": [answer],
            "role": "assistant",
            "status": "completed",
            "type": "message",
        },
    ]


def test_a_session_keeps_each_text_once_and_little_beside_its_items() -> None:
    """Each message's and output's text is in one event, the one that says it: the item it
    came in keeps the rest. What the events hold, as JSON, is then less than twice the items'
    own JSON, ids and all (1.74x; it was 2.73x, each text twice and an item's event beside the
    event of the item itself)."""
    store = lb.connect("memory://")
    session = LedgerSession("once", store)
    turns = [turn_items(n) for n in range(20)]
    for items in turns:
        asyncio.run(session.add_items(items))
    events = [json.dumps(e.fields) for e in store.scan_session("once")]
    for n in range(20):
        for said in ("question", "output", "answer"):
            assert sum(f"{said} {n:03d} " in e for e in events) == 1, (said, n)
    given = sum(len(json.dumps(item)) for items in turns for item in items)
    assert sum(len(e) for e in events) / given < 2.0
    assert asyncio.run(session.get_items()) == [item for items in turns for item in items]


def test_a_session_written_an_event_an_item_and_the_items_events_after_still_reads_back() -> None:
    """Sessions written before the items' events carried their text: an `agents.item` mutation
    an item, then the items' events. They read back, pop and take new items as ever."""
    store = lb.connect("memory://")
    items = turn_items(0)
    stream = lb.StreamId("earlier", "oa.items")
    mutations = [
        {"type": "mutation", "agent": "openai-agents", "kind": "agents.item", "item": i}
        for i in items
    ]
    said = [
        {"type": "message", "agent": "user", "body": items[0]["content"]},
        {"type": "tool_call", "agent": "openai-agents", "tool": "lookup", "attempt_id": "call_0"},
        {
            "type": "tool_result",
            "agent": "openai-agents",
            "tool": "lookup",
            "attempt_id": "call_0",
            "status": "ok",
            "result": items[2]["output"],
        },
        {"type": "message", "agent": "assistant", "body": items[3]["content"][0]["text"]},
    ]
    store.append(stream, lb.ANY, "oa:add:earlier", mutations + said)
    session = LedgerSession("earlier", store)
    assert asyncio.run(session.get_items()) == items
    assert asyncio.run(session.pop_item()) == items[3]
    asyncio.run(session.add_items(turn_items(1)))
    assert asyncio.run(session.get_items()) == items[:3] + turn_items(1)


def test_an_add_whose_reply_is_lost_lands_once(redis_server: LocalServer, prefix: str) -> None:
    proxy = DropProxy(redis_server.port)

    async def main() -> None:
        url = f"redis://127.0.0.1:{proxy.port}/0"
        store = await aio.connect(url, prefix=prefix, timeout=5)
        session = LedgerSession("lossy", store)
        await session.add_items([item("first")])
        proxy.drop_next_reply_to(b"EVALSHA")
        await session.add_items([item("second"), item("third")])
        assert proxy.dropped == 1
        check = LedgerSession("lossy", lb.connect(redis_server.url, prefix=prefix))
        assert await check.get_items() == [item("first"), item("second"), item("third")]
        await store.aclose()

    try:
        asyncio.run(main())
    finally:
        proxy.close()


def test_a_run_records_each_function_tool_call_before_and_after(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    async def main() -> None:
        store = await aio.connect(redis_url, prefix=prefix)
        session = LedgerSession("run-1", store)
        agent, model = build(session, tmp_path)
        assert await run(agent, session) == "refunded and notified"
        model.assert_complete()
        assert ran(tmp_path) == {"refund": 1, "notify": 1}
        tools = await store.read_stream(lb.StreamId("run-1", "oa.tools"))
        assert [(e.type, e.get("tool")) for e in tools] == [
            ("tool_call", "refund"),
            ("tool_result", "refund"),
            ("tool_call", "notify"),
            ("tool_result", "notify"),
        ]
        assert tools[1]["result"] == "refunded 7"
        assert await store.open_attempts("run-1") == []
        items = await session.get_items()
        assert items[0] == {"content": "refund order 7", "role": "user"}
        assert len(items) >= 6  # the question, two calls, two outputs, the answer
        assert CAPABILITIES.to_dict()["recovery"] == "best_effort"
        await store.aclose()

    asyncio.run(main())


def test_a_run_killed_inside_a_tool_is_flagged_and_never_runs_it_again_silently(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    args = ["tests.support.agents_sdk", redis_url, prefix, "crash", str(tmp_path)]
    kill_when_ready(args, (tmp_path / "notify.started").exists, "the agent")
    store = lb.connect(redis_url, prefix=prefix)
    (attempt,) = store.open_attempts("crash")
    assert (attempt.tool, attempt.attempt_id) == ("notify", "c-notify")
    time.sleep(1.2)  # the process's lease (1 s) expires
    reconciler = Reconciler(store, ReconcilerConfig(grace_s=0, sessions=("crash",)))
    assert reconciler.run_pass().flagged == 1

    async def again(calls: str, safe: tuple[str, ...] = ()) -> str:
        session = LedgerSession("crash", store)
        agent, _ = build(session, tmp_path, calls=calls, safe=safe)
        return await run(agent, session)

    # The run again, its model asking for the same calls under the same ids: refund's recorded
    # result comes back without running it; notify was never finished.
    with pytest.raises(UserError, match="c-notify"):
        asyncio.run(again("c"))
    assert ran(tmp_path) == {"refund": 1, "notify": 1}

    # Under new ids, as a real model's would be: refund was finished and runs again as a new
    # call; notify, with the same arguments as the unfinished call, does not.
    # (The SDK reports a tool's exception as a UserError, the ledger's error its cause.)
    with pytest.raises(UserError, match="c-notify") as caught:
        asyncio.run(again("d"))
    assert isinstance(caught.value.__cause__, UnresolvedAttempt)
    assert ran(tmp_path) == {"refund": 2, "notify": 1}

    # Once someone decides (the call's outcome is unknown), the call asked again gets that
    # decision, and notify does not run again: only a tool declared safe to replay would.
    resolve_attempt(store, "crash", "c-notify", "unknown")
    assert asyncio.run(again("e")) == "refunded and notified"
    assert ran(tmp_path) == {"refund": 3, "notify": 1}
    assert store.open_attempts("crash") == []
    (taken,) = [
        e
        for e in store.read_stream(lb.StreamId("crash", "oa.tools"))
        if e.type == "tool_result" and e.step_id == "e-notify"
    ]
    assert taken.get("status") == "error"
    assert taken.get("result") == {"outcome": "unknown", "resolved_by": "operator"}
    store.close()


@pytest.mark.parametrize(
    ("flag", "value", "output"),
    [
        ("--ok", '"refunded 42"', "refunded 42"),
        ("--error", '"the bank said no"', "error: the bank said no"),
    ],
)
def test_an_outcome_an_operator_resolves_is_what_the_rerun_gets_and_the_tool_runs_no_more(
    redis_url: str, prefix: str, tmp_path: Path, flag: str, value: str, output: str
) -> None:
    # Given a run killed inside notify, and an operator who resolved its call from the shell
    args = ["tests.support.agents_sdk", redis_url, prefix, "res", str(tmp_path)]
    kill_when_ready(args, (tmp_path / "notify.started").exists, "the agent")
    done = ledger_here(redis_url, prefix, "resolve", "res", "c-notify", flag, value)
    assert done.returncode == 0, done.stderr
    store = lb.connect(redis_url, prefix=prefix)

    async def again(calls: str) -> str:
        session = LedgerSession("res", store)
        agent, _ = build(session, tmp_path, calls=calls)
        return await run(agent, session)

    # When the run is started again and its model asks for notify under a new id
    final = asyncio.run(again("d"))
    # Then notify does not run: the model is handed the recorded outcome as notify's output
    assert final == "refunded and notified"
    assert ran(tmp_path) == {"refund": 2, "notify": 1}
    outputs = [
        i["output"]
        for i in asyncio.run(LedgerSession("res", store).get_items())
        if i.get("type") == "function_call_output" and i.get("call_id") == "d-notify"
    ]
    assert outputs == [output]
    # And the outcome is handed over once: a later, deliberate call with the same arguments runs
    asyncio.run(again("e"))
    assert ran(tmp_path) == {"refund": 3, "notify": 2}
    assert store.open_attempts("res") == []
    store.close()


def test_two_processes_add_to_one_session_at_once_and_every_item_lands_once(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    script = tmp_path / "adder.py"
    script.write_text(ADDER)
    adders = [
        subprocess.Popen([sys.executable, str(script), redis_url, prefix, f"p{n}"])
        for n in range(2)
    ]
    assert [a.wait(120) for a in adders] == [0, 0]

    async def items() -> list[Any]:
        return await LedgerSession("shared", lb.connect(redis_url, prefix=prefix)).get_items()

    found = asyncio.run(items())
    for writer in ("p0", "p1"):
        mine = [i["content"] for i in found if i["role"] == writer]
        assert mine == [f"{writer}-{n}" for n in range(25)], "each once, in its writer's order"


SHARER = """
import asyncio, json, sys, time
import ledger_bus as lb
from ledger_bus.adapters.openai_agents import LedgerSession

url, prefix, writer, start_at, phase = sys.argv[1:6]

async def main():
    session = LedgerSession("two", lb.connect(url, prefix=prefix))
    await session.get_items()  # connected before the start
    time.sleep(max(0.0, float(start_at) - time.time()))
    if phase == "add":
        for _ in range(50):
            await session.add_items([{"role": "user", "content": "the same"}])
    else:
        popped = []
        while (found := await session.pop_item()) is not None:
            popped.append(found["content"])
        print(json.dumps(popped))

asyncio.run(main())
"""


async def _share_in_threads(store: lb.EventStore, phase: str) -> list[list[str]]:
    """Two sessions of one id in one process, each on threads of its own, as SHARER does."""
    out: list[list[str]] = []

    async def one() -> None:
        session = LedgerSession("two", store)
        popped: list[str] = []
        if phase == "add":
            for _ in range(50):
                await session.add_items([{"role": "user", "content": "the same"}])
        else:
            while (found := await session.pop_item()) is not None:
                popped.append(found["content"])
        out.append(popped)

    await asyncio.gather(one(), one())
    return out


class RivalStore(MemoryStore):
    """A memory store on which, whenever `watched` pops, a rival pops first: the watched pop
    loses every try while items remain (two poppers in step, the other one always ahead)."""

    watched: LedgerSession | None = None
    rival: LedgerSession | None = None
    lost = 0

    def append_op(
        self,
        stream: lb.StreamId,
        expected_version: Any,
        append_id: str,
        events: Sequence[object],
        *,
        durability: Any = None,
        fence: lb.Fence | None = None,
    ) -> Op[AppendResult]:
        if self.watched is not None and self.rival is not None and append_id.startswith("oa:pop:"):
            watched, self.watched = self.watched, None  # the rival's own pop goes through
            try:
                if asyncio.run(self.rival.pop_item()) is not None:
                    self.lost += 1
            finally:
                self.watched = watched
        return super().append_op(
            stream, expected_version, append_id, events, durability=durability, fence=fence
        )


def test_a_pop_that_keeps_losing_to_another_writer_tries_again_until_none_is_left() -> None:
    store = RivalStore()
    watched, rival = LedgerSession("race", store), LedgerSession("race", store)
    asyncio.run(watched.add_items([item(f"item-{n}") for n in range(80)]))
    store.watched, store.rival = watched, rival
    # Given a rival that pops first each time, 80 times in a row, then the pop finds none left
    assert asyncio.run(watched.pop_item()) is None
    assert store.lost == 80
    assert asyncio.run(rival.get_items()) == []


@pytest.mark.parametrize("agents_url", ["memory", "redis", "sqlite"], indirect=True)
def test_two_writers_on_one_session_store_each_add_and_hand_out_each_pop_once(
    agents_url: str, prefix: str, tmp_path: Path
) -> None:
    # One store for this process's sessions (a memory store is seen by this process alone).
    store = lb.connect(agents_url, prefix=prefix)

    def share(phase: str) -> list[list[str]]:
        if agents_url == "memory://":
            return asyncio.run(_share_in_threads(store, phase))
        script = tmp_path / "sharer.py"
        script.write_text(SHARER)
        start = str(time.time() + 1.5)
        procs = [
            subprocess.Popen(
                [sys.executable, str(script), agents_url, prefix, f"p{n}", start, phase],
                stdout=subprocess.PIPE,
                text=True,
            )
            for n in range(2)
        ]
        outs = [p.communicate(timeout=120)[0] for p in procs]
        assert [p.returncode for p in procs] == [0, 0]
        return [json.loads(o) for o in outs if o.strip()]

    async def items() -> list[Any]:
        return await LedgerSession("two", store).get_items()

    # Given two writers adding the same item 50 times each, at the same moment
    share("add")
    # Then all 100 adds are stored
    assert len(asyncio.run(items())) == 100

    # Given 100 items told apart, then two writers popping until none is left, at once
    async def number() -> None:
        session = LedgerSession("two", store)
        await session.clear_session()
        await session.add_items([item(f"item-{n}") for n in range(100)])

    asyncio.run(number())
    popped = [p for out in share("pop") for p in out]
    # Then each item was handed out exactly once, and none is left
    assert sorted(popped) == sorted(f"item-{n}" for n in range(100))
    assert asyncio.run(items()) == []


class Interleaved(MemoryStore):
    """A memory store that runs `beside` (once) just before the next append: another writer
    getting in between a session's read and its write, every time, not by chance."""

    beside: Callable[[], object] | None = None

    def append_op(self, *args: Any, **kwargs: Any) -> Op[AppendResult]:
        beside, self.beside = self.beside, None
        if beside is not None:
            beside()
        return (yield from super().append_op(*args, **kwargs))


def test_a_writer_between_a_read_and_a_write_is_neither_lost_nor_handed_the_same_item() -> None:
    # Given two sessions of one id, the second writing between the first's read and its write
    store = Interleaved()
    first, second = LedgerSession("two", store), LedgerSession("two", store)
    same = [item("the same")]
    store.beside = lambda: asyncio.run(second.add_items(same))
    # When both add the same item
    asyncio.run(first.add_items(same))
    # Then both adds are stored
    assert asyncio.run(first.get_items()) == same + same
    # When both pop, the second between the first's read and its write
    asyncio.run(first.clear_session())
    asyncio.run(first.add_items([item("a"), item("b")]))
    got: list[Any] = []
    store.beside = lambda: got.append(asyncio.run(second.pop_item()))
    got.append(asyncio.run(first.pop_item()))
    # Then each got an item of its own, and none is left
    assert sorted(i["content"] for i in got) == ["a", "b"]
    assert asyncio.run(first.get_items()) == []


ADDER = """
import asyncio, sys
import ledger_bus as lb
from ledger_bus.adapters.openai_agents import LedgerSession

url, prefix, writer = sys.argv[1:4]

async def main():
    session = LedgerSession("shared", lb.connect(url, prefix=prefix))
    for n in range(25):
        await session.add_items([{"role": writer, "content": f"{writer}-{n}"}])

asyncio.run(main())
"""


def ran(where: Path) -> dict[str, int]:
    return runs_of(where, "refund", "notify")


def test_a_session_from_a_url_keeps_the_sdk_s_limit_and_type_rules(
    redis_url: str, prefix: str
) -> None:
    """As the SDK's own sessions: `session_settings.limit` bounds get_items() without a
    limit, an explicit limit wins, and an item that is not JSON is a TypeError, writing
    nothing."""
    from agents.memory import SessionSettings

    async def scenario() -> None:
        session = LedgerSession.from_url(
            "sdk-rules", redis_url, prefix=prefix, session_settings=SessionSettings(limit=2)
        )
        await session.add_items([{"role": "user", "content": str(n)} for n in range(5)])
        assert [i["content"] for i in await session.get_items()] == ["3", "4"]
        assert [i["content"] for i in await session.get_items(limit=4)] == ["1", "2", "3", "4"]
        with pytest.raises(TypeError):
            await session.add_items([{"role": "user", "content": {1, 2}}])
        assert len(await session.get_items(limit=100)) == 5
        session.close()
        other = LedgerSession("sdk-rules", lb.connect(redis_url, prefix=prefix))
        assert other.session_settings == SessionSettings()  # as the SDK's sessions default
        assert len(await other.get_items()) == 5  # no limit: every item

    asyncio.run(scenario())


def test_a_run_s_items_are_written_once_as_the_ledger_s_events(tmp_path: Path) -> None:
    """A user's message, each function call and its output, the model's answer: the ledger's
    own events, beside the items, each call one attempt named by its call id (requested and
    ended once, by the recorded tool here)."""
    store = lb.connect("memory://")
    session = LedgerSession("items-events", store)
    agent, _ = build(session, tmp_path)
    assert asyncio.run(run(agent, session)) == "refunded and notified"

    events = [e for e in store.scan_session("items-events") if e.type != "mutation"]
    said = [(e.type, e.agent, e.get("tool") or e.get("body"), e.attempt_id) for e in events]
    assert said == [
        ("message", "user", "refund order 7", None),
        ("tool_call", "openai-agents", "refund", "c-refund"),
        ("tool_result", "openai-agents", "refund", "c-refund"),
        ("tool_call", "openai-agents", "notify", "c-notify"),
        ("tool_result", "openai-agents", "notify", "c-notify"),
        ("message", "assistant", "refunded and notified", None),
    ]
    assert {e.stream.name for e in events if e.type != "message"} == {"oa.tools"}
    assert store.open_attempts("items-events") == []
    # and the session gives back its items as they were added, nothing else
    items = asyncio.run(session.get_items())
    assert [i.get("type", "message") for i in items] == [
        "message",
        "function_call",
        "function_call_output",
        "function_call",
        "function_call_output",
        "message",
    ]


def test_calls_of_tools_not_recorded_are_written_from_the_items(tmp_path: Path) -> None:
    store = lb.connect("memory://")
    session = LedgerSession("items-plain", store)
    items = [
        {"role": "user", "content": "refund order 7"},
        {"type": "function_call", "call_id": "k1", "name": "refund", "arguments": '{"order":7}'},
        {"type": "function_call_output", "call_id": "k1", "output": "refunded 7"},
        {"type": "reasoning", "id": "r1", "summary": []},
    ]
    asyncio.run(session.add_items(items[:2]))
    assert [a.attempt_id for a in store.open_attempts("items-plain")] == ["k1"]
    asyncio.run(session.add_items(items[2:]))
    events = [e for e in store.scan_session("items-plain") if e.type != "mutation"]
    assert [(e.type, e.get("tool"), e.attempt_id) for e in events] == [
        ("message", None, None),
        ("tool_call", "refund", "k1"),
        ("tool_result", "refund", "k1"),
    ]
    assert events[1]["args"] == {"order": 7}
    assert events[2].parents == [events[1].event_id]
    assert store.open_attempts("items-plain") == []
    assert asyncio.run(session.get_items()) == items


def test_each_agent_of_a_handoff_is_a_run_following_the_one_that_handed_off() -> None:
    store = lb.connect("memory://")
    session = LedgerSession("handoff", store)
    assert handed_off(session) == "refunded"
    runs = store.read_stream(lb.StreamId("handoff", "oa.runs"))
    said = [(e.agent, e.type, e.get("kind") or e.get("tool")) for e in runs]
    assert said == [
        ("triage", "mutation", "run.started"),
        ("triage", "tool_call", "model"),
        ("triage", "tool_result", "model"),
        ("triage", "mutation", "run.finished"),
        ("support", "mutation", "run.started"),
        ("support", "tool_call", "model"),
        ("support", "tool_result", "model"),
        ("support", "mutation", "run.finished"),
    ]
    started = {e.agent: e for e in runs if e.get("kind") == "run.started"}
    assert started["support"].parents == [started["triage"].event_id]
    assert started["support"]["parent_run"] == started["triage"].run_id
    assert runs[3]["handed_to"] == "support"
    result = runs[2]
    assert result.parents == [runs[1].event_id]
    assert set(result["result"]["usage"]) == {
        "input_tokens",
        "output_tokens",
        "total_tokens",
        "requests",
    }
    assert {e.run_id for e in runs[:4]} == {started["triage"].run_id}
    assert store.open_attempts("handoff") == []


def test_what_sessions_keep_in_the_process_is_capped_and_an_evicted_session_reads_back() -> None:
    """Two hundred sessions of twenty items on one store, a cap of a few sessions: the sessions
    together hold no more than the cap and the session in use; each reads back whole."""
    store = lb.connect("memory://")

    async def scenario() -> tuple[int, int, list[list[Any]]]:
        largest = 0
        for n in range(200):
            session = LedgerSession(f"capped-{n}", store, max_bytes=20_000)
            await session.add_items([item(f"item {i} of {n} " * 10) for i in range(20)])
            await session.get_items()
            largest = max(largest, session.memory())
        one = LedgerSession("capped-199", store)._views.of(lb.StreamId("capped-199", "oa.items"))
        back = [await LedgerSession(f"capped-{n}", store).get_items() for n in (0, 99, 199)]
        return largest, one.weight, back

    largest, one_session, back = asyncio.run(scenario())
    assert 0 < one_session < 20_000
    assert largest <= 20_000 + one_session
    for n, items in zip((0, 99, 199), back, strict=True):
        assert items == [item(f"item {i} of {n} " * 10) for i in range(20)]
