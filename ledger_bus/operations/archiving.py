"""Moving finished sessions from Redis to a SQL store, their archive (spec 3.10).

A session is archived in steps, each of which a crash may interrupt and the next run finishes:

1. check: the session exists, and (unless forced) has no open attempt;
2. mark: the session's tombstone names the archive; from then on Redis refuses appends to it
   (SessionArchived), so what is copied is the whole session;
3. copy: its events, with their streams, versions, cursors and event ids, its append_id
   records, its artifacts and its streams' bounds, into the archive (SqlStore.restore_moved skips
   what an earlier run copied);
4. verify: the archive holds the same events, in the same order, with the same content, every
   append_id record, and every artifact, whole; and (unless forced) no run of the session holds
   a live lease;
5. remove: everything of the session in Redis but the tombstone goes, in one script that checks
   nothing changed since the verification.

A check or verification that fails gives the archive up (appends are taken again) and changes
nothing in Redis. What is archived is read through the archive (ledger_bus.store.redis.tiered).
"""

from __future__ import annotations

import hashlib
import itertools
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Final

from ledger_bus.model.errors import InvalidInput, NotFound, Refused
from ledger_bus.model.ids import StreamId
from ledger_bus.model.jsontext import JSONObject
from ledger_bus.model.records import RecordedEvent
from ledger_bus.store.base import PAGE, Attempts, Bounds, EventStore, need
from ledger_bus.store.families import ArchiveSource, ArchiveTarget
from ledger_bus.store.restore import DIGEST_PAGE, PageDigests

STEPS: Final = ("check", "mark", "copy", "verify", "remove")


@dataclass(frozen=True, slots=True)
class Archived:
    """What archiving one session did."""

    session_id: str
    archive: str
    events: int
    append_ids: int
    moved_before: bool  # an earlier run had finished it; nothing was done now
    artifacts: int = 0

    def to_dict(self) -> JSONObject:
        return {
            "session": self.session_id,
            "archive": self.archive,
            "events": self.events,
            "append_ids": self.append_ids,
            "artifacts": self.artifacts,
            "archived_before": self.moved_before,
        }


class _Copied(PageDigests):
    """The page digests of the events as they are copied, with the runs they name."""

    def __init__(self) -> None:
        super().__init__()
        self.events = 0
        self.run_ids: set[str] = set()

    def copied(self, event: RecordedEvent, payload: bytes) -> None:
        """An event of the session here, with the bytes the archive keeps of it."""
        self.add(event.cursor, event.stream.name, event.version, payload)
        self.events += 1
        run_id = event.fields.get("run_id")
        if isinstance(run_id, str):
            self.run_ids.add(run_id)


def archive_sides(hot: EventStore, cold: EventStore) -> tuple[ArchiveSource, ArchiveTarget]:
    """The sides of a move from `hot` to `cold`, or InvalidInput when either cannot take part."""
    if not isinstance(hot, ArchiveSource):
        raise InvalidInput(f"sessions do not move out of a {hot.tier} store to an archive")
    if not isinstance(cold, ArchiveTarget):
        raise InvalidInput(
            f"an archive is a SQL store (sqlite:///PATH, postgresql://...), not a {cold.tier} store"
        )
    return hot, cold


