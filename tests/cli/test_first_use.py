"""The command line as a new user meets it: what it says of a session that does not exist, and
the small frictions (a cursor of 0, `ANY`, pretty-printed JSON, a URL that cannot work here)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime

import pytest

import ledger_bus as lb
from ledger_bus.store.base import EventStore
from ledger_bus.store.redis import RedisStore
from tests.support.events import call, msg
from tests.support.helpers import cli_env, ledger_here


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
    done = ledger_here(written, prefix, *args)
    assert done.returncode == 6
    assert done.stdout == ""
    assert done.stderr == ("ledger-bus: no such session 'orders-2025'; did you mean orders-2026?\n")


def test_a_stream_that_does_not_exist_is_not_found(written: str, prefix: str) -> None:
    done = ledger_here(written, prefix, "read", "orders-2026", "mian")
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
    done = ledger_here(written, prefix, "scan", "orders-2026", "--after", "0")
    assert [json.loads(line)["body"] for line in done.stdout.splitlines()] == ["one", "two"]
    # ANY, the Python constant's spelling, is accepted
    pretty = json.dumps(msg("three"), indent=2) + "\n" + json.dumps(msg("four"), indent=2)
    done = ledger_here(
        written,
        prefix,
        *("append", "orders-2026", "main", "--append-id", "b", "--expected-version", "ANY"),
        stdin=pretty,  # pretty-printed JSON, two values over many lines
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["last_version"] == 4
    # A broken value names its line
    done = ledger_here(written, prefix, "append", "s", "m", "--append-id", "c", stdin='{\n "a": }')
    assert done.returncode == 2
    assert done.stderr.startswith("ledger-bus: stdin line 2: not JSON")


def test_a_memory_url_is_refused_on_the_command_line() -> None:
    done = ledger_here("memory://", "lb", "tail", "s")
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
        time.sleep(3.0)  # the session index keeps activity to the millisecond
        store.append(lb.StreamId("busy", "main"), 0, "a", [msg("x"), msg("y")])
        busy_at = time.monotonic()
        call = {"type": "tool_call", "agent": "a", "tool": "t", "attempt_id": "c1"}
        store.append(lb.StreamId("busy", "calls"), 0, "b", [call])
        time.sleep(0.05)
        store.append(lb.StreamId("quiet", "main"), 0, "a", [msg("x")])

    def rows(*args: str) -> list[dict[str, object]]:
        done = ledger_here(redis_url, prefix, "sessions", *args)
        assert done.returncode == 0, done.stderr
        return [json.loads(line) for line in done.stdout.splitlines()]

    listed = rows()
    assert [r["session"] for r in listed] == ["quiet", "busy", "old"]
    busy = listed[1]
    assert (busy["events"], busy["streams"], busy["open_attempts"]) == (3, 2, 1)
    assert [r["session"] for r in rows("--open")] == ["busy"]
    # Active within 2.5 s more than busy's age: busy and quiet are (unless the command takes
    # 2.5 s to start), old (3 s older) is not, however long the commands above took.
    window = f"{time.monotonic() - busy_at + 2.5:.3f}"
    assert [r["session"] for r in rows("--active", window)] == ["quiet", "busy"]
    assert [r["session"] for r in rows("--limit", "1", "--offset", "1")] == ["busy"]


# -- one output rule -------------------------------------------------------------------------


def test_a_table_never_wraps_or_cuts_an_id_however_narrow_the_terminal(
    redis_url: str, prefix: str
) -> None:
    long_ids = [f"orchestrator/deploy-the-service-to-production#{n}@12345" for n in (1, 2)]
    with lb.connect(redis_url, prefix=prefix) as store:
        store.append(lb.StreamId("ops", "main"), 0, "a", [call(a) for a in long_ids])
    for columns in ("200", "60"):
        env = {**cli_env(redis_url, prefix), "COLUMNS": columns}
        shown = subprocess.run(
            [sys.executable, "-m", "ledger_bus", "--output", "table", "unresolved", "ops"],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        ).stdout
        for attempt in long_ids:
            assert any(attempt in line for line in shown.splitlines()), (
                f"{attempt} is not whole on one line at {columns} columns:\n{shown}"
            )


def test_results_follow_the_output_rule(redis_url: str, prefix: str) -> None:
    def run(*args: str, stdin: str = "") -> str:
        done = ledger_here(redis_url, prefix, *args, stdin=stdin)
        assert done.returncode == 0, done.stderr
        return done.stdout

    appended = json.loads(
        run("append", "out", "main", "--append-id", "1", stdin=json.dumps(msg("x")))
    )
    assert appended["last_version"] == 1
    opened = json.loads(
        run(
            "dispatch",
            "open",
            "out",
            "--role",
            "writer",
            "--objective",
            "draft",
            "--now",
            "2026-11-29T10:00:00Z",
        )
    )
    assert opened == {
        "session": "out",
        "id": "d-2026-11-29-001",
        "role": "writer",
        "objective": "draft",
    }
    with lb.connect(redis_url, prefix=prefix) as store:
        board = store.read_stream(lb.StreamId("out", "dispatch"))
        record = dict(board[-1]["record"], outcome="donee")  # an unrecognised word
        store.append(
            lb.StreamId("out", "dispatch"),
            lb.ANY,
            "odd",
            [
                {
                    "type": "mutation",
                    "agent": "x",
                    "kind": "dispatch.import",
                    "record": {**record, "id": "d-2026-11-29-002"},
                }
            ],
        )
    checked = [
        json.loads(line)
        for line in run("dispatch", "check", "out", "--now", "2026-11-29T11:00:00Z").splitlines()
    ]
    assert [r.get("id") for r in checked if "window" in r] == ["d-2026-11-29-001"]
    assert [r for r in checked if "warning" in r] == [
        {"warning": "d-2026-11-29-002: unrecognised status 'donee'"}
    ]
    before = datetime.now(UTC).strftime("%Y-%m-%d")
    table = run("--output", "table", "dispatch", "open", "out", "--role", "r", "--objective", "o")
    after = datetime.now(UTC).strftime("%Y-%m-%d")  # the id is of the day the command ran
    assert table.splitlines()[1].split() in (["id", f"d-{before}-001"], ["id", f"d-{after}-001"])
    assert "{" not in table


def test_follow_and_tail_follow_print_lines_the_rule_chooses(redis_url: str, prefix: str) -> None:
    with lb.connect(redis_url, prefix=prefix) as store:
        store.append(lb.StreamId("seen", "main"), 0, "a", [msg("first one")])
        store.append(lb.StreamId("seen", "main"), 1, "b", [msg("second one")])
    follow = ledger_here(
        redis_url,
        prefix,
        "--output",
        "table",
        "follow",
        "seen",
        "--group",
        "g",
        "--consumer",
        "c",
        "--once",
        "--block-ms",
        "100",
    )
    assert follow.returncode == 0, follow.stderr
    # A new group starts at the session's end: nothing yet, and no JSON on a table.
    assert "{" not in follow.stdout
    env = cli_env(redis_url, prefix)
    command = [sys.executable, "-m", "ledger_bus", "--output", "table"]
    with subprocess.Popen(
        [*command, "tail", "seen", "-n", "1", "--follow"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    ) as tail:
        assert tail.stdout is not None
        _read_follow(tail, redis_url, prefix)


def _read_follow(tail: subprocess.Popen[str], redis_url: str, prefix: str) -> None:
    assert tail.stdout is not None
    try:
        header = tail.stdout.readline()
        assert header.split() == ["at", "stream", "v", "type", "agent", "what"]
        assert tail.stdout.readline().split()[1:] == ["main", "2", "message", "a", "second", "one"]
        with lb.connect(redis_url, prefix=prefix) as store:
            store.append(lb.StreamId("seen", "main"), 2, "c", [msg("third")])
        assert tail.stdout.readline().split()[1:] == ["main", "3", "message", "a", "third"]
    finally:
        tail.terminate()
        tail.wait(timeout=30)


# -- the demo's sessions ----------------------------------------------------------------------


def test_demo_clean_removes_the_demo_sessions_and_nothing_else(redis_url: str, prefix: str) -> None:
    other = f"{prefix}-other"
    with (
        lb.connect(redis_url, prefix=prefix) as store,
        lb.connect(redis_url, prefix=other) as beside,
    ):
        for session in ("demo-20261130-120000-1", "demo-20261130-120500-2", "work"):
            store.append(lb.StreamId(session, "main"), 0, "a", [msg("x"), call("c1")])
            store.group_create(session, "g", None)
        beside.append(lb.StreamId("demo-20261130-120000-1", "main"), 0, "a", [msg("x")])

        done = ledger_here(redis_url, prefix, "demo", "--clean")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == {"prefix": prefix, "removed": 2}
        assert [s for s, _ in store.sessions()] == ["work"]
        assert [s for s, _ in store.sessions_with_open_attempts()] == ["work"]
        assert not store.session_exists("demo-20261130-120000-1")
        assert beside.session_exists("demo-20261130-120000-1"), "another prefix is left alone"
        assert isinstance(store, RedisStore)
        assert store.purge_sessions("work[") == [], "the start is matched literally, not as a glob"
        # A writer that wrote there before is told its history went; a new one starts afresh.
        again = lb.StreamId("demo-20261130-120000-1", "main")
        with pytest.raises(lb.HistoryRewound):
            store.append(again, lb.ANY, "b", [msg("again")])
    with lb.connect(redis_url, prefix=prefix) as fresh:
        fresh.append(again, 0, "b", [msg("again")])
        assert fresh.stream_version(again) == 1


def test_the_demo_view_fits_the_terminal_and_keeps_its_footer() -> None:
    from rich.console import Console

    from ledger_bus.cli.demo import DemoView

    view = DemoView()
    with lb.connect("memory://") as store:
        ref = lb.StreamId("d", "orchestrator")
        for n in range(40):
            store.append(
                ref,
                lb.ANY,
                str(n),
                [{"type": "mutation", "agent": "o", "kind": "task.assigned", "task_id": f"t{n}"}],
            )
        for event in store.scan_session("d"):
            view.add(event)
    view.killed = "worker-2"
    for height, width in ((25, 80), (12, 60), (50, 120)):
        with open(os.devnull, "w") as sink:
            console = Console(width=width, height=height, record=True, file=sink)
            console.print(view.render("d", height, width))
        lines = console.export_text().splitlines()
        assert len(lines) <= height, f"{len(lines)} lines on a terminal {height} tall"
        assert "worker-2 was killed with SIGKILL" in "".join(lines[-2:])
