"""A SQLite ledger that is not where the URL says: a read creates nothing (as ever) and says so,
naming the file by its absolute path; a write still makes the file, where its directory is."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import ledger_bus as lb
from ledger_bus import aio
from ledger_bus.store.sql import SqlStore
from tests.support.events import msg
from tests.support.helpers import cli_env, ledger_here

LINE = '{"type":"message","agent":"a","body":"hi"}\n'


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The working directory, where relative `sqlite:///` paths are taken from."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize(
    "command",
    [
        ["tail", "s1"],
        ["read", "s1", "main"],
        ["scan", "s1"],
        ["export", "s1"],
        ["inspect", "s1"],
        ["unresolved", "s1"],
        ["groups", "s1"],
        ["delete", "s1"],
        ["artifact", "s1", "sha256:" + "0" * 64],
        ["dispatch", "close", "s1", "--id", "d-2026-01-01-001"],
    ],
)
def test_a_command_about_a_session_in_a_file_not_there_is_exit_6_naming_its_path(
    here: Path, command: list[str]
) -> None:
    # Given a relative path where no file is (a typo: the ledger is elsewhere)
    url = "sqlite:///data/ledger.db"
    (here / "data").mkdir()
    # When a command about a session reads it
    done = ledger_here(url, "lb", *command)
    # Then it is not found (exit 6), in one line naming the file by its absolute path and saying
    # that no file is there; it prints nothing and creates nothing
    assert done.returncode == 6, done.stderr
    assert done.stderr.startswith(f"ledger-bus: no ledger at {here / 'data' / 'ledger.db'} (no")
    assert "(no such file)" in done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stdout == ""
    assert os.listdir(here / "data") == []


def test_the_line_says_when_the_directory_is_not_there_either(tmp_path: Path) -> None:
    # Given a path in a directory that does not exist
    path = tmp_path / "no" / "such" / "dir" / "ledger.db"
    # When a session is tailed from it
    done = ledger_here(f"sqlite:///{path}", "lb", "tail", "s1")
    # Then the line names the file and the directory that is missing
    assert done.returncode == 6, done.stderr
    assert f"no ledger at {path} (no such file, nor directory {path.parent})" in done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize(
    "command", [["sessions"], ["dispatch", "list", "s1"], ["delete", "s1", "--yes"]]
)
def test_a_listing_of_a_file_not_there_is_empty_with_a_note_naming_its_path(
    tmp_path: Path, command: list[str]
) -> None:
    # Given a path where no file is
    path = tmp_path / "ledger.db"
    # When a command that lists (or deletes what there is) runs on it
    done = ledger_here(f"sqlite:///{path}", "lb", *command)
    # Then it does its work on an empty ledger (exit 0), with one line on stderr naming the
    # file, and creates nothing
    assert done.returncode == 0, done.stderr
    notes = [line for line in done.stderr.splitlines() if "no ledger at" in line]
    assert notes == [
        f"ledger-bus: no ledger at {path} (no such file): taken for an empty ledger"
        " (a write creates the file, a read never does)"
    ]
    assert not path.exists()
    assert os.listdir(tmp_path) == []


def test_a_listing_of_a_ledger_that_is_there_says_nothing_more(tmp_path: Path) -> None:
    # Given a ledger file with nothing in it but what one append and one delete left
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    assert (
        ledger_here(url, "lb", "append", "s1", "m", "--append-id", "1", stdin=LINE).returncode == 0
    )
    assert ledger_here(url, "lb", "delete", "s1", "--yes").returncode == 0
    # When the sessions are listed
    done = ledger_here(url, "lb", "sessions")
    # Then the empty listing is all: the file is there
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


@pytest.mark.parametrize(
    ("command", "stdin"),
    [
        (["append", "s1", "m", "--append-id", "1"], LINE),
        (["import", "s1", "-"], LINE),
        (["dispatch", "open", "s1", "--role", "writer", "--objective", "Draft"], ""),
    ],
)
def test_a_write_still_makes_the_file_where_its_directory_is(
    here: Path, command: list[str], stdin: str
) -> None:
    # Given a path where no file is yet, in a directory that is there
    url = "sqlite:///ledger.db"
    # When a command writes to it
    done = ledger_here(url, "lb", *command, stdin=stdin)
    # Then the file is made, the write is in it, and there is nothing to note
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert (here / "ledger.db").exists()
    assert ledger_here(url, "lb", "inspect", "s1").returncode == 0


@pytest.mark.parametrize(
    ("command", "stdin"),
    [
        (["append", "s1", "m", "--append-id", "1"], LINE),
        (["import", "s1", "-"], LINE),
        (["dispatch", "open", "s1", "--role", "writer", "--objective", "Draft"], ""),
    ],
)
def test_a_write_where_the_directory_is_not_there_is_exit_8_naming_it(
    here: Path, command: list[str], stdin: str
) -> None:
    # Given a relative path in a directory that does not exist
    url = "sqlite:///nowhere/ledger.db"
    # When a command writes to it
    done = ledger_here(url, "lb", "--timeout", "5", *command, stdin=stdin)
    # Then the database refused it (exit 8), in one line naming the file and the directory that
    # is not there, and nothing was made
    assert done.returncode == 8, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert f"the SQLite database {here / 'nowhere' / 'ledger.db'} refused" in done.stderr
    assert f"(no directory {here / 'nowhere'})" in done.stderr
    assert os.listdir(here) == []


def test_db_current_of_a_file_not_there_creates_nothing(tmp_path: Path) -> None:
    # Given a path where no file is
    path = tmp_path / "ledger.db"
    # When the schema revision is asked for
    done = ledger_here(f"sqlite:///{path}", "lb", "db", "current")
    # Then there is none, and no file appears
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["revision"] is None
    assert not path.exists()


def test_the_store_names_a_file_not_there_and_reads_it_as_an_empty_ledger(
    tmp_path: Path,
) -> None:
    # Given stores on a path where no file is yet, blocking and asyncio
    path = tmp_path / "ledger.db"
    url = f"sqlite:///{path}"
    reader = lb.connect(url)
    assert isinstance(reader, SqlStore)

    async def missing_async() -> lb.NotFound | None:
        async with await aio.connect(url) as store:
            assert isinstance(store.core, SqlStore)
            found = store.core.missing_ledger()
            assert await store.tail("s1") == []
            return found

    # When they are asked, and read
    missing = reader.missing_ledger()
    assert reader.tail("s1") == []  # documented: a reader may start before the writer
    assert reader.delete_session("s1").events == 0
    # Then they say which file is not there, and created none
    assert isinstance(missing, lb.NotFound)
    assert str(missing) == f"no ledger at {path} (no such file)"
    assert str(asyncio.run(missing_async())) == str(missing)
    assert not path.exists()
    # And once a writer has made it, there is nothing to say, and the reader reads it
    with lb.connect(url) as writer:
        writer.append(lb.StreamId("s1", "m"), 0, "1", [msg("hi")])
    assert reader.missing_ledger() is None
    assert [e.fields["body"] for e in reader.tail("s1")] == ["hi"]
    reader.close()


def test_tail_follow_on_a_file_not_there_says_so_and_prints_what_a_writer_adds(
    tmp_path: Path,
) -> None:
    # Given a path where no file is yet, and a follower started on it before any writer
    path = tmp_path / "ledger.db"
    url = f"sqlite:///{path}"
    follower = subprocess.Popen(
        [sys.executable, "-m", "ledger_bus", "tail", "s1", "--follow", "-o", "jsonl"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(url, "lb"),
    )
    try:
        assert follower.stdout is not None
        assert follower.stderr is not None
        # When it has started, and a writer appends
        said = follower.stderr.readline()
        written = ledger_here(url, "lb", "append", "s1", "m", "--append-id", "1", stdin=LINE)
        assert written.returncode == 0, written.stderr
        # Then it named the file it waits for, and prints the event once it is written
        assert (
            said
            == f"ledger-bus: no ledger at {path} (no such file): waiting for a write to make it\n"
        )
        assert json.loads(follower.stdout.readline())["body"] == "hi"
    finally:
        follower.terminate()
        follower.wait(timeout=10)
        for stream in (follower.stdout, follower.stderr):
            if stream:
                stream.close()
