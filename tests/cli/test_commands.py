"""The `ledger-bus` command as a user runs it: its entry point, a real server, exit codes; in
processes of their own where a process matters (follow, signals, an unreachable backend)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ledger_bus.demo.server import free_port
from tests.support.helpers import LEDGER_KEYS, cli_env, ledger_cli, ledger_here

run = ledger_cli


def lines(output: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in output.splitlines()]


def jsonl(*events: dict[str, Any]) -> str:
    return "".join(json.dumps(e) + "\n" for e in events)


CALL = {
    "type": "tool_call",
    "agent": "orchestrator",
    "tool": "delegate",
    "args": {"to": "lead", "note": "two\nlines"},
    "attempt_id": "t1",
}
MSG = {"type": "message", "agent": "lead", "body": "backend-dev will handle"}


@pytest.fixture
def ledger(cli_url: str, prefix: str) -> Any:
    """The command, run in this process (its output and exit code as a user's process has
    them); the tests below that need a process of its own start one with `run`."""

    def call(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        return ledger_here(cli_url, prefix, *args, stdin=stdin)

    return call


def test_append_prints_the_result_and_read_prints_jsonl_with_fields_at_top_level(
    ledger: Any,
) -> None:
    done = ledger(
        "append",
        "s1",
        "run-a",
        "--append-id",
        "a1",
        "--expected-version",
        "0",
        stdin=jsonl(CALL, MSG),
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert (result["first_version"], result["last_version"], result["deduplicated"]) == (
        1,
        2,
        False,
    )

    read = ledger("read", "s1", "run-a")
    assert read.returncode == 0
    assert len(read.stdout.splitlines()) == 2, "one event a line, line breaks escaped"
    first, second = lines(read.stdout)
    for key in LEDGER_KEYS:
        assert key in first
    assert first["tool"] == "delegate"
    assert first["args"]["note"] == "two\nlines"
    assert second["body"] == "backend-dev will handle"
    assert second["cursor"] == result["cursor"]
    assert first["cursor"] < second["cursor"]


def test_scan_and_tail_follow_commit_order(ledger: Any) -> None:
    for i in range(30):
        stream = "orchestrator" if i % 3 == 0 else "worker"
        event = {"type": "message", "agent": stream, "body": str(i)}
        assert (
            ledger("append", "s1", stream, "--append-id", f"a{i}", stdin=jsonl(event)).returncode
            == 0
        )

    scanned = lines(ledger("scan", "s1").stdout)
    assert [e["body"] for e in scanned] == [str(i) for i in range(30)]
    after = lines(ledger("scan", "s1", "--after", scanned[9]["cursor"], "--limit", "5").stdout)
    assert [e["body"] for e in after] == ["10", "11", "12", "13", "14"]
    assert [e["body"] for e in lines(ledger("tail", "s1", "-n", "3").stdout)] == ["27", "28", "29"]
    assert len(lines(ledger("tail", "s1").stdout)) == 20


@pytest.mark.parametrize(
    ("args", "stdin", "code", "says"),
    [
        (["append", "s1", "x", "--append-id", "b"], "{not json\n", 2, "stdin line 1: not JSON"),
        (
            ["append", "s1", "x", "--append-id", "b"],
            jsonl({"type": "thought", "agent": "a"}),
            2,
            "unknown event type",
        ),
        (["append", "s1", "x", "--append-id", "b"], "", 2, "at least one event"),
        (
            ["append", "s1", "x", "--append-id", "b", "--expected-version", "7"],
            jsonl(MSG),
            3,
            "expected version 7, actual 1",
        ),
        (
            ["append", "s1", "x", "--append-id", "a1"],
            jsonl({**MSG, "body": "other"}),
            4,
            "already used",
        ),
        (["append", "s{1}", "x", "--append-id", "b"], jsonl(MSG), 2, "session id"),
        (
            ["append", "s1", "x", "--append-id", "b", "--expected-version", "soon"],
            jsonl(MSG),
            2,
            "neither a version",
        ),
        (["scan", "s1", "--after", "yesterday"], "", 2, "not a cursor"),
        (["read", "s1"], "", 2, "Missing argument"),
    ],
)
def test_failures_exit_with_the_documented_code_one_line_and_write_nothing(
    ledger: Any, args: list[str], stdin: str, code: int, says: str
) -> None:
    assert ledger("append", "s1", "x", "--append-id", "a1", stdin=jsonl(MSG)).returncode == 0
    before = ledger("scan", "s1").stdout

    failed = ledger(*args, stdin=stdin)

    assert failed.returncode == code
    assert says in failed.stderr
    assert "Traceback" not in failed.stderr
    if code != 2 or "Usage" not in failed.stderr:
        assert len(failed.stderr.strip().splitlines()) == 1
    assert ledger("scan", "s1").stdout == before


def test_an_unreachable_backend_exits_5_with_one_line() -> None:
    failed = run(f"redis://127.0.0.1:{free_port()}/0", "p", "--timeout", "0.5", "tail", "s1")
    assert failed.returncode == 5
    assert failed.stderr.count("\n") == 1
    assert failed.stderr.startswith("ledger-bus: ")


def test_export_then_import_recreates_the_session_and_a_second_import_changes_nothing(
    ledger: Any, tmp_path: Path
) -> None:
    ledger("append", "src", "orchestrator", "--append-id", "o1", stdin=jsonl(CALL))
    ledger("append", "src", "lead", "--append-id", "l1", stdin=jsonl(MSG, MSG))
    ledger(
        "append",
        "src",
        "orchestrator",
        "--append-id",
        "o2",
        stdin=jsonl(
            {"type": "mutation", "agent": "backend-dev", "kind": "tilldone-done", "task_id": "jwt"}
        ),
    )
    target = tmp_path / "conversation.jsonl"

    exported = ledger("export", "src", str(target))
    assert exported.returncode == 0, exported.stderr
    assert ledger("export", "src").stdout == target.read_text()

    first = ledger("import", "dst", str(target))
    second = ledger("import", "dst", str(target))
    assert first.returncode == second.returncode == 0
    assert json.loads(first.stdout)["deduplicated"] == json.loads(first.stdout)["skipped"] == 0
    assert json.loads(second.stdout)["skipped"] == 4
    assert json.loads(second.stdout)["appends"] == 0

    def essence(output: str) -> list[tuple[Any, ...]]:
        return [
            (
                e["stream"],
                e["version"],
                e["type"],
                e["agent"],
                e["event_id"],
                e.get("body"),
                e.get("task_id"),
            )
            for e in lines(output)
        ]

    assert essence(ledger("export", "dst").stdout) == essence(target.read_text())
    assert len(lines(ledger("export", "dst").stdout)) == 4


def test_a_ledger_export_imported_into_an_empty_session_keeps_versions_cursors_and_times(
    ledger: Any, tmp_path: Path
) -> None:
    # Given a session of interleaved streams, an open call and a field kept as an artifact,
    # exported
    ledger("append", "team-1", "orchestrator", "--append-id", "o1", stdin=jsonl(CALL, MSG))
    ledger("append", "team-1", "lead", "--append-id", "l1", stdin=jsonl(MSG))
    big = {**MSG, "body": "y" * 70_000}
    ledger("append", "team-1", "orchestrator", "--append-id", "o2", stdin=jsonl(big))
    exported = tmp_path / "f.jsonl"
    assert ledger("export", "team-1", str(exported)).returncode == 0

    # When it is imported into an empty session, then again
    first = ledger("import", "team-2", str(exported))
    again = ledger("import", "team-2", str(exported))

    # Then every line is as it was but the session: versions, cursors, event ids, recorded_at
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["kept_cursors"] is True
    assert json.loads(again.stdout)["skipped"] == 4
    theirs = [{**e, "session": "team-1"} for e in lines(ledger("export", "team-2").stdout)]
    assert theirs == lines(exported.read_text())
    # and the call is open in it as in the original
    assert lines(ledger("unresolved", "team-2").stdout)[0]["attempt_id"] == "t1"
    # And the session goes on after the imported events
    done = ledger("append", "team-2", "lead", "--append-id", "l2", stdin=jsonl(MSG))
    assert json.loads(done.stdout)["first_version"] == 2
    assert json.loads(done.stdout)["cursor"] > theirs[-1]["cursor"]


def test_a_ledger_export_into_a_session_that_went_on_is_appended_with_new_cursors(
    ledger: Any, tmp_path: Path
) -> None:
    # Given an export of one session and another session with events of its own
    ledger("append", "src", "lead", "--append-id", "l1", stdin=jsonl(MSG))
    exported = tmp_path / "f.jsonl"
    ledger("export", "src", str(exported))
    ledger("append", "dst", "lead", "--append-id", "l1", stdin=jsonl(CALL))
    # When the export is imported into it
    done = ledger("import", "dst", str(exported))
    # Then its event is appended after what the session holds
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["kept_cursors"] is False
    events = lines(ledger("export", "dst").stdout)
    assert [(e["stream"], e["version"], e["type"]) for e in events] == [
        ("lead", 1, "tool_call"),
        ("lead", 2, "message"),
    ]


def test_an_export_imported_into_its_session_deleted_since_is_appended_whole(
    ledger: Any, tmp_path: Path
) -> None:
    # Given a session exported, then deleted (its log remembers the cursors it had)
    ledger("append", "gone", "lead", "--append-id", "l1", stdin=jsonl(MSG, CALL))
    exported = tmp_path / "f.jsonl"
    ledger("export", "gone", str(exported))
    assert ledger("delete", "gone", "--yes").returncode == 0
    # When the export is imported into it
    done = ledger("import", "gone", str(exported))
    # Then every event is in it again, after the cursors it had
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["kept_cursors"] is False
    before, after = lines(exported.read_text()), lines(ledger("export", "gone").stdout)
    assert [e["event_id"] for e in after] == [e["event_id"] for e in before]
    assert after[0]["cursor"] > before[-1]["cursor"]


def test_a_session_imported_into_itself_is_as_it_was(ledger: Any, tmp_path: Path) -> None:
    # Given a session, exported
    ledger("append", "team-1", "orchestrator", "--append-id", "o1", stdin=jsonl(CALL, MSG))
    ledger("append", "team-1", "lead", "--append-id", "l1", stdin=jsonl(MSG))
    target = tmp_path / "f.jsonl"
    assert ledger("export", "team-1", str(target)).returncode == 0
    # When its export is imported into it
    done = ledger("import", "team-1", str(target))
    # Then nothing is written: every event is there once
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["skipped"] == 3
    assert ledger("export", "team-1").stdout == target.read_text()


def test_an_import_whose_event_id_is_there_with_other_content_is_refused_whole(
    ledger: Any, tmp_path: Path
) -> None:
    # Given a session, and a file of a new event followed by one of its ids with another body
    ledger("append", "team-2", "lead", "--append-id", "l1", stdin=jsonl(MSG))
    (there,) = lines(ledger("export", "team-2").stdout)
    changed = {**there, "body": "not what was said"}
    source = tmp_path / "f.jsonl"
    source.write_text(jsonl({"type": "message", "agent": "x", "body": "new"}, changed))
    before = ledger("export", "team-2").stdout
    # When it is imported
    refused = ledger("import", "team-2", str(source))
    # Then it is refused, naming the line and the id, and nothing of it is written
    assert refused.returncode == 1
    assert "line 2" in refused.stderr
    assert there["event_id"] in refused.stderr
    assert refused.stderr.count("\n") == 1
    assert ledger("export", "team-2").stdout == before


def test_import_of_a_bad_file_names_the_line_and_writes_nothing(
    ledger: Any, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(jsonl(MSG, MSG) + jsonl({"type": "message", "agent": "x"}))
    failed = ledger("import", "dst", str(bad))
    assert failed.returncode == 2
    assert "line 3" in failed.stderr
    assert ledger("scan", "dst").stdout == ""


def test_import_takes_the_conversation_log_shape_without_ledger_fields(
    ledger: Any, tmp_path: Path
) -> None:
    source = tmp_path / "conversation.jsonl"
    source.write_text(
        jsonl(
            {"agent": "orchestrator", "type": "message", "body": "Classifying to engineering-lead"},
            {
                "agent": "orchestrator",
                "type": "tool_call",
                "tool": "delegate",
                "args": {"to": "lead"},
                "attempt_id": "d1",
            },
            {"agent": "backend-dev", "type": "mutation", "kind": "tilldone-done", "task_id": "jwt"},
        )
    )
    assert ledger("import", "conv", str(source)).returncode == 0
    events = lines(ledger("tail", "conv", "-n", "20").stdout)
    assert [(e["stream"], e["type"]) for e in events] == [
        ("main", "message"),
        ("main", "tool_call"),
        ("main", "mutation"),
    ]


def test_sessions_and_inspect(ledger: Any) -> None:
    ledger("append", "s1", "a", "--append-id", "1", stdin=jsonl(MSG))
    ledger("append", "s2", "b", "--append-id", "1", stdin=jsonl(MSG, MSG))
    assert {r["session"] for r in lines(ledger("sessions").stdout)} == {"s1", "s2"}
    info = json.loads(ledger("inspect", "s2").stdout)
    assert (info["events"], info["streams"]) == (2, {"b": 2})


def test_table_output_for_people(ledger: Any) -> None:
    ledger("append", "s1", "a", "--append-id", "1", stdin=jsonl(CALL, MSG))
    table = ledger("--output", "table", "tail", "s1")
    assert table.returncode == 0
    assert "delegate" in table.stdout
    assert "backend-dev will handle" in table.stdout
    assert not table.stdout.lstrip().startswith("{")


def test_tail_follow_prints_new_events_as_they_commit(redis_url: str, prefix: str) -> None:
    env = cli_env(redis_url, prefix)
    run(redis_url, prefix, "append", "live", "a", "--append-id", "1", stdin=jsonl(MSG))
    follower = subprocess.Popen(
        [sys.executable, "-m", "ledger_bus", "tail", "live", "-n", "1", "--follow"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert follower.stdout is not None
        assert json.loads(follower.stdout.readline())["version"] == 1
        time.sleep(0.3)
        run(redis_url, prefix, "append", "live", "a", "--append-id", "2", stdin=jsonl(MSG, MSG))
        assert json.loads(follower.stdout.readline())["version"] == 2
        assert json.loads(follower.stdout.readline())["version"] == 3
    finally:
        follower.terminate()
        assert follower.wait(timeout=10) == 0
        if follower.stdout:
            follower.stdout.close()
