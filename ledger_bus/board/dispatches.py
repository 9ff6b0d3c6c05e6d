"""The dispatch board: an orchestrator's spawn-log, kept as mutations in a session's `dispatch`
stream. The board is a projection of those events, never a second source of truth.

Writes use the stream's optimistic concurrency instead of a lock file: each command folds the
board at version v, decides, and appends with expected version v; a writer that lost the race
re-reads and decides again. Two hosts opening at once get two consecutive ids; a second close is
refused however close the two closes were.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Literal, TypeVar

from ledger_bus.model.errors import (
    IdempotencyConflict,
    InvalidInput,
    LedgerError,
    NotFound,
    Refused,
    VersionConflict,
)
from ledger_bus.model.ids import StreamId, check_name
from ledger_bus.model.jsontext import JSONObject
from ledger_bus.store.base import EventStore
from ledger_bus.store.steps import contended

STREAM: Final = "dispatch"
WRITER: Final = "dispatch-board"
# The spawn-log's `agent`: who takes the work on. None when it is dispatched, unless known then;
# filled in when the work returns. `by`: who opened it, where the opener is known (MCP).
ASSIGNEE: Final = "agent"
OPENER: Final = "by"

OPEN_WORDS: Final = (
    "dispatched",
    "launched",
    "in-flight",
    "in-progress",
    "running",
    "gate",
    "paused",
)
CLOSED_WORDS: Final = (
    "closed",
    "done",
    "returned",
    "complete",
    "completed",
    "partial",
    "success",
    "failed",
    "abandoned",
    "superseded",
    "killed",
    "aborted",
    "cancelled",
    "archived",
    "dropped",
    "unknown-outcome",
    "halted",
    "stopped",
    "interrupted",
    "escalate",
    "hard-stop",
)
# What the board sets on a record: fields given at open may not.
OWN_FIELDS: Final = frozenset(
    {
        "id",
        "timestamp",
        "role",
        "objective",
        "outcome",
        "status",
        "completedAt",
        "checkpoints",
        "request_id",
    }
)
LIVE: Final = timedelta(hours=24)
IN_FLIGHT: Final = timedelta(hours=48)

Window = Literal["live", "stale", "other"]
T = TypeVar("T")


def _opened_by(state: BoardState, request_id: str) -> JSONObject | None:
    """The record an open under `request_id` made, if one did."""
    for record in state.records.values():
        if record.get("request_id") == request_id:
            return record
    return None


# -- the rule (isOpenDispatch), word for word ---------------------------------------------------


def begins_with(text: str, word: str) -> bool:
    """Case aside, `text` is the word itself or the word followed by a non-letter."""
    text, word = text.lower(), word.lower()
    if not text.startswith(word):
        return False
    return len(text) == len(word) or not text[len(word)].isalpha()


def _present(value: object) -> bool:
    """completedAt closes a record when it is a non-empty string or a number."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int | float) or (isinstance(value, str) and value != "")


def _words(record: Mapping[str, object]) -> list[str]:
    return [v for v in (record.get("status"), record.get("outcome")) if isinstance(v, str) and v]


def is_open(record: Mapping[str, object]) -> bool:
    """The shared rule: open unless completedAt is set or a status/outcome word is not open."""
    if _present(record.get("completedAt")):
        return False
    return all(any(begins_with(w, o) for o in OPEN_WORDS) for w in _words(record))


def unrecognised(record: Mapping[str, object]) -> list[str]:
    """The status/outcome words that begin with neither an open nor a closed word."""
    return [
        w
        for w in _words(record)
        if not any(begins_with(w, word) for word in (*OPEN_WORDS, *CLOSED_WORDS))
    ]


