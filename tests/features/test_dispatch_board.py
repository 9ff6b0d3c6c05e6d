"""The dispatch board (spawn-log discipline): the rule for an open dispatch, spawn-log files,
ids, and the command line's refusals."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import unicodedata
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ledger_bus as lb
from ledger_bus.board.dispatches import (
    CLOSED_WORDS,
    OPEN_WORDS,
    Board,
    is_open,
    read_spawn_log,
    unrecognised,
    window,
)
from ledger_bus.store.base import EventStore
from tests.support.helpers import ledger_cli as ledger

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


# -- an independent reference of the source's wording ------------------------------------------


def reference_is_open(record: dict[str, Any]) -> bool:
    """Written from the text alone, with regular expressions instead of the module's loops."""
    done = record.get("completedAt")
    if (isinstance(done, str) and done != "") or (
        isinstance(done, int | float) and not isinstance(done, bool)
    ):
        return False
    words = [
        record[k] for k in ("status", "outcome") if isinstance(record.get(k), str) and record[k]
    ]
    pattern = re.compile("(" + "|".join(map(re.escape, OPEN_WORDS)) + ")(.?)", re.I | re.S)

    def open_word(word: str) -> bool:
        found = pattern.match(word)
        # A letter is what Unicode files under L: "¼" is a number, not a letter.
        return found is not None and not unicodedata.category(found[2] or "0").startswith("L")

    return all(open_word(word) for word in words)


words = st.one_of(
    st.sampled_from([*OPEN_WORDS, *CLOSED_WORDS]),
    st.builds(
        lambda w, tail: w + tail, st.sampled_from([*OPEN_WORDS, *CLOSED_WORDS]), st.text(max_size=6)
    ),
    st.builds(str.upper, st.sampled_from(OPEN_WORDS)),
    st.text(max_size=12),
)
values = st.one_of(st.none(), st.just(""), words, st.integers(), st.booleans())
records = st.fixed_dictionaries(
    {},
    optional={
        "status": values,
        "outcome": values,
        "completedAt": st.one_of(
            st.none(),
            st.just(""),
            st.text(max_size=5),
            st.integers(),
            st.floats(allow_nan=False),
            st.booleans(),
        ),
    },
)


@settings(max_examples=1500, deadline=None)
@given(records)
def test_the_rule_agrees_with_a_reference_written_from_the_source(record: dict[str, Any]) -> None:
    assert is_open(record) == reference_is_open(record)


@pytest.mark.parametrize(
    ("record", "open_"),
    [
        ({"outcome": "dispatched"}, True),  # what `dispatch open` writes
        ({"outcome": None}, True),  # null also reads as open
        ({}, True),  # no word at all
        ({"outcome": "launched local Workflow"}, True),
        ({"outcome": "in-flight-at-wrap"}, True),
        ({"outcome": "done: shipped"}, False),
        ({"outcome": "gated"}, False),  # gated is not gate
        ({"outcome": "gate"}, True),
        ({"outcome": "Running"}, True),  # begins-with ignores case
        ({"outcome": "dispatched", "completedAt": "2026-11-29T10:00:00Z"}, False),
        ({"outcome": "running", "completedAt": 1795993625879}, False),  # a number closes too
        ({"outcome": "running", "completedAt": ""}, True),  # an empty string is absent
        ({"outcome": "running", "completedAt": None}, True),
        ({"status": "running", "outcome": "done"}, False),  # every word must be open
        ({"status": "paused", "outcome": "in-progress"}, True),
        ({"outcome": "wibble"}, False),  # neither set: closed, and warned about
    ],
)
def test_every_example_of_the_source(record: dict[str, Any], open_: bool) -> None:
    assert is_open(record) is open_


def test_unrecognised_words_are_those_of_neither_set() -> None:
    assert unrecognised({"outcome": "gated", "status": "done"}) == ["gated"]
    assert unrecognised({"outcome": "success: merged"}) == []
    assert unrecognised({"outcome": "dispatched"}) == []


