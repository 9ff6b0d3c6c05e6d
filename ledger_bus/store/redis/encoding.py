"""What the Redis store keeps, in Redis's terms: idempotency values, entry ids as cursors, the
open-attempts index's members, artifacts' chunks."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Final

from ledger_bus.model.attempts import AttemptNote
from ledger_bus.model.ids import format_cursor, parse_cursor
from ledger_bus.model.records import AppendRecord, OpenAttempt
from ledger_bus.store.notes import note_text

HEX_DIGEST: Final = re.compile(rb"[0-9a-f]{64}")
# Between a session id and the token of an append's provisional entry in the open-attempts
# index; no session id holds a control character.
OPEN_MEMBER_SEP: Final = "\x1f"
# Artifacts are written a chunk per command and read a few chunks per round trip, so that no
# command holds the server for long.
ARTIFACT_CHUNK: Final = 1024 * 1024
ARTIFACT_READ_CHUNKS: Final = 4
# How long an artifact written for an append that never commits is kept (an append that commits
# makes it persist).
ARTIFACT_UPLOAD_TTL_MS: Final = 3_600_000


def idempotency_value(record: AppendRecord, generation: int) -> bytes:
    """What lb:{S}:idem:<stream> keeps of an append (append.lua): the digest's 32 bytes, then
    "<first version> <events> <cursor> <generation>"."""
    events = record.last_version - record.first_version + 1
    text = f"{record.first_version} {events} {redis_cursor(record.cursor)} {generation}"
    return bytes.fromhex(record.digest) + text.encode()


def append_record(stream: str, append_id: str, value: bytes) -> AppendRecord:
    """The append an idempotency value records, in either form append.lua reads."""
    if len(value) > 64 and value[64:65] == b" " and HEX_DIGEST.fullmatch(value[:64]):
        digest, first, last, cursor = value.decode().split(" ")[:4]  # the older form
    else:
        digest = value[:32].hex()
        first, events, cursor, _generation = value[32:].decode().split(" ")
        last = str(int(first) + int(events) - 1)
    return AppendRecord(stream, append_id, digest, int(first), int(last), ledger_cursor(cursor))


def glob_escape(text: str) -> str:
    """`text` matched literally in a SCAN pattern."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def text_of(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def redis_cursor(cursor: str) -> str:
    ms, seq = cursor.split("-")
    return f"{int(ms)}-{int(seq)}"


def ledger_cursor(entry_id: bytes | str) -> str:
    """format_cursor() of a Redis entry id, padding the digits without parsing them."""
    ms, _, seq = text_of(entry_id).partition("-")
    return f"{ms:0>13}-{seq:0>6}"


def fullest(memory: Iterable[dict[str, Any]]) -> tuple[int, int]:
    """(used_memory, maxmemory) of the node nearest its maxmemory among the INFO memory of
    several (a cluster's primaries), or of the one using the most where none has a maxmemory."""
    found = [(int(m.get("used_memory", 0)), int(m.get("maxmemory", 0))) for m in memory]
    return max(found, key=lambda m: (m[0] / m[1] if m[1] else 0.0, m[0]))


def lua_notes(notes: list[AttemptNote | None]) -> str:
    """The notes as append.lua and restore.lua take them, one argument: each event's note
    (store/notes.py) begun by \x1e."""
    return "\x1e" + "\x1e".join([note_text(note) for note in notes])


def open_attempt_of(session_id: str, attempt_id: str, value: str) -> OpenAttempt:
    """An open attempt from its value in lb:{S}:open (see Keys.open_attempts)."""
    run_id, tool, stream, cursor, flagged = value.split("\x1f")
    return OpenAttempt(
        session_id,
        attempt_id,
        run_id or None,
        tool,
        stream,
        format_cursor(*parse_cursor(cursor)),  # the script keeps Redis's "<ms>-<seq>"
        format_cursor(*parse_cursor(flagged)) if flagged else None,
    )
