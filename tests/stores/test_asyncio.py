"""ledger_bus.aio: the store, the recorder and the tailer as coroutines, on redis.asyncio, on the
SQL store's async engines and (memory) on worker threads. (The contract suite itself runs
AsyncStore's own methods as the aio_redis, aio_cluster, aio_sqlite and aio_postgresql stores:
conftest.py, tests/support/aio.py.)"""

from __future__ import annotations

import asyncio
import inspect
import sys
from pathlib import Path
from typing import Any

import pytest

import ledger_bus as lb
from ledger_bus import aio
from ledger_bus.agent.recorder import UnresolvedAttempt
from ledger_bus.demo.server import LocalServer
from ledger_bus.store.async_store import AsyncStore
from ledger_bus.store.base import EventStore
from ledger_bus.store.memory import MemoryStore
from ledger_bus.store.steps import Op
from tests.support.cluster import LocalCluster
from tests.support.events import msg
from tests.support.helpers import url_for
from tests.support.pgserver import LocalPostgres


class Ticker:
    """Counts 10 ms turns of the event loop while it runs: nothing blocked the loop if they
    kept coming."""

    def __init__(self) -> None:
        self.ticks = 0
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(0.01)
            self.ticks += 1

    def stop(self) -> int:
        self.task.cancel()
        return self.ticks


@pytest.fixture(params=["redis", "cluster", "sqlite", "postgresql", "memory"])
def aio_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return url_for(request, tmp_path / "aio.db")


def test_concurrent_appends_from_one_loop_each_land_once(aio_url: str, prefix: str) -> None:
    async def main() -> None:
        async with await aio.connect(aio_url, prefix=prefix) as store:
            assert store.native == (aio_url != "memory://"), "only memory runs on threads"
            ref = lb.StreamId("s", "main")
            # 64 writers racing on one stream with expected versions: one wins each version.
            results = await asyncio.gather(
                *(store.append(ref, 0, f"w{n}", [msg(str(n))]) for n in range(64)),
                return_exceptions=True,
            )
            won = [r for r in results if isinstance(r, lb.AppendResult)]
            assert len(won) == 1
            assert all(isinstance(r, lb.VersionConflict) for r in results if r not in won)
            # 64 streams at once: each lands, and a retry of each deduplicates.
            refs = [lb.StreamId("s", f"x{n}") for n in range(64)]
            first = await asyncio.gather(*(store.append(r, 0, "a1", [msg(r.name)]) for r in refs))
            again = await asyncio.gather(
                *(store.append(r, lb.ANY, "a1", [msg(r.name)]) for r in refs)
            )
            assert [r.cursor for r in first] == [r.cursor for r in again]
            assert all(r.deduplicated for r in again)
            assert (await store.session_info("s")).events == 65
            events = [e async for e in store.iter_session("s", page=10)]
            assert len(events) == 65
            assert [e.cursor for e in events] == sorted(e.cursor for e in events)

    asyncio.run(main())


def test_a_waiting_reader_wakes_on_an_append_without_blocking_the_loop(
    aio_url: str, prefix: str
) -> None:
    async def main() -> None:
        async with await aio.connect(aio_url, prefix=prefix) as store:
            ref = lb.StreamId("w", "main")
            await store.append(ref, 0, "a1", [msg("before")])
            (before,) = await store.tail("w", 1)
            ticker = Ticker()
            waiting = asyncio.create_task(store.wait_session("w", before.cursor, 5000))
            await asyncio.sleep(0.2)
            await store.append(ref, 1, "a2", [msg("after")])
            found = await asyncio.wait_for(waiting, 5)
            ticks = ticker.stop()
            assert [e["body"] for e in found] == ["after"]
            assert ticks >= 10, "the loop kept running while the reader waited"

    asyncio.run(main())


def test_bad_input_is_refused_before_anything_is_written(redis_url: str, prefix: str) -> None:
    async def main() -> None:
        async with await aio.connect(redis_url, prefix=prefix) as store:
            with pytest.raises(lb.InvalidEvent):
                await store.append(lb.StreamId("b", "main"), 0, "a1", [{"type": "nope"}])
            with pytest.raises(lb.InvalidInput):
                await store.append("b/main", 0, "a1", [msg("x")])  # type: ignore[arg-type]
            assert not await store.session_exists("b")

    asyncio.run(main())


def test_an_unreachable_server_is_backend_unavailable_after_the_timeout() -> None:
    async def main() -> None:
        store = await aio.connect("redis://127.0.0.1:1/0", timeout=0.3)
        with pytest.raises(lb.BackendUnavailable, match="did not answer within"):
            await store.stream_version(lb.StreamId("s", "main"))
        await store.aclose()

    asyncio.run(main())


