"""What an event means for the open attempts a store keeps (spec/ledger-v1.md, "Open attempts").

A tool_call opens its attempt, a tool_result closes it, a `reconcile.unresolved` mutation flags
the attempt whose tool_call it names, and a `tool.declared` mutation marks a run's tool safe to
replay. Each store keeps these in its own form; the Redis and PostgreSQL packages encode the notes
for their scripts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

from ledger_bus.model.ids import CURSOR_PATTERN

# A tool name a tool_call may carry (events.Ident; a mutation's run_id is one already): a
# declaration of any other marks nothing, as no call could match it.
_NAME: Final = re.compile(r"[^\x00-\x1f\x7f-\x9f]+")


@dataclass(slots=True)
class Opens:
    attempt_id: str
    run_id: str  # "" for a call outside any run
    tool: str


@dataclass(slots=True)
class Closes:
    attempt_id: str


@dataclass(slots=True)
class Flags:
    """Flags the open attempt of this id whose tool_call has the cursor `call` ("<ms>-<seq>",
    as stores compare them), or whatever attempt of that id is open when `call` is None."""

    attempt_id: str
    call: str | None


@dataclass(slots=True)
class DeclaresSafe:
    run_id: str
    tool: str


AttemptNote = Opens | Closes | Flags | DeclaresSafe


def settled(notes: list[AttemptNote | None]) -> list[AttemptNote | None]:
    """The notes of one append with the requests of attempts it also ends left out: such an
    attempt is never open (the call and its result commit together), and its result's note
    still closes it should an earlier append have left it open. So an append of a call and its
    result (an Agents SDK turn, an import) opens nothing and lists its session for no
    reconciler. Changes `notes` and returns it."""
    opened: dict[str, list[int]] = {}
    for n, note in enumerate(notes):
        if type(note) is Opens:
            opened.setdefault(note.attempt_id, []).append(n)
        elif type(note) is Closes:
            for at in opened.pop(note.attempt_id, ()):
                notes[at] = None
    return notes


def attempt_note(data: dict[str, Any]) -> AttemptNote | None:
    """What the event (its fields) means for open attempts; None for nothing."""
    kind = data["type"]
    if kind == "tool_call":
        return Opens(data["attempt_id"], data.get("run_id") or "", data["tool"])
    if kind == "tool_result":
        return Closes(data["attempt_id"])
    if kind != "mutation":
        return None
    if data["kind"] == "reconcile.unresolved" and isinstance(data.get("attempt_id"), str):
        named = data.get("call_cursor")
        if named is None:
            return Flags(data["attempt_id"], None)
        match = CURSOR_PATTERN.fullmatch(named) if isinstance(named, str) else None
        # A call_cursor that is no cursor names no call: the flag marks nothing.
        return Flags(data["attempt_id"], f"{int(match[1])}-{int(match[2])}") if match else None
    if (
        data["kind"] == "tool.declared"
        and data.get("safe_to_replay") is True
        and isinstance(data.get("run_id"), str)
        and isinstance(data.get("tool"), str)
        and _NAME.fullmatch(data["tool"])
    ):
        return DeclaresSafe(data["run_id"], data["tool"])
    return None
