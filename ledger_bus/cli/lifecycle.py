"""Commands over a session's life: delete, archive, du, artifacts, bounded streams."""

from __future__ import annotations

import os
import sys

import click

from ledger_bus.cli.app import BadInput, Settings, cli, did_you_mean, pass_settings, say
from ledger_bus.cli.output import show_record, show_rows
from ledger_bus.cli.params import Duration
from ledger_bus.model.errors import NotFound
from ledger_bus.model.files import replace_whole
from ledger_bus.model.ids import StreamId
from ledger_bus.store import ARCHIVE_ENV, connect
from ledger_bus.store.base import DEFAULT_DEDUP_WINDOW_MS, EventStore


@cli.command()
@click.argument("session")
@click.argument("stream", required=False)
@click.option("--yes", is_flag=True, help="Delete; without it, only say what would go.")
@pass_settings
def delete(settings: Settings, session: str, stream: str | None, yes: bool) -> None:
    """Delete a session's events (or one stream's) from the ledger, for good (spec 3.9).

    The append ids stay recorded, so a late retry of an old append never writes its events back;
    the session (or stream) can be written again, from version 1.
    """
    if yes:
        # Safe to retry, as the API is: a session (or stream) deleted already, or never
        # written, deletes 0 events and exits 0.
        store = settings.store()
        if not store.session_exists(session):
            settings.not_archived(session)
        done = (
            store.delete_session(session)
            if stream is None
            else store.delete_stream(StreamId(session, stream))
        )
        show_record(settings, done.to_dict())
        if not done.events:
            what = repr(session) if stream is None else f"{session!r} stream {stream!r}"
            say(f"nothing to delete: {what} holds no events (deleted already, or never written)")
        return
    store = settings.session(session)
    info = store.session_info(session)
    versions = {s.name: s.version for s in info.streams}
    if stream is not None and stream not in versions:
        hint = did_you_mean(stream, versions)
        raise NotFound(f"session {session!r} has no stream {stream!r}{hint}")
    going = versions if stream is None else {stream: versions[stream]}
    show_record(
        settings,
        {
            "session": session,
            "stream": stream,
            "would_delete_events": info.events if stream is None else versions[stream],
            "streams": ", ".join(f"{name} ({v})" for name, v in sorted(going.items())),
            "open_attempts": sum(
                1 for a in store.open_attempts(session) if stream in (None, a.stream)
            ),
        },
    )
    say("nothing deleted: run again with --yes to delete")


def open_archive(settings: Settings, to: str | None) -> EventStore:
    """The SQL store that sessions of the Redis at --url move to: `to`, else --archive or
    LEDGER_BUS_ARCHIVE; BadInput (exit 2) for anything else."""
    if settings.store().archive_source() is None:
        raise BadInput(f"archive moves sessions out of Redis; --url names {settings.url!r}")
    where = to or settings.archive or os.environ.get(ARCHIVE_ENV)
    if not where:
        raise BadInput(f"say where to archive: --to URL (or --archive, or {ARCHIVE_ENV})")
    cold = connect(where, timeout=settings.timeout, prefix=settings.prefix)
    if cold.archive_target() is None:
        cold.close()
        raise BadInput(f"an archive is a SQL store (sqlite:///PATH, postgresql://...): {where!r}")
    return cold


@cli.command()
@click.argument("sessions", nargs=-1)
@click.option(
    "--to",
    "to",
    default=None,
    help=f"The archive: sqlite:///PATH or postgresql://... (default: --archive, {ARCHIVE_ENV}).",
)
@click.option(
    "--idle-after",
    type=Duration(),
    default=None,
    help="Archive every session with no append for this long (7d, 12h, 30m), instead of naming"
    " them; those that may not move yet are skipped, and said so.",
)
@click.option("--force", is_flag=True, help="Archive despite open attempts or live leases.")
@pass_settings
def archive(
    settings: Settings,
    sessions: tuple[str, ...],
    to: str | None,
    idle_after: float | None,
    force: bool,
) -> None:
    """Move finished sessions from Redis to a SQL archive (spec 3.10).

    Each session is copied with its streams, versions, cursors, event ids and append_id records,
    verified there, then removed from Redis but for a tombstone naming the archive. A crash at
    any step loses nothing; running the command again finishes the job. Read archived sessions
    with --archive (or LEDGER_BUS_ARCHIVE) naming the same store.
    """
    from ledger_bus.operations.archiving import archive_idle, archive_session

    if bool(sessions) == (idle_after is not None):
        raise BadInput("name the sessions to archive, or give --idle-after; not both")
    cold = open_archive(settings, to)
    hot = settings.store()
    try:
        if idle_after is None:
            for session in sessions:
                show_record(settings, archive_session(hot, cold, session, force=force).to_dict())
            return
        for record in archive_idle(hot, cold, idle_after, force=force):
            show_record(settings, record)
    finally:
        cold.close()


