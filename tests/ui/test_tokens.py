"""The web view's door (ledger_bus/ui/gate.py): beyond loopback it serves only with a tokens file,
and then every request needs a token of it; any role's token may look, at its own sessions."""

from __future__ import annotations

import base64
import os
import time
from pathlib import Path

import httpx
import pytest

import ledger_bus as lb
from ledger_bus.access.identity import Identity
from ledger_bus.access.tokens import TokenFile, add_token
from ledger_bus.demo.server import free_port
from ledger_bus.store.base import EventStore
from tests.support.events import msg
from tests.support.helpers import ledger_cli, ledger_here, ledger_keys, ledger_serving


def basic(token: str) -> dict[str, str]:
    """The header a browser sends once its user has given the token as the password."""
    return {"Authorization": "Basic " + base64.b64encode(f"anyone:{token}".encode()).decode()}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_a_view_with_tokens_lets_in_a_reader_at_its_own_sessions_and_nobody_without_one(
    redis_url: str, prefix: str, redis_store: EventStore, tmp_path: Path
) -> None:
    # Given sessions of two teams, and a tokens file naming a reader of team a's
    for session in ("team-a-1", "team-a-2", "team-b-1"):
        redis_store.append(lb.StreamId(session, "main"), 0, "a1", [msg(f"hello {session}")])
    file = str(tmp_path / "tokens.json")
    reader = add_token(file, Identity("viewer", "reader", "team-a-*"))
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    before = ledger_keys(redis_url, prefix)
    # When the view is served with it
    with ledger_serving(
        redis_url, prefix, port, tmp_path / "ui.log", "ui", "--port", str(port), "--tokens", file
    ):
        # Then a request without a token, or with one the file does not hold, sees nothing: a
        # 401 whose challenge makes a browser ask for the token
        for headers in ({}, bearer(reader + "x"), basic("lbt_nothing"), {"Authorization": "x"}):
            for path in ("/", "/s/team-a-1", "/s/team-a-1/live", "/static/ledger.css"):
                refused = httpx.get(base + path, headers=headers, timeout=5)
                assert refused.status_code == 401, (path, headers)
                assert refused.headers["www-authenticate"].startswith("Basic ")
                assert "hello" not in refused.text
                assert refused.text.count("\n") == 1
        # A reader's token, as a bearer or as a browser's Basic password, sees its sessions
        for headers in (bearer(reader), basic(reader)):
            listed = httpx.get(base + "/?format=json", headers=headers, timeout=5).json()
            names = sorted(row["session_id"] for row in listed["sessions"])
            assert names == ["team-a-1", "team-a-2"]
            assert listed["total"] == 2
            page = httpx.get(base + "/s/team-a-1", headers=headers, timeout=5)
            assert page.status_code == 200
            assert "hello team-a-1" in page.text
        # and another team's session is refused, by name, whether it exists or not
        for other in ("team-b-1", "team-b-none"):
            for path in ("", "/panels", "/trajectory", "/runs"):
                refused = httpx.get(f"{base}/s/{other}{path}", headers=bearer(reader), timeout=5)
                assert refused.status_code == 403, (other, path)
                assert "hello" not in refused.text
        # A token made while the view runs counts from its next request
        other_team = add_token(file, Identity("bob", "writer", "team-b-*"))
        page = httpx.get(base + "/s/team-b-1", headers=basic(other_team), timeout=5)
        assert page.status_code == 200
        assert "hello team-b-1" in page.text
    # Nothing a refused or an allowed request did wrote anything
    assert ledger_keys(redis_url, prefix) == before


def test_beyond_loopback_the_view_needs_a_tokens_file(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    # Without one it does not start: one line, exit 2, before it listens anywhere
    done = ledger_here(redis_url, prefix, "ui", "--host", "0.0.0.0", "--port", "0")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert "0.0.0.0 is beyond this machine: give --tokens FILE" in done.stderr
    # A file that is no tokens file is said so, in one line, exit 2
    broken = tmp_path / "tokens.json"
    broken.write_text("[]")
    done = ledger_cli(redis_url, prefix, "ui", "--port", "0", "--tokens", str(broken))
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1
    assert "is not a tokens file" in done.stderr


@pytest.mark.parametrize("broken", ["{", '{"tokens": 3}', None])
def test_a_tokens_file_broken_or_gone_while_served_lets_nobody_in(
    tmp_path: Path, broken: str | None
) -> None:
    path = tmp_path / "tokens.json"
    token = add_token(str(path), Identity("viewer", "reader", "*"))
    tokens = TokenFile(str(path))
    assert tokens.identify(token) == Identity("viewer", "reader", "*")
    if broken is None:
        path.unlink()
    else:
        path.write_text(broken)
    assert tokens.identify(token) is None  # fails closed
    # and once the file is whole again, its tokens count again (ledger-bus token writes over no
    # broken file: it is put aside by hand)
    path.unlink(missing_ok=True)
    again = add_token(str(path), Identity("viewer", "reader", "*"))
    assert tokens.identify(again) == Identity("viewer", "reader", "*")
    assert tokens.identify(token) is None


@pytest.mark.parametrize(
    ("old", "new", "then"),
    [
        ('"role": "writer"', '"role": "reader"', Identity("alice", "reader", "team-a-*")),
        ('"sha256": "', '"sha256": "0', None),  # the digest changed: the token is out
    ],
)
def test_an_edit_of_the_same_size_with_its_mtime_put_back_is_noticed(
    tmp_path: Path, old: str, new: str, then: Identity | None
) -> None:
    # Given a server's view of a tokens file
    path = tmp_path / "tokens.json"
    token = add_token(str(path), Identity("alice", "writer", "team-a-*"))
    tokens = TokenFile(str(path))
    assert tokens.identify(token) == Identity("alice", "writer", "team-a-*")
    # When the file is edited in place to the same size, and its times are put back
    stat = path.stat()
    text = path.read_text()
    edited = text.replace(old, new, 1)
    if len(edited) != len(text):  # the digest's edit: a character in, its last one out
        at = edited.index('"', edited.index(new) + len(new))
        edited = edited[: at - 1] + edited[at:]
    assert len(edited.encode()) == len(text.encode())
    with open(path, "r+", encoding="utf-8") as f:  # the same file: same inode
        f.write(edited)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert (path.stat().st_ino, path.stat().st_size) == (stat.st_ino, stat.st_size)
    # Then the server sees the change within its bounded re-read (a second)
    deadline = time.monotonic() + 5
    while tokens.identify(token) != then and time.monotonic() < deadline:
        time.sleep(0.1)
    assert tokens.identify(token) == then


def test_a_star_in_a_sessions_pattern_stays_within_one_segment_of_a_session_id() -> None:
    one = Identity("a", "reader", "team-a/*")
    assert one.reads("team-a/x")
    assert not one.reads("team-a/x/y"), "* does not cross a /"
    assert not one.reads("team-b/x")
    assert not Identity("a", "reader", "team-a-*").reads("team-a-1/their-sub")
    assert Identity("a", "reader", "team-a-*").reads("team-a-1")
    # ** crosses segments, and * alone is every session, as it always was
    assert Identity("a", "reader", "team-a/**").reads("team-a/x/y")
    assert Identity("a", "reader", "team-a/**").reads("team-a/x")
    assert not Identity("a", "reader", "team-a/**").reads("team-a")
    assert Identity("a", "reader", "*").reads("org/user/thread")
    assert Identity("a", "reader", "*/inbox").reads("bob/inbox")
    assert not Identity("a", "reader", "*/inbox").reads("bob/x/inbox")
    assert not Identity("a", "reader", "t?am/x").reads("t/am/x")