def parse_time(value: object) -> datetime | None:
    """An ISO 8601 string or epoch number as a UTC time; None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        seconds = value / 1000 if value > 1e11 else value  # epoch milliseconds, or seconds
        try:
            return datetime.fromtimestamp(seconds, UTC)
        except (OverflowError, OSError, ValueError):
            return None
    if isinstance(value, str) and value:
        try:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    return None


def launch_field(record: Mapping[str, object]) -> object:
    """The launch time as written: `timestamp`, else `ts`, else `dispatchedAt`; None without."""
    for name in ("timestamp", "ts", "dispatchedAt"):
        value = record.get(name)
        if value is not None and value != "":
            return value
    return None


def launched_at(record: Mapping[str, object]) -> datetime | None:
    """The launch time; None when there is none, or it is not a time."""
    value = launch_field(record)
    return None if value is None else parse_time(value)


def window(record: Mapping[str, object], now: datetime) -> Window:
    """live under 24 hours, stale 24 to 48, other when older or untimed."""
    at = launched_at(record)
    if at is None:
        return "other"
    age = now - at
    if age < LIVE:
        return "live"
    return "stale" if age < IN_FLIGHT else "other"


# -- spawn-log.json files -------------------------------------------------------------------------


def read_spawn_log(data: object) -> list[JSONObject]:
    """The records of a spawn-log in any of its three shapes, merged by id as the source says.

    An `entries` record replaces a `spawns` record with the same id; within one array the last
    record of an id is its latest; a record with no id is kept as it is.
    """
    if isinstance(data, list):
        arrays = [data]
    elif isinstance(data, dict) and ("spawns" in data or "entries" in data):
        arrays = [data.get("spawns") or [], data.get("entries") or []]
    else:
        raise InvalidInput("a spawn-log is an array, or an object with `spawns` and/or `entries`")
    merged: dict[str, JSONObject] = {}
    order: list[tuple[str, Any]] = []  # ("id", id) or ("anon", record), first appearance first
    for array in arrays:
        if not isinstance(array, list):
            raise InvalidInput("`spawns` and `entries` must be arrays")
        for record in array:
            if not isinstance(record, dict):
                raise InvalidInput(f"a dispatch record must be an object, got {record!r}")
            key = record.get("id")
            if key is None:
                order.append(("anon", record))
                continue
            key = str(key)
            if key not in merged:
                order.append(("id", key))
            merged[key] = record
    return [merged[value] if kind == "id" else value for kind, value in order]


def spawn_log(records: Iterable[dict[str, Any]]) -> JSONObject:
    """The shape a new spawn-log starts with, which every existing reader takes."""
    return {"version": "1.0", "spawns": list(records)}


# -- the board ------------------------------------------------------------------------------------


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _digest(record: Mapping[str, object]) -> str:
    text = json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _key(record: JSONObject) -> str:
    """Where a record sits on the board: its id, or for a record without one, its content."""
    return str(record["id"]) if record.get("id") is not None else f"~{_digest(record)}"


@dataclass
class BoardState:
    """The board folded from the dispatch stream up to `version`."""

    version: int = 0
    records: dict[str, dict[str, Any]] = field(default_factory=dict)  # key -> record, in order

    def apply(self, event: dict[str, Any]) -> None:
        kind = event.get("kind")
        if kind in ("dispatch.open", "dispatch.import"):
            record = event["record"]
            self.records[_key(record)] = record
        elif kind == "dispatch.update":
            record = self.records.get(str(event["id"]))
            if record is not None:
                self.records[str(event["id"])] = {**record, **event["changes"]}


class Board:
    """The dispatch board of one session."""

    def __init__(self, store: EventStore, session_id: str):
        self.store = store
        self.session_id = session_id
        self.ref = StreamId(session_id, STREAM)
        self._state = BoardState()

    def state(self) -> BoardState:
        """Fold what committed since the last look (the stream is append-only)."""
        for event in self.store.read_stream(self.ref, after_version=self._state.version):
            self._state.apply(event.fields)
            self._state.version = event.version
        return self._state

    def records(self) -> list[JSONObject]:
        return list(self.state().records.values())

    def _decide(self, what: str, decide: Callable[[BoardState], T]) -> T:
        """Run `decide` on the board as it is now, again while another writer took the version
        it wrote at: it reads, decides and appends with that version."""
        for losses in range(1, 101):
            try:
                return decide(self.state())
            except VersionConflict:  # another writer was first; look again and decide again
                time.sleep(contended(losses))
        raise LedgerError(f"could not {what}: the board kept changing")

    def _write(self, version: int, append_id: str, events: list[dict[str, Any]]) -> None:
        body = [{"type": "mutation", "agent": WRITER, **event} for event in events]
        self.store.append(self.ref, version, append_id, body)

    def open(
        self,
        role: str,
        objective: str,
        now: datetime,
        fields: dict[str, Any],
        request_id: str | None = None,
    ) -> str:
        """Mint the next d-YYYY-MM-DD-NNN for `now`'s UTC date and record it as dispatched.
        `fields` add to the record; they may not name what the board sets (OWN_FIELDS).

        `request_id` makes the open idempotent, for a caller whose reply was lost: a second
        open under it gives the dispatch the first one opened, when it asked for the same
        role, objective and fields, and is refused (IdempotencyConflict) when it did not."""
        taken_over = sorted(set(fields) & OWN_FIELDS)
        if taken_over:
            # An id or a closing given as a field would rewrite another dispatch, or close
            # this one as it opens.
            raise InvalidInput(f"a dispatch's fields may not set {', '.join(taken_over)}")
        if fields.get(ASSIGNEE) is not None:
            check_name(fields[ASSIGNEE], f"a dispatch's {ASSIGNEE}")
        if request_id is not None:
            check_name(request_id, "request_id")
            fields = {**fields, "request_id": request_id}
        day = now.astimezone(UTC).strftime("%Y-%m-%d")
        prefix = f"d-{day}-"
        # The append_id names this call, not the id it mints: two writers minting the same id
        # must conflict on the version, never pass for retries of one another.
        token = uuid.uuid4().hex

        def mint(state: BoardState) -> str:
            if request_id is not None:
                opened = _opened_by(state, request_id)
                if opened is not None:
                    asked = {"role": role, "objective": objective, **fields}
                    if any(opened.get(k) != v for k, v in asked.items()):
                        raise IdempotencyConflict(self.ref.name, request_id)
                    return str(opened["id"])
            taken = [
                int(key[len(prefix) :])
                for key in state.records
                if key.startswith(prefix) and key[len(prefix) :].isdigit()
            ]
            dispatch_id = f"{prefix}{max(taken, default=0) + 1:03d}"
            record = {
                "id": dispatch_id,
                "timestamp": _iso(now),
                ASSIGNEE: None,
                "role": role,
                "objective": objective,
                **fields,
                "outcome": "dispatched",
            }
            event = {"kind": "dispatch.open", "record": record}
            self._write(state.version, f"open:{token}", [event])
            return dispatch_id

        return self._decide("open a dispatch", mint)

    def _update(self, dispatch_id: str, make: Callable[[JSONObject], JSONObject]) -> JSONObject:
        token = uuid.uuid4().hex  # one per call, as in open()

        def update(state: BoardState) -> JSONObject:
            record = state.records.get(dispatch_id)
            if record is None:
                raise NotFound(f"no dispatch {dispatch_id!r} on session {self.session_id!r}")
            changes: JSONObject = make(record)
            event = {"kind": "dispatch.update", "id": dispatch_id, "changes": changes}
            self._write(state.version, f"update:{token}", [event])
            return {**record, **changes}

        return self._decide(f"update {dispatch_id}", update)

    def stage(self, dispatch_id: str, line: str, stage: str | None, now: datetime) -> JSONObject:
        """Append a checkpoint {at, line, stage}; refused on a closed dispatch."""

        def change(record: dict[str, Any]) -> JSONObject:
            if not is_open(record):
                raise Refused(f"{dispatch_id} is closed; a checkpoint is refused")
            checkpoint = {"at": _iso(now), "line": line, "stage": stage}
            changes: dict[str, Any] = {"checkpoints": [*record.get("checkpoints", []), checkpoint]}
            if stage is not None:
                changes["stage"] = stage
            return changes

        return self._update(dispatch_id, change)

    def close(
        self, dispatch_id: str, outcome: str, now: datetime, returned_by: str | None = None
    ) -> JSONObject:
        """Set completedAt and the outcome, which must begin with a closed word. `returned_by`,
        the agent that closes it, is filled in as its agent when it has none and was opened by
        another (the spawn-log's "back-filled on return"): the one that returns the work."""
        if not any(begins_with(outcome, word) for word in CLOSED_WORDS):
            raise InvalidInput(
                f"outcome {outcome!r} does not begin with a closed word ({', '.join(CLOSED_WORDS)})"
            )
        if returned_by is not None:
            check_name(returned_by, "the agent that closes a dispatch")

        def change(record: JSONObject) -> JSONObject:
            if not is_open(record):
                raise Refused(f"{dispatch_id} is closed already")
            changes: JSONObject = {"completedAt": _iso(now), "outcome": outcome}
            if returned_by not in (None, record.get(OPENER)) and not record.get(ASSIGNEE):
                changes[ASSIGNEE] = returned_by
            return changes

        return self._update(dispatch_id, change)

    def import_records(self, records: list[dict[str, Any]]) -> int:
        """Set the board's records from a spawn-log; returns how many changed (0: nothing new)."""

        def write_changes(state: BoardState) -> int:
            changed = [
                {"kind": "dispatch.import", "record": record}
                for record in records
                if state.records.get(_key(record)) != record
            ]
            version = state.version
            # On a conflict, what landed stays: the next look writes only what still differs.
            for start in range(0, len(changed), 500):
                chunk = changed[start : start + 500]
                self._write(version, f"import:{_digest({'records': chunk})}", chunk)
                version += len(chunk)
            return len(changed)

        return self._decide("import", write_changes)

    def in_flight(
        self, now: datetime, include_other: bool = False
    ) -> list[tuple[Window, JSONObject]]:
        """Open dispatches marked live or stale; with include_other, those in flight nowhere too."""
        found = []
        for record in self.records():
            if not is_open(record):
                continue
            where = window(record, now)
            if where != "other" or include_other:
                found.append((where, record))
        return found

    def warnings(self, now: datetime) -> list[str]:
        """One line per unrecognised word on a record launched in the last 48 hours with no
        completedAt; such a record reads as closed."""
        lines = []
        for record in self.records():
            if _present(record.get("completedAt")) or window(record, now) == "other":
                continue
            for word in unrecognised(record):
                lines.append(f"{record.get('id', '(no id)')}: unrecognised status {word!r}")
        return lines


def parse_now(value: str | None) -> datetime:
    """--now as a UTC time (default: the clock)."""
    if value is None:
        return datetime.now(UTC)
    moment = parse_time(value)
    if moment is None:
        raise InvalidInput(f"--now must be an ISO 8601 time, got {value!r}")
    return moment
