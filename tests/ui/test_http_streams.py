"""What a live stream of the web view costs the server: a new stream starts at the session's
end, not its start; catching up after an old cursor reads a bounded number of bytes at a time;
and a token holds at most its limit of open streams, which no other token's stream counts
against. Counted on the store's reads, not timed."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx

import ledger_bus as lb
from ledger_bus import aio
from ledger_bus.access.identity import Identity
from ledger_bus.access.limits import Limits
from ledger_bus.access.tokens import TokenFile, add_token
from ledger_bus.model.ids import CURSOR_ZERO
from ledger_bus.model.records import RecordedEvent
from ledger_bus.store.base import EventStore
from ledger_bus.ui.app import create_app
from tests.support.events import msg
from tests.support.ui import served


class Counted:
    """The asyncio store, with what its reads of events return counted: events and bytes."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.events = 0
        self.largest = 0  # bytes of the largest single read

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _count(self, found: list[RecordedEvent]) -> list[RecordedEvent]:
        self.events += len(found)
        self.largest = max(self.largest, sum(len(json.dumps(e.fields)) for e in found))
        return found

    async def scan_session(self, *args: Any, **kwargs: Any) -> list[RecordedEvent]:
        return self._count(await self.inner.scan_session(*args, **kwargs))

    async def tail(self, *args: Any, **kwargs: Any) -> list[RecordedEvent]:
        return self._count(await self.inner.tail(*args, **kwargs))

    async def wait_session(self, *args: Any, **kwargs: Any) -> list[RecordedEvent]:
        return self._count(await self.inner.wait_session(*args, **kwargs))


def counted_view(redis_url: str, prefix: str, **options: Any) -> tuple[Any, list[Counted]]:
    opened: list[Counted] = []

    async def open_store() -> Any:
        opened.append(Counted(await aio.connect(redis_url, prefix=prefix)))
        return opened[-1]

    return create_app(open_store, redis_url, **options), opened


def rows(url: str, n: int, headers: dict[str, str] | None = None) -> list[tuple[str, str]]:
    """The first `n` rows of the stream at `url`: (id, data)."""
    out: list[tuple[str, str]] = []
    event: dict[str, str] = {}
    with httpx.stream("GET", url, headers=headers or {}, timeout=10) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if line:
                name, _, value = line.partition(":")
                value = value.removeprefix(" ")
                event[name] = event[name] + "\n" + value if name in event else value
                continue
            if "id" in event:
                out.append((event["id"], event.get("data", "")))
                if len(out) == n:
                    return out
            event = {}
    return out


def test_a_new_stream_starts_at_the_sessions_end_and_reads_none_of_its_past(
    redis_url: str, prefix: str, redis_store: EventStore
) -> None:
    # Given a session of 3,000 events
    ref = lb.StreamId("long", "main")
    for n in range(30):
        redis_store.append(ref, lb.ANY, f"a{n}", [msg(f"old {n}-{k}") for k in range(100)])
    app, opened = counted_view(redis_url, prefix)
    with served(app) as base:
        httpx.get(f"{base}/s/long?format=json", timeout=10)  # the page a stream comes from
        (store,) = opened
        before = store.events
        got: list[tuple[str, str]] = []
        # When a stream is opened without a cursor, and the session then grows
        reader = threading.Thread(target=lambda: got.extend(rows(f"{base}/s/long/live", 1)))
        reader.start()
        time.sleep(0.5)  # the stream is open
        redis_store.append(ref, lb.ANY, "fresh", [msg("fresh")])
        reader.join(timeout=20)
    # Then it gives what came after it opened, having read a handful of events, not 3,000
    assert len(got) == 1, got
    assert "fresh" in got[0][1], got
    read = store.events - before
    assert read <= 10, f"a new stream read {read} events"


def test_a_stream_catching_up_reads_a_bounded_number_of_bytes_at_a_time(
    redis_url: str, prefix: str, redis_store: EventStore
) -> None:
    # Given a session of 24 events of 256 KB (6 MB)
    ref = lb.StreamId("big", "main")
    for n in range(24):
        redis_store.append(ref, lb.ANY, f"a{n}", [msg(f"{n:02d}" + "x" * 256_000)])
    app, opened = counted_view(redis_url, prefix)
    with served(app) as base:
        # When a stream catches up from the session's start
        got = rows(f"{base}/s/big/live?after={CURSOR_ZERO}", 24)
    # Then it gives every event once, in order, reading at most about 1 MB at a time
    assert [i for i, _ in got] == [e.cursor for e in redis_store.scan_session("big")]
    (store,) = opened
    assert store.largest <= 1_500_000, f"one read of {store.largest:,} bytes"


def test_a_token_holds_its_limit_of_live_streams_and_other_tokens_are_not_counted(
    redis_url: str, prefix: str, redis_store: EventStore, tmp_path: Path
) -> None:
    redis_store.append(lb.StreamId("team-a-1", "main"), 0, "a0", [msg("start")])
    file = str(tmp_path / "tokens.json")
    viewer = add_token(file, Identity("viewer", "reader", "team-a-*"))
    keeper = add_token(file, Identity("keeper", "reader", "team-a-*"))
    app = create_app(
        lambda: aio.connect(redis_url, prefix=prefix),
        redis_url,
        tokens=TokenFile(file),
        limits=Limits(streams=2),
    )

    def as_(token: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}

    with served(app) as base, httpx.Client(timeout=10) as http:
        live = f"{base}/s/team-a-1/live"

        def stream(token: str) -> Any:
            return http.stream("GET", live, headers=as_(token))

        with stream(viewer) as one, stream(viewer) as two:
            assert (one.status_code, two.status_code) == (200, 200)
            # A third of one token's is refused, saying why
            third = http.get(live, headers=as_(viewer))
            assert third.status_code == 429, third.text
            assert "holds 2 live streams at once already" in third.json()["error"]
            # Another token's is not
            with stream(keeper) as other:
                assert other.status_code == 200
        # Once they are closed, the token may open streams again
        deadline = time.monotonic() + 5
        while True:
            with stream(viewer) as again:
                if again.status_code == 200 or time.monotonic() > deadline:
                    assert again.status_code == 200
                    break
            time.sleep(0.1)