@pytest.mark.parametrize(
    ("record", "expected"),
    [
        ({"timestamp": "2026-11-29T00:00:01Z"}, "live"),
        ({"timestamp": "2026-11-28T12:00:01Z"}, "live"),
        ({"timestamp": "2026-11-28T12:00:00Z"}, "stale"),  # exactly 24 hours
        ({"timestamp": "2026-11-27T12:00:01Z"}, "stale"),
        ({"timestamp": "2026-11-27T12:00:00Z"}, "other"),  # 48 hours: in flight nowhere
        ({}, "other"),  # untimed
        ({"ts": "2026-11-29T11:00:00Z"}, "live"),
        ({"dispatchedAt": "2026-11-28T00:00:00Z"}, "stale"),
        ({"timestamp": "2026-11-29T11:00:00Z", "ts": "2026-11-01T00:00:00Z"}, "live"),
        ({"ts": "2026-11-01T00:00:00Z", "dispatchedAt": "2026-11-29T11:00:00Z"}, "other"),
        ({"timestamp": int((NOW - timedelta(hours=30)).timestamp() * 1000)}, "stale"),
    ],
)
def test_the_window_and_the_launch_time(record: dict[str, Any], expected: str) -> None:
    assert window(record, NOW) == expected


# -- spawn-log files --------------------------------------------------------------------------


def test_the_three_shapes_and_the_merge_rules() -> None:
    a1, a2 = {"id": "a", "outcome": "dispatched"}, {"id": "a", "outcome": "done"}
    b, c = {"id": "b", "outcome": "running"}, {"id": "c"}
    anonymous = {"role": "writer"}

    assert read_spawn_log([a1, b, a2, anonymous]) == [a2, b, anonymous]
    assert read_spawn_log({"version": "1.0", "spawns": []}) == []
    assert read_spawn_log({"spawns": [a1, b]}) == [a1, b]
    assert read_spawn_log({"entries": [b, c]}) == [b, c]
    # An entries record replaces the spawns record of its id, wherever each stands.
    assert read_spawn_log({"spawns": [a1, b, anonymous], "entries": [c, a2]}) == [
        a2,
        b,
        anonymous,
        c,
    ]
    with pytest.raises(lb.InvalidInput):
        read_spawn_log({"dispatches": []})
    with pytest.raises(lb.InvalidInput):
        read_spawn_log(["not a record"])


@pytest.fixture
def board(store: EventStore) -> Board:
    return Board(store, "board")


def test_import_is_idempotent_and_export_keeps_the_readers_shape(board: Board) -> None:
    source = {
        "spawns": [
            {
                "id": "d-2026-11-28-001",
                "timestamp": "2026-11-28T09:00:00Z",
                "role": "writer",
                "objective": "x",
                "outcome": "dispatched",
            },
            {"role": "untracked"},
        ],
        "entries": [
            {
                "id": "d-2026-11-28-001",
                "timestamp": "2026-11-28T09:00:00Z",
                "role": "writer",
                "objective": "x",
                "outcome": "done",
                "completedAt": "2026-11-28T10:00:00Z",
            }
        ],
    }
    records = read_spawn_log(source)
    assert board.import_records(records) == 2
    version = board.store.stream_version(board.ref)
    assert board.import_records(records) == 0
    assert board.store.stream_version(board.ref) == version, "a second import writes nothing"
    assert board.records() == records

    opened = board.open("librarian", "index it", NOW, {})
    assert opened == "d-2026-11-29-001"
    exported = {"version": "1.0", "spawns": board.records()}
    assert read_spawn_log(exported)[-1]["id"] == opened


def test_ids_count_per_utc_day(board: Board) -> None:
    assert board.open("a", "x", NOW, {}) == "d-2026-11-29-001"
    assert board.open("a", "x", NOW, {}) == "d-2026-11-29-002"
    assert board.open("a", "x", NOW + timedelta(days=1), {}) == "d-2026-11-30-001"
    late_evening = datetime(2026, 11, 29, 23, 30, tzinfo=UTC).astimezone()
    assert board.open("a", "x", late_evening, {}) == "d-2026-11-29-003"


