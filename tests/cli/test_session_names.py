"""Sessions found by the names users know: an ADK session by its session id, a LangGraph thread
by its thread id, on every command that reads a session; a name that may mean several is not
found, naming them; what deletes takes a session's own name alone."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from typing import Any

import pytest

import ledger_bus as lb
from tests.support.events import call, msg
from tests.support.helpers import cli_env, ledger_here

ADK = "adk~shop~ann~t1"  # what LedgerSessionService names the ADK session t1 of ann in shop
TWINS = ("adk~desk~bob~t2", "adk~shop~ann~t2")  # the session id t2, in two apps
THREAD = "lg~" + hashlib.sha256(b"chat 1").hexdigest()[:40]  # a thread id no session id can be


@pytest.fixture
def url(redis_url: str, prefix: str) -> str:
    with lb.connect(redis_url, prefix=prefix) as store:
        store.append(lb.StreamId(ADK, "adk.events"), 0, "e1", [msg("hello from adk")])
        store.append(lb.StreamId(ADK, "run-1"), 0, "c1", [call("a1")])
        for twin in TWINS:
            store.append(lb.StreamId(twin, "adk.events"), 0, "e1", [msg(twin)])
        store.append(lb.StreamId(THREAD, "lg.tools"), 0, "e1", [msg("hello from a thread")])
    return redis_url


def run(url: str, prefix: str, *args: str) -> subprocess.CompletedProcess[str]:
    return ledger_here(url, prefix, "-o", "jsonl", *args)


def events(done: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


@pytest.mark.parametrize(
    "args",
    [
        ["tail", "t1"],
        ["scan", "t1"],
        ["read", "t1", "adk.events"],
        ["export", "t1"],
    ],
)
def test_an_adk_session_is_read_by_its_session_id(url: str, prefix: str, args: list[str]) -> None:
    # Given the ADK session t1, kept as adk~shop~ann~t1
    # When a command reads it by the id its user knows
    found = events(run(url, prefix, *args))
    # Then it reads that session, named in full on every line
    assert found[0]["body"] == "hello from adk"
    assert {e["session"] for e in found} == {ADK}


def test_every_command_about_a_session_finds_it_by_its_framework_id(url: str, prefix: str) -> None:
    (info,) = events(run(url, prefix, "inspect", "t1"))
    assert info["session"] == ADK
    (open_call,) = events(run(url, prefix, "unresolved", "t1"))
    assert open_call["attempt_id"] == "a1"
    assert events(run(url, prefix, "groups", "t1")) == []
    (resolved,) = events(run(url, prefix, "resolve", "t1", "a1", "--unknown"))
    assert (resolved["session"], resolved["outcome"]) == (ADK, "unknown")
    assert events(run(url, prefix, "unresolved", "t1")) == []
    (sized,) = events(run(url, prefix, "du", "t1"))
    assert sized["session"] == ADK


def test_a_thread_is_read_by_its_thread_id(url: str, prefix: str) -> None:
    # "chat 1" is no session id (it has a space): its thread is kept under a digest of it
    found = events(run(url, prefix, "tail", "chat 1"))
    assert [(e["session"], e["body"]) for e in found] == [(THREAD, "hello from a thread")]


def test_the_table_names_the_session_in_full(url: str, prefix: str) -> None:
    shown = ledger_here(url, prefix, "-o", "table", "tail", "t1")
    assert shown.returncode == 0, shown.stderr
    assert ADK in shown.stdout


def test_a_name_that_may_mean_several_sessions_is_not_found_naming_each(
    url: str, prefix: str
) -> None:
    done = run(url, prefix, "tail", "t2")
    assert (done.returncode, done.stdout) == (6, "")
    assert done.stderr == (
        f"ledger-bus: no such session 't2'; did you mean {TWINS[0]}, {TWINS[1]}?"
        " (what a framework knows as 't2'; name one)\n"
    )
    assert events(run(url, prefix, "tail", TWINS[1]))[0]["body"] == TWINS[1]


def test_a_session_of_that_very_name_comes_first(url: str, prefix: str) -> None:
    with lb.connect(url, prefix=prefix) as store:
        store.append(lb.StreamId("t1", "main"), 0, "m", [msg("the session named t1")])
    assert [e["body"] for e in events(run(url, prefix, "tail", "t1"))] == ["the session named t1"]


def test_names_no_session_has_are_not_found_as_before(url: str, prefix: str) -> None:
    missing = run(url, prefix, "tail", "t9")
    assert missing.returncode == 6
    assert missing.stderr.startswith("ledger-bus: no such session 't9'")
    # a name no session and no framework's session has is bad input, as it was
    assert run(url, prefix, "tail", "no such thread").returncode == 2


def test_delete_takes_the_sessions_own_name_and_says_which_that_is(url: str, prefix: str) -> None:
    # Asked what would go, by the framework's id: not found, naming the session to give
    asked = run(url, prefix, "delete", "t1")
    assert asked.returncode == 6
    assert f"did you mean {ADK}?" in asked.stderr
    assert "this command takes the session's own name" in asked.stderr
    # Deleting by it deletes nothing (a retry of a delete is safe), and names the session
    done = run(url, prefix, "delete", "t1", "--yes")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["deleted_events"] == 0
    assert "nothing to delete: 't1' holds no events" in done.stderr
    assert done.stderr.endswith(f"; did you mean {ADK}?\n")
    assert events(run(url, prefix, "tail", ADK)), "nothing deleted"


def test_tail_follow_follows_the_session_its_framework_knows_by_that_id(
    url: str, prefix: str
) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "ledger_bus", "-o", "jsonl", "tail", "t1", "--follow", "-n", "1"],
        env=cli_env(url, prefix),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert json.loads(proc.stdout.readline())["attempt_id"] == "a1"
        with lb.connect(url, prefix=prefix) as store:
            store.append(lb.StreamId(ADK, "adk.events"), lb.ANY, "e2", [msg("later")])
        later = json.loads(proc.stdout.readline())
        assert (later["session"], later["body"]) == (ADK, "later")
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