def test_a_server_killed_and_restarted_under_async_appends_loses_nothing_acknowledged(
    own_server: LocalServer, prefix: str
) -> None:
    async def main() -> None:
        async with await aio.connect(own_server.url, prefix=prefix, timeout=15) as store:
            acknowledged: list[lb.AppendResult] = []

            async def writer(n: int) -> None:
                ref = lb.StreamId("k", f"w{n}")
                for i in range(30):
                    acknowledged.append(await store.append(ref, i, f"{n}:{i}", [msg(str(i))]))

            writers = asyncio.gather(*(writer(n) for n in range(8)))
            await asyncio.sleep(0.05)
            await asyncio.to_thread(own_server.kill)
            await asyncio.to_thread(own_server.start)
            await writers
            found = await store.scan_session("k")
            assert len(acknowledged) == 240
            assert {(e.stream.name, e.version) for e in found} == {
                (r.stream.name, r.last_version) for r in acknowledged
            }

    asyncio.run(main())


def test_postgresql_killed_under_async_appends_loses_nothing_and_the_loop_runs_meanwhile(
    prefix: str,
) -> None:
    """The SQL store under asyncio retries a lost database as the blocking one does, pausing
    on the event loop (store/sql/waits.py): other coroutines run while it waits."""
    with LocalPostgres(fsync=False) as server:

        async def main() -> None:
            async with await aio.connect(server.url, prefix=prefix, timeout=30) as store:
                assert store.native
                acknowledged: list[lb.AppendResult] = []

                done = asyncio.Event()

                async def writer(n: int) -> None:
                    ref = lb.StreamId("k", f"w{n}")
                    i = 0
                    while not done.is_set():
                        acknowledged.append(await store.append(ref, i, f"{n}:{i}", [msg(str(i))]))
                        i += 1

                writers = asyncio.gather(*(writer(n) for n in range(8)))
                await asyncio.sleep(0.1)
                await asyncio.to_thread(server.kill)
                ticker = Ticker()
                await asyncio.sleep(1.0)  # the writers retry, pausing on the loop
                ticks = ticker.stop()
                await asyncio.to_thread(server.start)
                await asyncio.sleep(0.3)
                done.set()
                await writers
                assert ticks >= 20, "the loop ran while the writers waited for the database"
                found = await store.scan_session("k")
                assert len(acknowledged) > 8
                assert {(e.stream.name, e.version) for e in found} == {
                    (r.stream.name, r.last_version) for r in acknowledged
                }

        asyncio.run(main())


def test_the_sql_extras_are_named_when_the_async_driver_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "aiosqlite", None)  # as if it were not installed

    async def main() -> None:
        needed = r"needs aiosqlite: pip install 'ledger-bus\[sql\]'"
        with pytest.raises(lb.InvalidInput, match=needed):
            await aio.connect(f"sqlite:///{tmp_path / 'x.db'}")

    asyncio.run(main())
    assert not (tmp_path / "x.db").exists(), "nothing was written"


def test_durability_beyond_local_is_refused_on_an_asyncio_cluster_client(
    redis_cluster: LocalCluster, prefix: str
) -> None:
    async def main() -> None:
        url = redis_cluster.url + "?durability=replicas:1"
        async with await aio.connect(url, prefix=prefix) as store:
            with pytest.raises(lb.BackendRefused, match="asyncio cluster client"):
                await store.append(lb.StreamId("d", "main"), 0, "a1", [msg("x")])
            assert not await store.session_exists("d")

    asyncio.run(main())


def test_the_async_recorder_records_before_calling_and_resumes_without_calling_again(
    aio_url: str, prefix: str
) -> None:
    calls: list[str] = []

    async def search(q: str) -> str:
        calls.append(q)
        await asyncio.sleep(0)
        return f"found {q}"

    def charge(amount: int) -> str:
        calls.append(f"charge {amount}")
        return "charged"

    async def main() -> None:
        async with await aio.connect(aio_url, prefix=prefix) as store:
            recorder = aio.AsyncRecorder(store, "r", "planner")
            async with recorder.run("run1") as run:
                assert await run.call("search", {"q": "redis"}, search) == "found redis"
                assert await run.call("charge", {"amount": 5}, charge) == "charged"
                await run.message("done")
            events = await store.read_stream(lb.StreamId("r", "run-run1"))
            kinds = [e.type for e in events]
            assert kinds[1:5] == ["tool_call", "tool_result", "tool_call", "tool_result"]

            # Resumed: both results come from the ledger; neither tool runs again.
            async with recorder.run("run1", resume=True) as run:
                assert await run.call("search", {"q": "redis"}, search) == "found redis"
                assert await run.call("charge", {"amount": 5}, charge) == "charged"
            assert calls == ["redis", "charge 5"]

            # A call requested and never finished (as a crash leaves it) stops the resume.
            async with recorder.run("run2") as run:
                done, _ = await run.begin_call("charge", {"amount": 9})
                assert not done
            assert [a.tool for a in await store.open_attempts("r")] == ["charge"]
            with pytest.raises(UnresolvedAttempt):
                async with recorder.run("run2", resume=True) as run:
                    await run.call("charge", {"amount": 9}, charge)
            assert calls == ["redis", "charge 5"]

    asyncio.run(main())


