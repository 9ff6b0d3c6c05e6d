"""A token taken out of the tokens file stops reading at once: an open live stream of the web
view is checked again at each event and each ping, and ends there, with nothing of what came
after."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import ledger_bus as lb
from ledger_bus.access.identity import Identity
from ledger_bus.access.tokens import TokenFile, add_token
from ledger_bus.demo.server import free_port
from ledger_bus.store.base import EventStore
from tests.support.events import msg
from tests.support.helpers import ledger_serving
from tests.support.ui import served, view_app


def revoke(file: str, agent: str) -> None:
    """Take the agent's tokens out of the file, as its owner would: the file written whole."""
    with open(file, encoding="utf-8") as f:
        data = json.load(f)
    data["tokens"] = [entry for entry in data["tokens"] if entry["agent"] != agent]
    with open(file + ".new", "w", encoding="utf-8") as f:
        json.dump(data, f)
    os.replace(file + ".new", file)


def until(lines: Iterator[str], text: str) -> list[str]:
    """The stream's lines up to the first that holds `text`."""
    got = []
    for line in lines:
        got.append(line)
        if text in line:
            return got
    pytest.fail(f"the stream ended before {text!r}: {got}")


def to_the_end(lines: Iterator[str], seconds: float) -> tuple[list[str], bool]:
    """The stream's lines until it ends (True), or until `seconds` passed (False)."""
    got: list[str] = []
    deadline = time.monotonic() + seconds
    try:
        for line in lines:
            got.append(line)
            if time.monotonic() > deadline:
                return got, False
    except httpx.ReadTimeout:
        return got, False
    return got, True


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_a_revoked_tokens_live_stream_ends_at_the_next_event_without_it(
    redis_url: str, prefix: str, redis_store: EventStore, tmp_path: Path
) -> None:
    # Given a session, and a view behind tokens of two readers of it
    ref = lb.StreamId("team-a-1", "main")
    redis_store.append(ref, 0, "a0", [msg("start")])
    (first,) = redis_store.tail("team-a-1", 1)
    file = str(tmp_path / "tokens.json")
    viewer = add_token(file, Identity("viewer", "reader", "team-a-*"))
    keeper = add_token(file, Identity("keeper", "reader", "team-a-*"))
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    live = f"{base}/s/team-a-1/live?after={first.cursor}"
    command = ("ui", "--port", str(port), "--tokens", file)
    with (
        ledger_serving(redis_url, prefix, port, tmp_path / "ui.log", *command),
        httpx.stream("GET", live, headers=bearer(viewer), timeout=10) as theirs,
        httpx.stream("GET", live, headers=bearer(keeper), timeout=10) as kept,
    ):
        assert (theirs.status_code, kept.status_code) == (200, 200)
        lines, kept_lines = theirs.iter_lines(), kept.iter_lines()
        # and each reading it live
        redis_store.append(ref, 1, "a1", [msg("before revocation")])
        until(lines, "before revocation")
        until(kept_lines, "before revocation")
        # When one token is taken out of the file and the session grows
        revoke(file, "viewer")
        redis_store.append(ref, 2, "a2", [msg("secret after revocation")])
        # Then its stream ends, without the new event; the other's carries it
        rest, ended = to_the_end(lines, 8)
        assert ended, f"the revoked token's stream went on: {rest}"
        assert not any("secret" in line for line in rest), rest
        until(kept_lines, "secret after revocation")
        # and the token opens nothing any more
        again = httpx.get(live, headers=bearer(viewer), timeout=5)
        assert again.status_code == 401


def test_a_revoked_tokens_quiet_live_stream_ends_at_the_next_ping(
    redis_url: str,
    prefix: str,
    redis_store: EventStore,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ledger_bus.ui import app

    monkeypatch.setattr(app, "PING_S", 0.3)
    ref = lb.StreamId("team-a-1", "main")
    redis_store.append(ref, 0, "a0", [msg("start")])
    (first,) = redis_store.tail("team-a-1", 1)
    file = str(tmp_path / "tokens.json")
    viewer = add_token(file, Identity("viewer", "reader", "team-a-*"))
    view = view_app(redis_url, prefix, tokens=TokenFile(file))
    with served(view) as base:
        live = f"{base}/s/team-a-1/live?after={first.cursor}"
        with httpx.stream("GET", live, headers=bearer(viewer), timeout=10) as theirs:
            lines = theirs.iter_lines()
            redis_store.append(ref, 1, "a1", [msg("before revocation")])
            until(lines, "before revocation")
            # When its token is taken out of the file, and nothing happens in the session
            revoke(file, "viewer")
            # Then its stream ends at the next ping, not kept open by pings for ever
            rest, ended = to_the_end(lines, 5)
            assert ended, f"the revoked token's stream went on: {rest[-3:]}"
