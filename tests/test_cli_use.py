"""The command line as a new user meets it: what it says of a session that does not exist, and
the small frictions (a cursor of 0, `ANY`, pretty-printed JSON, a URL that cannot work here)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

import ledger_bus as lb
from ledger_bus.store.base import EventStore
from tests.helpers import cli_env, ledger_cli


def msg(body: str) -> dict[str, str]:
    return {"type": "message", "agent": "a", "body": body}


@pytest.fixture
def written(redis_url: str, prefix: str) -> str:
    """A session `orders-2026` with two events in stream `main`; returns the URL."""
    with lb.connect(redis_url, prefix=prefix) as store:
        store.append(lb.StreamId("orders-2026", "main"), 0, "a", [msg("one"), msg("two")])
    return redis_url


def test_a_session_is_known_to_every_store_once_written(store: EventStore) -> None:
    assert not store.session_exists("fresh")
    store.append(lb.StreamId("fresh", "main"), 0, "a", [msg("x")])
    assert store.session_exists("fresh")


@pytest.mark.parametrize(
    "args",
    [
        ["tail", "orders-2025"],
        ["scan", "orders-2025"],
        ["read", "orders-2025", "main"],
        ["export", "orders-2025"],
        ["unresolved", "orders-2025"],
        ["inspect", "orders-2025"],
    ],
)
def test_a_session_that_does_not_exist_is_not_found_with_the_closest_names(
    written: str, prefix: str, args: list[str]
) -> None:
    done = ledger_cli(written, prefix, *args)
    assert done.returncode == 6
    assert done.stdout == ""
    assert done.stderr == ("ledger-bus: no such session 'orders-2025'; did you mean orders-2026?\n")


def test_a_stream_that_does_not_exist_is_not_found(written: str, prefix: str) -> None:
    done = ledger_cli(written, prefix, "read", "orders-2026", "mian")
    assert done.returncode == 6
    assert "no stream 'mian' in session 'orders-2026'; did you mean main?" in done.stderr


def test_tail_follow_on_a_new_session_says_it_waits_then_prints_what_comes(
    redis_url: str, prefix: str
) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "ledger_bus", "tail", "later", "--follow"],
        env=cli_env(redis_url, prefix),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        assert proc.stdout is not None
        assert proc.stderr.readline() == (
            "ledger-bus: no session 'later' yet: waiting for its first event\n"
        )
        with lb.connect(redis_url, prefix=prefix) as store:
            store.append(lb.StreamId("later", "main"), 0, "a", [msg("at last")])
        assert json.loads(proc.stdout.readline())["body"] == "at last"
    finally:
        proc.terminate()
        proc.communicate(timeout=30)  # and closes both pipes


def test_the_small_frictions(written: str, prefix: str) -> None:
    # scan --after 0 is the start, as read --after 0 is
    done = ledger_cli(written, prefix, "scan", "orders-2026", "--after", "0")
    assert [json.loads(line)["body"] for line in done.stdout.splitlines()] == ["one", "two"]
    # ANY, the Python constant's spelling, is accepted
    pretty = json.dumps(msg("three"), indent=2) + "\n" + json.dumps(msg("four"), indent=2)
    done = ledger_cli(
        written,
        prefix,
        *("append", "orders-2026", "main", "--append-id", "b", "--expected-version", "ANY"),
        stdin=pretty,  # pretty-printed JSON, two values over many lines
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["last_version"] == 4
    # A broken value names its line
    done = ledger_cli(written, prefix, "append", "s", "m", "--append-id", "c", stdin='{\n "a": }')
    assert done.returncode == 2
    assert done.stderr.startswith("ledger-bus: stdin line 2: not JSON")


def test_a_memory_url_is_refused_on_the_command_line() -> None:
    done = ledger_cli("memory://", "lb", "tail", "s")
    assert done.returncode == 2
    assert "each ledger-bus command is one of its own" in done.stderr
    assert done.stderr.count("\n") == 1


def test_a_recorded_event_shows_what_it_is() -> None:
    store = lb.connect("memory://")
    store.append(lb.StreamId("s1", "main"), 0, "a", [{**msg("x" * 60), "agent": "lead"}])
    (event,) = store.read_stream(lb.StreamId("s1", "main"))
    text = repr(event)
    assert text.startswith("RecordedEvent(s1/main v1 ")
    assert "message by lead: 'xxxxxxxx" in text
    assert text.endswith("…')")


def test_the_demo_names_the_command_as_it_can_be_run_from_here(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ledger_bus.cli import demo

    monkeypatch.setattr(sys, "argv", [".venv/bin/ledger-bus", "demo"])
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(os.path, "exists", lambda path: True)
    assert demo._program() == ".venv/bin/ledger-bus"
    monkeypatch.setattr(shutil, "which", lambda name: ".venv/bin/ledger-bus")
    assert demo._program() == "ledger-bus"
    monkeypatch.setattr(sys, "argv", ["/somewhere/__main__.py", "demo"])
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert demo._program() == f"{sys.executable} -m ledger_bus"


def test_sessions_show_what_each_holds_sorted_paged_and_filtered(
    redis_url: str, prefix: str
) -> None:
    import time

    with lb.connect(redis_url, prefix=prefix) as store:
        store.append(lb.StreamId("old", "main"), 0, "a", [msg("x")])
        time.sleep(1.2)  # the session index keeps activity to the millisecond
        store.append(lb.StreamId("busy", "main"), 0, "a", [msg("x"), msg("y")])
        call = {"type": "tool_call", "agent": "a", "tool": "t", "attempt_id": "c1"}
        store.append(lb.StreamId("busy", "calls"), 0, "b", [call])
        time.sleep(0.05)
        store.append(lb.StreamId("quiet", "main"), 0, "a", [msg("x")])

    def rows(*args: str) -> list[dict[str, object]]:
        done = ledger_cli(redis_url, prefix, "sessions", *args)
        assert done.returncode == 0, done.stderr
        return [json.loads(line) for line in done.stdout.splitlines()]

    listed = rows()
    assert [r["session"] for r in listed] == ["quiet", "busy", "old"]
    busy = listed[1]
    assert (busy["events"], busy["streams"], busy["open_attempts"]) == (3, 2, 1)
    assert [r["session"] for r in rows("--open")] == ["busy"]
    assert [r["session"] for r in rows("--active", "1")] == ["quiet", "busy"]
    assert [r["session"] for r in rows("--limit", "1", "--offset", "1")] == ["busy"]