def test_the_async_tailer_delivers_at_least_once_and_takes_over(aio_url: str, prefix: str) -> None:
    async def main() -> None:
        async with await aio.connect(aio_url, prefix=prefix) as store:
            ref = lb.StreamId("t", "main")
            await store.append(ref, 0, "a1", [msg("old")])
            options = aio.TailerOptions(block_ms=100, claim_idle_ms=200)
            first = aio.AsyncTailer(store, "t", "workers", "one", options)
            context = await first.join(5)
            assert [e["body"] for e in context] == ["old"]
            for n in range(3):
                await store.append(ref, n + 1, f"b{n}", [msg(f"new{n}")])
            taken = await first.poll()  # taken, and never acked: "one" died
            assert [d.event["body"] for d in taken] == ["new0", "new1", "new2"]

            seen: list[str] = []

            async def handle(event: lb.RecordedEvent) -> None:
                seen.append(str(event["body"]))

            second = aio.AsyncTailer(store, "t", "workers", "two", options)
            await asyncio.sleep(0.3)
            await second.run(handle, batches=3)
            assert seen == ["new0", "new1", "new2"]
            assert (await second.stats()).pending == 0

    asyncio.run(main())


def test_the_asyncio_store_has_every_method_of_the_contract_with_the_same_parameters() -> None:
    # Given the blocking store's public methods (its operations, `x_op`, and its plan of an
    # append are how the drivers share one meaning; `close` is `aclose` under asyncio; the
    # families a store offers besides, blocking, are its core's)
    def public(cls: type) -> dict[str, Any]:
        return {
            name: value
            for name, value in inspect.getmembers(cls, callable)
            if not name.startswith("_")
        }

    blocking, awaited = public(EventStore), public(AsyncStore)
    besides = {"close"}
    contract = {n for n in blocking if not n.endswith("_op") and n not in besides}
    # Then AsyncStore has each, awaited, with the same parameters, and nothing else but its own
    assert contract - awaited.keys() == set()
    assert awaited.keys() - contract == {"aclose", "drive", "watch"}
    for name in sorted(contract):
        theirs = awaited[name]
        assert inspect.iscoroutinefunction(theirs) or inspect.isasyncgenfunction(theirs), name
        ours = inspect.signature(blocking[name])
        its = inspect.signature(theirs)
        assert list(its.parameters.values()) == list(ours.parameters.values()), name
        returns = str(ours.return_annotation).replace("Iterator[", "AsyncIterator[")
        assert str(its.return_annotation) == returns, name


def test_each_operation_is_declared_once_and_both_stores_run_that_declaration() -> None:
    # Given the contract's methods on the blocking store and on AsyncStore
    declared = {
        name: method
        for name, method in inspect.getmembers(EventStore, callable)
        if hasattr(method, "steps")
    }
    # Then nearly all of them are an operation declared by its steps, and AsyncStore's method of
    # the same name runs the very same steps (the few written out run more than one operation:
    # a paged iteration, a restore's batches)
    written_out = {"iter_session", "restore", "iter_append_ids"}
    contract = {
        n
        for n, _ in inspect.getmembers(EventStore, callable)
        if not n.startswith("_") and not n.endswith("_op")
    } - {"close"}
    assert contract - declared.keys() == written_out
    for name, method in declared.items():
        assert getattr(AsyncStore, name).steps is method.steps, name
        assert method.steps.__name__ == f"{name}_op"

    # and a store that overrides an operation's steps is run by its own, under both drivers
    class Counting(MemoryStore):
        tails = 0

        def tail_op(
            self,
            session_id: str,
            n: int = 20,
            before: str | None = None,
            *,
            resolve_artifacts: bool | None = None,
        ) -> Op[list[lb.RecordedEvent]]:
            self.tails += 1
            return super().tail_op(session_id, n, before, resolve_artifacts=resolve_artifacts)

    core = Counting()
    core.append(lb.StreamId("s", "main"), 0, "a", [msg("hi")])
    assert [e["body"] for e in core.tail("s", 5)] == ["hi"]
    assert [e["body"] for e in asyncio.run(AsyncStore(core).tail("s", 5))] == ["hi"]
    assert core.tails == 2