def test_stage_and_a_second_close_are_refused_on_a_closed_dispatch(board: Board) -> None:
    first = board.open("writer", "draft", NOW, {"tier": "web-developer"})
    board.stage(first, "outline", "1/3", NOW)
    board.close(first, "success: merged", NOW)
    version = board.store.stream_version(board.ref)

    with pytest.raises(lb.LedgerError, match="closed"):
        board.stage(first, "too late", None, NOW)
    with pytest.raises(lb.LedgerError, match="closed already"):
        board.close(first, "done", NOW)
    with pytest.raises(lb.InvalidInput):
        board.close(board.open("writer", "again", NOW, {}), "maybe", NOW)
    assert board.store.stream_version(board.ref) == version + 1  # only the second open landed

    (record,) = [r for r in board.records() if r["id"] == first]
    assert record["outcome"] == "success: merged"
    assert record["checkpoints"] == [
        {"at": "2026-11-29T12:00:00.000Z", "line": "outline", "stage": "1/3"}
    ]
    assert record["tier"] == "web-developer"


def test_list_and_check_follow_the_window(board: Board) -> None:
    live = board.open("a", "live one", NOW - timedelta(hours=2), {})
    stale = board.open("a", "stale one", NOW - timedelta(hours=30), {})
    old = board.open("a", "old one", NOW - timedelta(hours=50), {})
    closed = board.open("a", "closed one", NOW - timedelta(hours=1), {})
    board.close(closed, "done", NOW)
    board.import_records(
        [
            {"id": "x-1", "timestamp": "2026-11-29T11:00:00Z", "outcome": "wibble"},
            {"id": "x-2", "outcome": "running"},
        ]
    )

    assert [(w, r["id"]) for w, r in board.in_flight(NOW)] == [("live", live), ("stale", stale)]
    everything = [(w, r["id"]) for w, r in board.in_flight(NOW, include_other=True)]
    assert everything == [("live", live), ("stale", stale), ("other", old), ("other", "x-2")]
    assert board.warnings(NOW) == ["x-1: unrecognised status 'wibble'"]


# -- real processes -----------------------------------------------------------------------------


def opened_at_once(redis_url: str, prefix: str, processes: int, opens: str) -> list[str]:
    """What `processes` processes print, each opening on one board at the same moment: `opens`
    is the expression that opens and prints (a board, `board`, and `now` at hand)."""
    script = (
        "import sys, time, ledger_bus as lb\n"
        "from ledger_bus.board.dispatches import Board, parse_now\n"
        "store = lb.connect(sys.argv[1], prefix=sys.argv[2]); board = Board(store, 'race')\n"
        "now = parse_now('2026-11-29T12:00:00Z')\n"
        "board.state(); time.sleep(max(0, float(sys.argv[3]) - time.time()))\n"
        f"print({opens})\n"
    )
    start = str(time.time() + 2)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, redis_url, prefix, start],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(processes)
    ]
    said = [p.communicate(timeout=60)[0] for p in procs]
    assert [p.returncode for p in procs] == [0] * processes
    return [line for out in said for line in out.split()]


def test_two_processes_opening_at_the_same_moment_get_distinct_consecutive_ids(
    redis_url: str, prefix: str
) -> None:
    opens = "'\\n'.join(board.open('writer', 'x', now, {}) for _ in range(15))"
    ids = opened_at_once(redis_url, prefix, 2, opens)
    assert sorted(ids) == [f"d-2026-11-29-{n:03d}" for n in range(1, 31)]