@cli.command()
@click.argument("sessions", nargs=-1)
@click.option(
    "--top",
    type=click.IntRange(min=1),
    default=20,
    show_default=True,
    help="Without SESSION: the sessions taking the most, this many.",
)
@pass_settings
def du(settings: Settings, sessions: tuple[str, ...], top: int) -> None:
    """Memory each session takes in Redis, by kind of key (MEMORY USAGE, sampled).

    Without SESSION, every session in the index is measured and the largest are shown; the
    title says how full the server is. `log` is the events themselves; `streams` their indexes;
    `append_ids` what idempotency keeps; `attempts` open attempts and tools declared safe;
    `artifacts` the large fields kept apart (spec 3.11).
    """
    store = settings.store()
    admin = store.server_admin()
    if admin is None:
        raise BadInput(f"du measures Redis memory; --url names {settings.url!r}")
    for session in sessions:
        settings.session(session)  # exit 6 for one that does not exist
    names = list(sessions) or [s for s, _ in store.sessions()]
    sizes: dict[str, dict[str, int]] = {}
    for start in range(0, len(names), 200):  # two round trips per 200 sessions
        sizes.update(admin.memory_of(names[start : start + 200]))
    ranked = sorted(sizes.items(), key=lambda item: -sum(item[1].values()))
    if not sessions:
        ranked = ranked[:top]
    rows = [
        {"session": session, "bytes": sum(kinds.values()), **kinds} for session, kinds in ranked
    ]
    memory = admin.memory_info()
    title = f"{len(names)} sessions"
    if memory is not None:
        used, limit = memory
        title += f"; redis uses {used:,} bytes" + (f" of {limit:,}" if limit else " (no maxmemory)")
    show_rows(settings, rows, title)


@cli.command()
@click.argument("session")
@click.argument("sha256")
@click.argument("file", required=False, type=click.Path(dir_okay=False, allow_dash=True))
@pass_settings
def artifact(settings: Settings, session: str, sha256: str, file: str | None) -> None:
    """The bytes of one of a session's artifacts (spec 3.11), by its sha256, to FILE or stdout.

    `read`, `scan`, `tail` and `export` with --refs show which fields are artifacts.
    """
    data = settings.session(session).artifact(session, sha256)
    if file in (None, "-"):
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return
    assert file is not None
    with replace_whole(file, binary=True) as out:
        out.write(data)
    click.echo(f"wrote {len(data)} bytes to {file}", err=True)


@cli.command()
@click.argument("session")
@click.argument("stream")
@click.option(
    "--keep", type=click.IntRange(min=1), default=None, help="Keep at least the newest N events."
)
@click.option(
    "--dedup-window",
    type=Duration(),
    default=None,
    help="How long a trimmed append's append_id still deduplicates a retry (default 1d).",
)
@click.option("--off", is_flag=True, help="Unbounded again (what was trimmed stays trimmed).")
@pass_settings
def bound(
    settings: Settings,
    session: str,
    stream: str,
    keep: int | None,
    dedup_window: float | None,
    off: bool,
) -> None:
    """Declare a stream bounded (spec 3.12), or say what it keeps (neither --keep nor --off).

    From its next append on, a bounded stream keeps its newest N events, trimming older appends
    whole: for checkpoints, of which the newest alone matters. The stream need not exist yet.
    """
    ref = StreamId(session, stream)
    store = settings.store()
    if off and (keep is not None or dedup_window is not None):
        raise BadInput("--off lifts the bound: give it alone")
    if keep is None and dedup_window is not None:
        raise BadInput("--dedup-window goes with --keep")
    if off:
        store.bound_stream(ref, None)
    elif keep is not None:
        window = DEFAULT_DEDUP_WINDOW_MS if dedup_window is None else int(dedup_window * 1000)
        store.bound_stream(ref, keep, window)
    found = store.stream_bound(ref)
    show_record(
        settings,
        {
            "session": session,
            "stream": stream,
            "keep": None if found is None else found.keep,
            "dedup_window_ms": None if found is None else found.dedup_window_ms,
        },
    )
