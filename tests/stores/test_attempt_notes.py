"""What an event means for open attempts, typed in the model and encoded by the Redis and
PostgreSQL packages for their scripts alone; every store keeping attempts by the same rules."""

from __future__ import annotations

from typing import Any

import pytest

import ledger_bus as lb
from ledger_bus.model.attempts import Closes, DeclaresSafe, Flags, Opens, attempt_note
from ledger_bus.store.redis.encoding import lua_notes
from ledger_bus.store.sql.statements import function_notes
from tests.support.events import call, result

MUTATION: dict[str, Any] = {"type": "mutation", "agent": "a"}


@pytest.mark.parametrize(
    ("fields", "note", "encoded"),
    [
        (
            {"type": "tool_call", "attempt_id": "a1", "run_id": "r1", "tool": "t"},
            Opens("a1", "r1", "t"),
            "o\x1fa1\x1fr1\x1ft",
        ),
        (
            {"type": "tool_call", "attempt_id": "a1", "tool": "t"},
            Opens("a1", "", "t"),
            "o\x1fa1\x1f\x1ft",
        ),
        ({"type": "tool_result", "attempt_id": "a1"}, Closes("a1"), "c\x1fa1"),
        (
            {**MUTATION, "kind": "reconcile.unresolved", "attempt_id": "a1"},
            Flags("a1", None),
            "f\x1fa1\x1f",
        ),
        (
            {
                **MUTATION,
                "kind": "reconcile.unresolved",
                "attempt_id": "a1",
                "call_cursor": "0000000000012-000003",
            },
            Flags("a1", "12-3"),
            "f\x1fa1\x1f12-3",
        ),
        (
            {
                **MUTATION,
                "kind": "tool.declared",
                "run_id": "r1",
                "tool": "t",
                "safe_to_replay": True,
            },
            DeclaresSafe("r1", "t"),
            "s\x1fr1\x1ft",
        ),
        # Nothing: a flag naming no cursor marks nothing; a declared tool no call could carry;
        # a declaration of unsafe; a message.
        (
            {**MUTATION, "kind": "reconcile.unresolved", "attempt_id": "a1", "call_cursor": "x"},
            None,
            "",
        ),
        (
            {
                **MUTATION,
                "kind": "tool.declared",
                "run_id": "r1",
                "tool": "t\x1eo",
                "safe_to_replay": True,
            },
            None,
            "",
        ),
        (
            {
                **MUTATION,
                "kind": "tool.declared",
                "run_id": "r1",
                "tool": "t",
                "safe_to_replay": False,
            },
            None,
            "",
        ),
        ({"type": "message", "agent": "a", "body": "hi"}, None, ""),
    ],
)
def test_a_note_is_typed_in_the_model_and_encoded_by_each_script_s_package(
    fields: dict[str, Any], note: object, encoded: str
) -> None:
    assert attempt_note(fields) == note
    # append.lua takes one argument, each event's note begun by \x1e; migration 0002's
    # function an array, one note per event.
    assert lua_notes([attempt_note(fields), None]) == f"\x1e{encoded}\x1e"
    assert function_notes([attempt_note(fields)])[0] == [encoded]


def test_only_opens_is_said_of_appends_that_open_distinct_attempts_and_nothing_else() -> None:
    assert function_notes([Opens("a", "", "t"), None, Opens("b", "", "t")])[1]
    assert not function_notes([Opens("a", "", "t"), Opens("a", "", "t")])[1]
    assert not function_notes([Opens("a", "", "t"), Closes("b")])[1]
    assert not function_notes([None])[1]


def test_a_declared_tool_no_call_could_carry_marks_nothing_on_every_store(
    store: lb.EventStore,
) -> None:
    """A mutation's fields are free, so a declared tool may hold the characters the scripts
    separate notes with; it marks nothing anywhere, and the notes after it are kept."""
    stream = lb.StreamId("notes-1", "run-r1")
    hostile = "t\x1eo\x1fx\x1fr1\x1ft"
    store.append(
        stream,
        0,
        "a",
        [
            {
                **MUTATION,
                "kind": "tool.declared",
                "run_id": "r1",
                "tool": hostile,
                "safe_to_replay": True,
            },
            call("att-1", "r1"),
            call("att-2", "r1"),
            result("att-2", "r1"),
        ],
    )
    assert [a.attempt_id for a in store.open_attempts("notes-1")] == ["att-1"]
    assert not store.safe_to_replay("notes-1", "r1", hostile)
    assert not store.safe_to_replay("notes-1", "r1", "t")
