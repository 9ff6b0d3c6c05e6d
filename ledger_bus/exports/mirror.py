"""The conversation log as a file, DIR/<session>/conversation.jsonl, kept current from the ledger.

Lines are only ever appended, as events commit, one event a line, in commit order: the same lines
`ledger-bus export` writes, so `tail -f` and `tail -n 20 | jq .` work on it. A restarted mirror
carries on after the cursor of the file's last line, so it neither skips nor repeats an event; a
line cut short by a crash mid-write is the one thing it removes. The file is derived: the ledger
wins, and nothing is ever written to the ledger from it.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Final

from ledger_bus.model.errors import LedgerError
from ledger_bus.model.ids import CURSOR_ZERO, check_name
from ledger_bus.model.jsonl import event_line
from ledger_bus.model.records import RecordedEvent
from ledger_bus.store.base import EventStore

FILE_NAME: Final = "conversation.jsonl"
_CHUNK: Final = 64 * 1024


def mirror_path(directory: str | os.PathLike[str], session_id: str) -> Path:
    return Path(directory) / check_name(session_id, "session id") / FILE_NAME


def last_cursor(path: Path) -> str | None:
    """The cursor on the file's last complete line, cutting off a partial last line first."""
    if not path.exists():
        return None
    with open(path, "rb+") as handle:
        end = handle.seek(0, os.SEEK_END)
        tail = b""
        position = end
        # Read backwards until the tail holds a whole last line (and the newline before it).
        while position > 0 and tail.count(b"\n") < 2:
            step = min(_CHUNK, position)
            position -= step
            handle.seek(position)
            tail = handle.read(step) + tail
        if tail and not tail.endswith(b"\n"):
            keep = end - len(tail) + tail.rfind(b"\n") + 1  # 0 when no line is complete
            handle.truncate(keep)
            tail = tail[: tail.rfind(b"\n") + 1]
        lines = tail.splitlines()
        if not lines:
            return None
        try:
            return str(json.loads(lines[-1])["cursor"])
        except (ValueError, KeyError, TypeError) as err:
            raise LedgerError(f"{path}: the last line is not a ledger event: {err}") from None


class Mirror:
    """Appends a session's new events to its conversation.jsonl."""

    def __init__(self, store: EventStore, session_id: str, directory: str | os.PathLike[str]):
        self.store = store
        self.session_id = session_id
        self.path = mirror_path(directory, session_id)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.cursor = last_cursor(self.path)

    def _write(self, events: list[RecordedEvent]) -> None:
        if not events:
            return
        text = "".join(event_line(event) for event in events)
        with open(self.path, "a", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())  # the cursor moves on only once the lines are on disk
        self.cursor = events[-1].cursor

    def catch_up(self) -> int:
        """Write everything committed since the file's last line; return how many lines."""
        written = 0
        while True:
            page = self.store.scan_session(self.session_id, self.cursor, limit=1000)
            self._write(page)
            written += len(page)
            if len(page) < 1000:
                return written

    def run(self, stop: threading.Event, block_ms: int = 1000) -> None:
        """Catch up, then append each event as it commits, until `stop` is set."""
        self.catch_up()
        while not stop.is_set():
            after = self.cursor or CURSOR_ZERO
            self._write(self.store.wait_session(self.session_id, after, block_ms))
