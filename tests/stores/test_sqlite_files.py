"""SQLite files as users name them: reads never create a file or a table, relative paths are the
working directory's, every error names the file, a file this user may not write is refused."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.helpers import cli_env, ledger_here

MSG = '{"type":"message","agent":"a","body":"hi"}\n'


def tables_of(path: Path) -> set[str]:
    with sqlite3.connect(path) as conn:
        return {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}


@pytest.mark.parametrize(
    ("command", "code"),
    [(["sessions"], 0), (["tail", "s1"], 6), (["inspect", "s1"], 6), (["scan", "s1"], 6)],
)
def test_a_read_of_a_file_that_does_not_exist_creates_nothing(
    tmp_path: Path, command: list[str], code: int
) -> None:
    # Given a path where no file is
    path = tmp_path / "nope.db"
    # When a read command runs on it
    done = ledger_here(f"sqlite:///{path}", "lb", *command)
    # Then it reads an empty ledger, and no file appears
    assert done.returncode == code, done.stderr
    assert done.stdout == ""
    assert not path.exists()
    assert os.listdir(tmp_path) == []


def test_a_read_command_leaves_nothing_behind_in_the_temp_folder(tmp_path: Path) -> None:
    # Given a command that reads a ledger file not there yet, in a process of its own
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**cli_env(f"sqlite:///{tmp_path / 'nope.db'}", "lb"), "TMPDIR": str(scratch)}
    done = subprocess.run(
        [sys.executable, "-m", "ledger_bus", "sessions"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=60,
    )
    # Then the empty ledger it read is gone with it
    assert done.returncode == 0, done.stderr
    assert os.listdir(scratch) == []


def test_a_read_of_someone_elses_database_adds_no_table_and_changes_no_byte(
    tmp_path: Path,
) -> None:
    # Given a database of another program's
    path = tmp_path / "theirs.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
        conn.execute("INSERT INTO invoices VALUES (1, 42.0)")
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    url = f"sqlite:///{path}"
    # When the ledger's read commands run on it
    for command in (["sessions"], ["tail", "s1"], ["inspect", "s1"], ["du"]):
        done = ledger_here(url, "lb", *command)
        assert done.returncode in (0, 2, 6), done.stderr
    # Then its tables and its bytes are as they were
    assert tables_of(path) == {"invoices"}
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
    # And the first write makes the ledger's tables beside its own
    assert (
        ledger_here(url, "lb", "append", "s1", "m", "--append-id", "1", stdin=MSG).returncode == 0
    )
    assert "invoices" in tables_of(path)
    assert "lb_events" in tables_of(path)


def test_a_reader_opened_before_the_ledger_existed_sees_what_a_writer_writes_later(
    tmp_path: Path,
) -> None:
    import ledger_bus as lb

    url = f"sqlite:///{tmp_path / 'later.db'}"
    reader = lb.connect(url)
    assert reader.sessions() == []
    writer = lb.connect(url)
    writer.append(lb.StreamId("s1", "m"), 0, "1", [json.loads(MSG)])
    assert [e.fields["body"] for e in reader.tail("s1", 5)] == ["hi"]
    assert (tmp_path / "later.db").exists()


def test_a_relative_path_is_the_working_directorys_and_errors_name_the_absolute_path(
    tmp_path: Path,
) -> None:
    # Given a working directory with a data/ folder, and none for another path
    (tmp_path / "data").mkdir()
    env = cli_env("sqlite:///data/x.db", "lb")

    def run(url: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "ledger_bus", "--url", url, *args],
            input=MSG,
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=env,
            check=False,
            timeout=60,
        )

    # When a write names data/x.db, and another a folder that is not there
    written = run("sqlite:///data/x.db", "append", "s1", "m", "--append-id", "1")
    missing = run(
        "sqlite:///nowhere/x.db", "--timeout", "1", "append", "s1", "m", "--append-id", "1"
    )
    # Then the first is in the working directory's data/, and the second names its full path
    assert written.returncode == 0, written.stderr
    assert (tmp_path / "data" / "x.db").exists()
    assert missing.returncode == 8, missing.stderr
    assert str(tmp_path / "nowhere" / "x.db") in missing.stderr
    assert missing.stderr.count("\n") == 1


def test_a_ledger_file_this_user_may_not_write_is_refused_exit_8_and_read_as_it_is(
    tmp_path: Path,
) -> None:
    # Given a ledger file with one event, made read-only
    path = tmp_path / "ro.db"
    url = f"sqlite:///{path}"
    assert (
        ledger_here(url, "lb", "append", "s1", "m", "--append-id", "1", stdin=MSG).returncode == 0
    )
    path.chmod(0o444)
    try:
        # When a process without root's override of file modes writes to it, and reads it
        def run(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [
                    "setpriv",
                    "--bounding-set=-dac_override,-dac_read_search",
                    "--",
                    sys.executable,
                    "-m",
                    "ledger_bus",
                    "--url",
                    url,
                    "--timeout",
                    "5",
                    *args,
                ],
                input=MSG,
                capture_output=True,
                text=True,
                env=cli_env(url, "lb"),
                check=False,
                timeout=60,
            )

        refused = run("append", "s1", "m", "--append-id", "2")
        read = run("tail", "s1")
    finally:
        path.chmod(0o644)
    # Then the write is refused at once (exit 8), naming the file; the read works
    assert refused.returncode == 8, refused.stderr
    assert str(path) in refused.stderr
    assert refused.stderr.count("\n") == 1
    assert read.returncode == 0, read.stderr
    assert [json.loads(line)["body"] for line in read.stdout.splitlines()] == ["hi"]
