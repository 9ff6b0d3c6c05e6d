"""What fault drills found: reused run ids, hostile input, a mutation's own defaults, and the one
error boundary of the command line. Each test fails on the code before its fix."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

import ledger_bus as lb
from ledger_bus import aio
from ledger_bus.demo.server import LocalServer, free_port
from ledger_bus.operations.reconciler import FLAG_KIND, Reconciler, ReconcilerConfig
from ledger_bus.store.base import EventStore
from ledger_bus.store.redis import RedisStore
from tests.support.helpers import cli_env, kill, ledger_cli, ledger_here, start_recorded
from tests.support.pgserver import LocalPostgres
from tests.support.snapshot import whole_state


def deep(levels: int) -> object:
    """A JSON value of `levels` nested objects, built without recursion."""
    value: dict[str, object] = {}
    for _ in range(levels - 1):
        value = {"a": value}
    return value


# -- a run id used again -------------------------------------------------------------------------


def test_a_run_id_used_again_gets_new_attempt_ids_and_each_orphan_is_flagged_and_resolved(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    store = lb.connect(redis_url, prefix=prefix)
    reconciler = Reconciler(store, ReconcilerConfig(grace_s=0), on_action=lambda record: None)
    resolved = []
    for round_ in (1, 2):
        folder = tmp_path / str(round_)
        folder.mkdir()
        proc, _ = start_recorded(redis_url, prefix, folder, "unsafe")  # run "r1", every time
        kill(proc)
        deadline = time.monotonic() + 30
        while store.lease_alive("crash", "run-r1"):
            assert time.monotonic() < deadline, "the killed run's lease never expired"
            time.sleep(0.05)

        assert reconciler.run_pass().flagged == 1, f"round {round_}: the orphan was not flagged"
        (orphan,) = store.open_attempts("crash")
        done = ledger_cli(redis_url, prefix, "resolve", "crash", orphan.attempt_id, "--unknown")
        assert done.returncode == 0, done.stderr
        resolved.append(json.loads(done.stdout))
        assert store.open_attempts("crash") == [], f"round {round_}: the resolution wrote nothing"

    first, second = resolved
    assert first["attempt_id"] == "r1/c2#1"
    assert second["attempt_id"] != first["attempt_id"]
    assert second["cursor"] > first["cursor"]
    events = store.read_stream(lb.StreamId("crash", "reconciler"))
    assert Counter(e["attempt_id"] for e in events if e.get("kind") == FLAG_KIND) == Counter(
        {first["attempt_id"]: 1, second["attempt_id"]: 1}
    )
    calls = [e.attempt_id for e in store.scan_session("crash") if e.type == "tool_call"]
    assert len(calls) == len(set(calls)) == 4, "no attempt id was recorded twice"
    store.close()


def test_a_flag_marks_only_the_attempt_whose_call_it_names(store: EventStore) -> None:
    # Given an attempt id requested, closed, and requested again (a plain writer reusing ids)
    ref = lb.StreamId("again", "main")
    call = {"type": "tool_call", "agent": "a", "tool": "t", "attempt_id": "x"}
    first = store.append(ref, lb.ANY, "c1", [call])
    store.append(ref, lb.ANY, "r1", [{**call, "type": "tool_result", "status": "ok"}])
    store.append(ref, lb.ANY, "c2", [call])
    flag = {"type": "mutation", "agent": "r", "kind": FLAG_KIND, "attempt_id": "x"}
    # When a flag naming the first call arrives late
    store.append(ref, lb.ANY, "f1", [{**flag, "call_cursor": first.cursor}])
    # Then the open attempt, which is the second call, is not marked by it
    (open_now,) = store.open_attempts("again")
    assert open_now.flagged_cursor is None
    # And a flag naming the second call marks it
    store.append(ref, lb.ANY, "f2", [{**flag, "call_cursor": open_now.cursor}])
    assert store.open_attempts("again")[0].flagged_cursor is not None


# -- hostile input through the API ---------------------------------------------------------------


@pytest.mark.parametrize("levels", [126, 127, 256, 300, 1_000, 100_000])
def test_deep_nesting_is_refused_by_name_at_any_depth(store: EventStore, levels: int) -> None:
    # The event is level 1 and its field `x` level 2: `levels` more below the limit of 128 fit.
    event = {"type": "mutation", "agent": "a", "kind": "k", "x": deep(levels)}
    ref = lb.StreamId("deep", f"d{levels}")
    if levels + 1 <= 128:
        assert store.append(ref, 0, "a", [event]).last_version == 1
        return
    with pytest.raises(lb.InvalidEvent, match="nested more than 128 levels deep") as raised:
        store.append(ref, 0, "a", [event])
    assert raised.value.index == 0
    assert str(raised.value.field).startswith("x.a.a")
    assert store.stream_version(ref) == 0


@pytest.mark.parametrize("name", ["s\ud800", "s\x85", "s\x9f", "s\x80", "s\x00", "s{x}", "s t"])
def test_names_with_surrogates_or_control_characters_are_invalid_input(name: str) -> None:
    with pytest.raises(lb.InvalidInput):
        lb.StreamId(name, "main")
    with pytest.raises(lb.InvalidInput):
        lb.StreamId("s", name)


def test_an_append_id_with_a_lone_surrogate_is_refused_and_nothing_is_written(
    store: EventStore,
) -> None:
    ref = lb.StreamId("sur", "main")
    with pytest.raises(lb.InvalidInput, match="append_id"):
        store.append(ref, 0, "a\ud800", [{"type": "message", "agent": "a", "body": "x"}])
    assert store.stream_version(ref) == 0


@pytest.mark.parametrize("field", ["agent", "run_id", "attempt_id", "tool"])
def test_identifiers_with_c1_controls_are_invalid_events(store: EventStore, field: str) -> None:
    event = {"type": "tool_call", "agent": "a", "tool": "t", "attempt_id": "x", field: "a\x85b"}
    with pytest.raises(lb.InvalidEvent, match="control characters") as raised:
        store.append(lb.StreamId("c1", "main"), 0, "a", [event])
    assert raised.value.field == field


def test_a_mutations_own_null_result_and_empty_args_are_kept(store: EventStore) -> None:
    ref = lb.StreamId("keep", "main")
    event: dict[str, object] = {
        "type": "mutation",
        "agent": "a",
        "kind": "cache.stored",
        "result": None,
        "args": {},
    }
    store.append(ref, 0, "a", [event])
    (recorded,) = store.read_stream(ref)
    assert recorded.fields["result"] is None
    assert recorded.fields["args"] == {}
    # The same fields on the types that define them are defaults, left out as the spec says.
    call = {"type": "tool_call", "agent": "a", "tool": "t", "attempt_id": "x", "args": {}}
    store.append(ref, 1, "b", [call])
    assert "args" not in store.read_stream(ref, after_version=1)[0].fields


# -- the command line's one error boundary -------------------------------------------------------


def run_raw(url: str, prefix: str, args: list[bytes], stdin: bytes = b"") -> tuple[int, bytes]:
    """The command with arguments as raw bytes (not UTF-8, as a shell may pass them)."""
    done = subprocess.run(
        [sys.executable.encode(), b"-m", b"ledger_bus", *args],
        input=stdin,
        capture_output=True,
        env=cli_env(url, prefix),
        timeout=60,
        check=False,
    )
    return done.returncode, done.stderr


def one_line(stderr: bytes) -> str:
    text = stderr.decode("utf-8")
    assert text.count("\n") == 1, text
    assert text.startswith("ledger-bus: "), text
    assert "Traceback" not in text
    return text


@pytest.mark.parametrize(
    "args",
    [
        [b"tail", b"s\xff"],
        [b"read", b"s", b"m\xfe\xff"],
        [b"append", b"s", b"main", b"--append-id", b"a\xff"],
        [b"scan", b"s", b"--after", b"1\xff-0"],
        [b"follow", b"s", b"--group", b"g\xff", b"--consumer", b"c", b"--once"],
    ],
)
def test_arguments_that_are_not_utf8_are_bad_input_in_one_line(
    redis_url: str, prefix: str, args: list[bytes]
) -> None:
    code, stderr = run_raw(
        redis_url, prefix, args, stdin=b'{"type":"message","agent":"a","body":"x"}'
    )
    assert code == 2
    one_line(stderr)
    with lb.connect(redis_url, prefix=prefix) as store:
        assert store.sessions() == [], "nothing was written"


@pytest.mark.parametrize(
    ("stdin", "expected"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b'{"type":"mutation","agent":"a","kind":"k","x":' + b"[" * 300 + b"]" * 300 + b"}", "128"),
        (b'{"type":"message","agent":"a","body":"\xff"}', "not UTF-8"),
        (b'{"type":"message","agent":"a","body":"\\ud800"}', "surrogate"),
        (b'{"type":"message","agent":"a\\u0085","body":"x"}', "control"),
        (b'{"type":"mutation","agent":"a","kind":"k","x":NaN}', "not a JSON number"),
    ],
)
def test_hostile_stdin_to_append_is_bad_input_in_one_line_and_writes_nothing(
    redis_url: str, prefix: str, stdin: bytes, expected: str
) -> None:
    code, stderr = run_raw(
        redis_url, prefix, [b"append", b"s", b"main", b"--append-id", b"a"], stdin
    )
    assert code == 2
    assert expected in one_line(stderr)
    with lb.connect(redis_url, prefix=prefix) as store:
        assert store.stream_version(lb.StreamId("s", "main")) == 0


def test_usage_errors_are_one_line_with_exit_2(redis_url: str, prefix: str) -> None:
    for args in (["tail"], ["tail", "s", "--bogus"], ["read", "s", "m", "--after", "x"], ["nope"]):
        done = ledger_cli(redis_url, prefix, *args)
        assert done.returncode == 2, args
        one_line(done.stderr.encode())


def test_a_reader_that_goes_away_ends_tail_quietly(redis_url: str, prefix: str) -> None:
    with lb.connect(redis_url, prefix=prefix) as store:
        ref = lb.StreamId("pipe", "main")
        body = "x" * 2000
        for start in range(0, 500, 100):
            events = [{"type": "message", "agent": "a", "body": body}] * 100
            store.append(ref, lb.ANY, str(start), events)
    shell = f"{sys.executable} -m ledger_bus tail pipe -n 500 | head -1 >/dev/null"
    done = subprocess.run(
        ["bash", "-o", "pipefail", "-c", shell],
        env=cli_env(redis_url, prefix),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


@pytest.mark.parametrize(
    ("url", "code", "says"),
    [
        ("redis://127.0.0.1:{port}/99", 8, "DB index is out of range"),
        ("redis+cluster://127.0.0.1:{port}/0", 8, "not a Redis Cluster node"),
        ("redis+cluster://127.0.0.1:1/0", 5, "the cluster at redis://127.0.0.1:1/0 did not answer"),
        ("redis://127.0.0.1:{http}/0", 5, "no Redis at this address"),
        ("redis://127.0.0.1:1/0", 5, "nothing listens at 127.0.0.1:1 (connection refused)"),
    ],
)
def test_a_url_that_leads_nowhere_useful_is_one_line_and_the_documented_code(
    redis_url: str, url: str, code: int, says: str
) -> None:
    import http.server
    import threading

    port = redis_url.rsplit(":", 1)[1].split("/", 1)[0]
    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        target = url.format(port=port, http=server.server_address[1])
        done = ledger_cli(target, "lb", "--timeout", "1", "tail", "s")
    finally:
        server.shutdown()
        server.server_close()
    assert done.returncode == code, done.stderr
    assert says in done.stderr
    assert done.stderr.count("\n") == 1, done.stderr


def test_reconcile_check_without_a_heartbeat_exits_1(tmp_path: Path) -> None:
    done = ledger_cli(
        "memory://", "lb", "reconcile", "--check", "--heartbeat", str(tmp_path / "none")
    )
    assert done.returncode == 1
    assert "no heartbeat" in done.stderr


def test_an_integer_too_long_to_read_on_stdin_is_one_line_and_exit_2(redis_url: str) -> None:
    # Given an append whose second line holds a 5000-digit integer
    lines = json.dumps({"type": "message", "agent": "a", "body": "x"}) + "\n"
    lines += '{"type": "mutation", "agent": "a", "kind": "k", "n": ' + "9" * 5000 + "}\n"
    # When it is appended
    done = ledger_here(
        redis_url, "bigint", "append", "s1", "main", "--append-id", "a1", stdin=lines
    )
    # Then one line names the line, exit 2, and nothing is written
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1
    assert "stdin line 2" in done.stderr
    assert ledger_here(redis_url, "bigint", "tail", "s1").returncode == 6


def test_a_one_shot_command_where_nothing_listens_says_so_at_once() -> None:
    # Given a port where nothing listens, and a retry timeout of a minute
    url = f"redis://127.0.0.1:{free_port()}/0"
    # When a one-shot command is run there, then it exits 5 long before the minute is up
    done = ledger_cli(url, "p", "--timeout", "60", "tail", "s1", timeout=20)
    assert done.returncode == 5
    assert done.stderr.count("\n") == 1
    assert "connection refused" in done.stderr


def test_redis_url_at_a_postgresql_port_says_it_is_not_redis(
    postgres_server: LocalPostgres,
) -> None:
    url = f"redis://127.0.0.1:{postgres_server.port}/0"
    done = ledger_here(url, "p", "--timeout", "60", "tail", "s1")
    assert done.returncode == 5
    assert "no Redis at this address" in done.stderr


def test_a_refused_password_at_first_contact_is_the_credentials_refusal(
    redis_server: LocalServer,
) -> None:
    # Given a server that knows no such user (redis-py takes its refusal for a ConnectionError)
    url = f"redis://nobody:wrong@127.0.0.1:{redis_server.port}/0"
    # When a one-shot command makes its first contact there
    done = ledger_here(url, "p", "--timeout", "5", "tail", "s1")
    # Then it says the credentials were refused (exit 8), not that no Redis is there
    assert done.returncode == 8, done.stderr
    assert "refused the credentials" in done.stderr
    assert done.stderr.count("\n") == 1


def test_a_port_that_never_answers_is_said_at_first_contact() -> None:
    # Given a port that takes connections and never answers
    import socket
    import threading

    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    threading.Thread(target=lambda: held.append(listener.accept()[0]), daemon=True).start()
    try:
        url = f"redis://127.0.0.1:{listener.getsockname()[1]}/0"
        done = ledger_here(url, "p", "--timeout", "1", "tail", "s1")
    finally:
        for conn in held:
            conn.close()
        listener.close()
    # Then the first contact says so, once (exit 5), without the store's retries after it
    assert done.returncode == 5, done.stderr
    assert "nothing answered at 127.0.0.1:" in done.stderr
    assert done.stderr.count("\n") == 1


def test_a_database_that_is_not_a_number_is_bad_input(redis_server: LocalServer) -> None:
    done = ledger_here(f"redis://127.0.0.1:{redis_server.port}/abc", "p", "tail", "s1")
    assert done.returncode == 2
    assert "database" in done.stderr


def test_a_unix_socket_url_is_taken_whatever_its_path(tmp_path: Path) -> None:
    # A socket's path is no database (its database is ?db=): the check of a TCP URL's database
    # once refused every unix:// URL, whose path is not a number.
    socket = tmp_path / "redis.sock"
    with LocalServer(appendonly=False, extra=["--unixsocket", str(socket)]):
        url = f"unix://{socket}?db=2"
        with lb.connect(url, prefix="u") as store:
            store.append(
                lb.StreamId("s1", "main"),
                0,
                "a1",
                [{"type": "message", "agent": "a", "body": "hi"}],
            )

        async def read_async() -> list[str]:
            async with await aio.connect(url, prefix="u") as astore:
                return [e["body"] for e in await astore.read_stream(lb.StreamId("s1", "main"))]

        assert asyncio.run(read_async()) == ["hi"]
        done = ledger_cli(url, "u", "read", "s1", "main")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["body"] == "hi"


# -- a refused append writes nothing, anywhere ----------------------------------------------------


@pytest.fixture(params=["memory", "redis", "sqlite"])
def each_store(request: pytest.FixtureRequest) -> EventStore:
    return request.getfixturevalue(f"{request.param}_store")  # type: ignore[no-any-return]


CALL = {"type": "tool_call", "agent": "a", "tool": "t", "args": {}, "attempt_id": "x#1"}


def test_a_refused_append_that_opens_an_attempt_writes_nothing_anywhere_the_index_included(
    each_store: EventStore,
) -> None:
    # Given a session with one event, and a store that has listed nothing in the indexes yet
    ref = lb.StreamId("refused", "main")
    each_store.append(ref, 0, "m-1", [{"type": "message", "agent": "a", "body": "hi"}])
    before = whole_state(each_store)

    # When appends that would open an attempt are refused: a stale version, an id reused
    with pytest.raises(lb.VersionConflict):
        each_store.append(ref, 0, "c-1", [CALL])
    with pytest.raises(lb.IdempotencyConflict):
        each_store.append(ref, lb.ANY, "m-1", [CALL])
    # and an append to a session that does not exist is refused as well
    with pytest.raises(lb.VersionConflict):
        each_store.append(lb.StreamId("never", "main"), 3, "c-1", [CALL])

    # Then every key (every row) is as it was, the open-attempts index included
    assert whole_state(each_store) == before
    assert each_store.sessions_with_open_attempts() == []

    # And the same append, no longer stale, lists its session for the reconciler
    each_store.append(ref, 1, "c-1", [CALL])
    assert [s for s, _ in each_store.sessions_with_open_attempts()] == ["refused"]


def test_a_call_and_its_result_in_one_append_open_nothing_and_list_no_session(
    each_store: EventStore,
) -> None:
    """An attempt requested and ended in one append is never open (both commit together): the
    session is not listed for the reconciler (an Agents SDK turn writes a call and its output in
    one append). The result still closes the attempt an earlier append left open, and a call
    requested again after its result stays open."""
    result = {"type": "tool_result", "agent": "a", "tool": "t", "attempt_id": "x#1"}
    ended = {**result, "status": "ok", "result": 1}
    ref = lb.StreamId("whole", "main")
    each_store.append(ref, 0, "cr-1", [CALL, ended])
    assert each_store.open_attempts("whole") == []
    assert each_store.sessions_with_open_attempts() == []

    earlier = lb.StreamId("earlier", "main")
    each_store.append(earlier, 0, "c-1", [CALL])
    each_store.append(earlier, 1, "cr-1", [CALL, ended])
    assert each_store.open_attempts("earlier") == []

    each_store.append(ref, 2, "crc-1", [CALL, ended, CALL])
    assert [a.attempt_id for a in each_store.open_attempts("whole")] == ["x#1"]


def test_a_writer_that_died_between_listing_and_append_still_names_its_session(
    redis_store: EventStore,
) -> None:
    # Given a provisional entry its writer never settled (killed after the listing), and the
    # attempt that writer's append opened
    assert isinstance(redis_store, RedisStore)
    ref = lb.StreamId("orphaned", "main")
    key = redis_store.keys.open_index_of("orphaned")
    redis_store.client.zadd(key, {"orphaned\x1fdeadbeef": 1_000})
    redis_store.client.zadd(key, {"orphaned-too\x1f0000": 2_000})
    redis_store.append(ref, 0, "c-1", [CALL])
    redis_store.client.zrem(key, "orphaned")  # as if this append's own listing never settled

    # Then the reconciler's index names each session once
    listed = dict(redis_store.sessions_with_open_attempts())
    assert set(listed) >= {"orphaned", "orphaned-too"}
    assert listed["orphaned"] == 1_000

    # And forgetting a session with nothing open drops its provisional entries, and only its own
    assert not redis_store.forget_idle_session("orphaned", 10_000)  # x#1 is open
    result = {"type": "tool_result", "agent": "a", "tool": "t", "attempt_id": "x#1"}
    redis_store.append(ref, 1, "r-1", [{**result, "status": "ok", "result": 1}])
    assert redis_store.forget_idle_session("orphaned", 10_000)
    assert redis_store.client.zrange(key, 0, -1) in ([b"orphaned-too\x1f0000"], [])
    assert "orphaned" not in dict(redis_store.sessions_with_open_attempts())