def test_the_command_line_refuses_with_the_documented_codes(redis_url: str, prefix: str) -> None:
    opened = ledger(
        redis_url,
        prefix,
        "dispatch",
        "open",
        "cli",
        "--role",
        "writer",
        "--objective",
        "draft",
        "--now",
        "2026-11-29T10:00:00Z",
    )
    assert opened.returncode == 0
    dispatch_id = json.loads(opened.stdout)["id"]
    assert dispatch_id == "d-2026-11-29-001"
    assert (
        ledger(redis_url, prefix, "dispatch", "close", "cli", "--id", dispatch_id).returncode == 0
    )
    before = ledger(redis_url, prefix, "dispatch", "export", "cli").stdout

    again = ledger(redis_url, prefix, "dispatch", "close", "cli", "--id", dispatch_id)
    staged = ledger(
        redis_url, prefix, "dispatch", "stage", "cli", "--id", dispatch_id, "--line", "x"
    )
    unknown = ledger(redis_url, prefix, "dispatch", "stage", "cli", "--id", "d-nope", "--line", "x")
    bad_now = ledger(redis_url, prefix, "dispatch", "list", "cli", "--now", "yesterday")
    assert (again.returncode, staged.returncode, unknown.returncode, bad_now.returncode) == (
        1,
        1,
        6,
        2,
    )
    assert ledger(redis_url, prefix, "dispatch", "export", "cli").stdout == before

    listed = ledger(
        redis_url,
        prefix,
        "dispatch",
        "list",
        "cli",
        "--json",
        "--all",
        "--now",
        "2026-11-29T11:00:00Z",
    )
    assert listed.stdout == ""  # closed: not on the board
    assert json.loads(before)["spawns"][0]["outcome"] == "done"


@pytest.mark.parametrize("field", ["id", "outcome", "completedAt", "timestamp"])
def test_a_dispatchs_fields_may_not_set_what_the_board_sets(
    memory_store: EventStore, field: str
) -> None:
    board = Board(memory_store, "s")
    first = board.open("coder", "fix it", NOW, {})
    with pytest.raises(lb.InvalidInput, match=field):
        # An id given as a field would have rewritten the first dispatch; a completedAt closed
        # this one as it opened.
        board.open("coder", "again", NOW, {field: first})
    assert [r["id"] for r in board.records()] == [first]
    assert board.records()[0]["objective"] == "fix it"


def test_an_open_under_a_request_id_is_made_once_and_its_retry_given_the_same_dispatch(
    redis_store: EventStore,
) -> None:
    board = Board(redis_store, "s")
    first = board.open("coder", "fix it", NOW, {"by": "lead"}, request_id="req-1")
    # a retry (its reply was lost), from another process's board, a moment later
    again = Board(redis_store, "s").open(
        "coder", "fix it", NOW + timedelta(seconds=3), {"by": "lead"}, request_id="req-1"
    )
    assert again == first
    assert [r["id"] for r in board.records()] == [first]
    # the same request id for other work is refused, and writes nothing
    for role, objective, fields in (("coder", "other", {"by": "lead"}), ("qa", "fix it", {})):
        with pytest.raises(lb.IdempotencyConflict, match="req-1"):
            board.open(role, objective, NOW, fields, request_id="req-1")
    assert [r["id"] for r in Board(redis_store, "s").records()] == [first]
    # another request id is another dispatch; a request_id is not a field to set by hand
    second = board.open("coder", "fix it", NOW, {"by": "lead"}, request_id="req-2")
    assert second != first
    with pytest.raises(lb.InvalidInput, match="request_id"):
        board.open("coder", "x", NOW, {"request_id": "req-1"})


def test_two_processes_opening_under_one_request_id_at_once_make_one_dispatch(
    redis_url: str, prefix: str
) -> None:
    ids = opened_at_once(redis_url, prefix, 4, "board.open('writer', 'x', now, {}, 'r-1')")
    assert ids == ["d-2026-11-29-001"] * 4


def test_the_command_opens_once_under_a_request_id(redis_url: str, prefix: str) -> None:
    args = ["dispatch", "open", "s", "--role", "writer", "--objective", "x", "-o", "jsonl"]
    first = ledger(redis_url, prefix, *args, "--request-id", "r-1")
    again = ledger(redis_url, prefix, *args, "--request-id", "r-1")
    assert (first.returncode, again.returncode) == (0, 0), first.stderr + again.stderr
    assert json.loads(first.stdout)["id"] == json.loads(again.stdout)["id"]
    other = ledger(redis_url, prefix, *args[:-3], "y", "--request-id", "r-1")
    assert other.returncode == 4, other.stderr
    assert other.stderr.count("\n") == 1