def archive_session(
    hot: EventStore,
    cold: EventStore,
    session_id: str,
    *,
    force: bool = False,
    on_step: Callable[[str], None] | None = None,
) -> Archived:
    """Move one session from `hot` to `cold` (the steps above); safe to run again after a crash
    at any point, and to run on a session already moved."""
    need(hot, Attempts)  # a session with open attempts stays, unless forced
    need(hot, Bounds)  # a stream's bound moves with it
    source, target = archive_sides(hot, cold)
    where = target.location
    step = on_step or (lambda name: None)
    under_way, moved = source.archive_state(session_id)
    if moved:
        source.finish_archive(session_id, under_way or where, 0)  # unlists it, if a crash did not
        return Archived(session_id, under_way or where, 0, 0, moved_before=True)
    if under_way is None:
        step("check")
        if not hot.session_exists(session_id):
            raise NotFound(f"no such session {session_id!r}")
        open_now = hot.open_attempts(session_id)
        if open_now and not force:
            names = ", ".join(sorted(a.attempt_id for a in open_now)[:5])
            raise Refused(
                f"session {session_id!r} has {len(open_now)} open attempt(s) ({names}):"
                " resolve them, or archive with --force"
            )
        step("mark")
        under_way = source.begin_archive(session_id, where)
    if under_way != where:
        raise Refused(f"session {session_id!r} is being archived to {under_way}, not {where}")

    step("copy")
    copied = _Copied()
    # The events as they are kept, references and all: the artifacts follow on their own.
    target.restore_moved(hot.iter_session(session_id, resolve_artifacts=False), seen=copied.copied)
    records = target.restore_append_ids(session_id, hot.iter_append_ids(session_id))
    for info in hot.session_info(session_id).streams:
        ref = StreamId(session_id, info.name)
        bound = hot.stream_bound(ref)
        if bound is not None:
            cold.bound_stream(ref, bound.keep, bound.dedup_window_ms, only=bound.only)
    artifacts = hot.artifact_uses(session_id)
    for sha, uses in artifacts.items():
        target.restore_artifact(session_id, sha, hot.artifact(session_id, sha), uses)

    step("verify")
    try:
        _verify(hot, target, session_id, copied, force)
        _verify_artifacts(cold, session_id, artifacts)
    except Refused:
        source.abandon_archive(session_id, where)
        raise

    step("remove")
    source.finish_archive(session_id, where, copied.events)
    return Archived(
        session_id, where, copied.events, records, moved_before=False, artifacts=len(artifacts)
    )


def archive_idle(
    hot: EventStore,
    cold: EventStore,
    idle_s: float,
    *,
    force: bool = False,
    stop: threading.Event | None = None,
) -> Iterator[JSONObject]:
    """Archive every session with no append for `idle_s` seconds, the quietest first, and say
    what became of each: what `Archived.to_dict()` says, or `{"session", "skipped"}` for one
    that may not move yet (an open attempt, a live lease). Ends early once `stop` is set."""
    archive_sides(hot, cold)
    quiet_since = hot.now_ms() - int(idle_s * 1000)
    for session, last_ms in reversed(hot.sessions()):
        if last_ms >= quiet_since or (stop is not None and stop.is_set()):
            return
        try:
            done = archive_session(hot, cold, session, force=force)
        except (Refused, NotFound) as err:
            yield {"session": session, "skipped": str(err)}
            continue
        yield done.to_dict()


def _verify(
    hot: EventStore,
    cold: ArchiveTarget,
    session_id: str,
    copied: _Copied,
    force: bool,
) -> None:
    pages, kept = copied.finish(), cold.page_digests(session_id)
    if pages != kept:
        held = sum(count for count, _ in kept)
        pairs = zip(pages, kept, strict=False)
        first = next((n for n, (a, b) in enumerate(pairs) if a != b), min(len(pages), len(kept)))
        raise Refused(
            f"session {session_id!r}: the archive holds {held} events where {copied.events} were"
            f" copied, differing from event {first * DIGEST_PAGE + 1} on; nothing was removed"
            " here"
        )
    # Every record here must be there, the same; the archive may hold more (of generations
    # deleted before), which a retry may still meet.
    differ = 0
    records = hot.iter_append_ids(session_id)
    while batch := list(itertools.islice(records, PAGE)):
        there = cold.find_append_ids(session_id, [(r.stream, r.append_id) for r in batch])
        differ += sum(1 for r in batch if there.get((r.stream, r.append_id)) != r)
    if differ:
        raise Refused(
            f"session {session_id!r}: {differ} append_id record(s) differ in the archive;"
            " nothing was removed here"
        )
    if not force:
        live = sorted(r for r in copied.run_ids if hot.lease_alive(session_id, f"run-{r}"))
        if live:
            raise Refused(
                f"session {session_id!r} has runs with a live lease ({', '.join(live[:5])}):"
                " archive it once they end, or with --force"
            )


def _verify_artifacts(cold: EventStore, session_id: str, artifacts: dict[str, int]) -> None:
    """The archive holds each artifact whole (its bytes give its name), as often referenced."""
    kept = cold.artifact_uses(session_id)
    differ = sorted(
        sha
        for sha, uses in artifacts.items()
        if kept.get(sha) != uses
        or hashlib.sha256(cold.artifact(session_id, sha)).hexdigest() != sha
    )
    if differ:
        raise Refused(
            f"session {session_id!r}: {len(differ)} artifact(s) differ in the archive"
            f" (sha256:{differ[0]}...); nothing was removed here"
        )
