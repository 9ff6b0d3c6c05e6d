"""Attempt notes in the notation the append scripts take: store/lua/append.lua (and restore.lua)
and the append function of the SQL store's migration 0002, each note one string."""

from __future__ import annotations

from ledger_bus.model.attempts import AttemptNote, Closes, Flags, Opens


def note_text(note: AttemptNote | None) -> str:
    """ "o", "c", "f" or "s" and the note's parts, joined by U+001F, which no id or name holds
    ("" for no note): "o<attempt><run><tool>", "c<attempt>", "f<attempt><call cursor, or ''
    for any>", "s<run><tool>". isinstance, not a match on classes: an append of a hundred calls
    notes a hundred attempts, and a class pattern costs several times as much."""
    if isinstance(note, Opens):
        return f"o\x1f{note.attempt_id}\x1f{note.run_id}\x1f{note.tool}"
    if note is None:
        return ""
    if isinstance(note, Closes):
        return f"c\x1f{note.attempt_id}"
    if isinstance(note, Flags):
        return f"f\x1f{note.attempt_id}\x1f{note.call or ''}"
    return f"s\x1f{note.run_id}\x1f{note.tool}"
