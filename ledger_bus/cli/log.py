"""What an agent calls, from the command line: append, read, scan, tail, sessions, inspect,
artifact."""

from __future__ import annotations

import dataclasses
import itertools
import sys
from collections.abc import Iterable
from typing import Any

import click

from ledger_bus.agent.filters import select, select_tail
from ledger_bus.agent.tailer import watch
from ledger_bus.cli.app import (
    BadInput,
    Settings,
    cli,
    did_you_mean,
    pass_settings,
    refs_option,
    stop_on_sigterm,
)
from ledger_bus.cli.output import EventLines, emit, show_events, show_record, show_rows
from ledger_bus.cli.params import Duration, event_filter, filter_options, native_option
from ledger_bus.model.errors import DurabilityNotConfirmed, NotFound
from ledger_bus.model.files import replace_whole
from ledger_bus.model.ids import (
    ANY,
    CURSOR_ZERO,
    ExpectedVersion,
    StreamId,
    check_expected_version,
    parse_cursor,
)
from ledger_bus.model.jsontext import format_time, parse_json_values
from ledger_bus.model.records import AppendResult
from ledger_bus.operations.resolve import open_for, probes_op
from ledger_bus.store import ARCHIVE_ENV
from ledger_bus.store.base import Attempts, EventStore, ServerAdmin, Tiered


class ExpectedVersionType(click.ParamType):  # type: ignore[type-arg]
    name = "N|any"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> object:
        try:
            wildcard = value is ANY or (isinstance(value, str) and value.lower() == "any")
            version = check_expected_version("any" if wildcard else int(value))
        except ValueError:  # InvalidInput is one too
            self.fail(f"{value!r} is neither a version (an int >= 0) nor 'any'", param, ctx)
        return ANY if version is None else version


@cli.command()
@click.argument("session")
@click.argument("stream")
@click.option("--append-id", required=True, help="Unique within the stream; a retry reuses it.")
@click.option(
    "--expected-version",
    type=ExpectedVersionType(),
    default="any",
    show_default=True,
    help="The stream's version as last seen, or 'any'.",
)
@pass_settings
def append(
    settings: Settings, session: str, stream: str, append_id: str, expected_version: ExpectedVersion
) -> None:
    """Append events (JSONL on stdin) to a stream, atomically; print the result."""
    ref = StreamId(session, stream)
    events = parse_json_values(sys.stdin.buffer.read(), "stdin")
    try:
        result = settings.store().append(ref, expected_version, append_id, events)
    except DurabilityNotConfirmed as err:
        if isinstance(err.result, AppendResult):
            show_record(settings, err.result.to_dict())  # what the primary committed; exit 7
        raise
    show_record(settings, result.to_dict())


@cli.command()
@click.argument("session")
@click.argument("stream")
@click.option("--after", type=click.IntRange(min=0), default=0, help="Versions above this one.")
@click.option("--limit", type=click.IntRange(min=0), default=None, help="At most this many.")
@refs_option
@pass_settings
def read(settings: Settings, session: str, stream: str, after: int, limit: int | None) -> None:
    """A stream's events, ascending by version."""
    StreamId(session, stream)  # both names checked (bad input, exit 2) before any look-up
    store, session = settings.named(session)
    store = streams_of(store, session, (stream,))
    events = store.read_stream(StreamId(session, stream), after, limit)
    show_events(settings, events, f"{session}/{stream}")


def streams_of(store: EventStore, session: str, streams: Iterable[str]) -> EventStore:
    """`store`, once each of `streams` is a stream of the session: else NotFound (exit 6)
    naming the closest (or the streams it has), instead of printing nothing."""
    for stream in streams:
        if not store.stream_version(StreamId(session, stream)):
            names = [info.name for info in store.session_info(session).streams]
            hint = did_you_mean(stream, names, f"; it has {', '.join(names)}")
            raise NotFound(f"no stream {stream!r} in session {session!r}{hint}")
    return store


@cli.command()
@click.argument("session")
@click.option("--after", "after", default=None, help="Events after this cursor (0: the start).")
@click.option("--limit", type=click.IntRange(min=0), default=None, help="At most this many.")
@filter_options
@native_option
@pass_settings
def scan(
    settings: Settings, /, session: str, after: str | None, limit: int | None, **filters: Any
) -> None:
    """A session's events in commit order."""
    keep = event_filter(filters)
    if after == "0":
        after = None  # the start, as `--after 0` is for read
    elif after is not None:
        parse_cursor(after)
    store, session = settings.named(session)
    store = streams_of(store, session, keep.streams)
    show_events(settings, itertools.islice(select(store, session, keep, after), limit), session)


@cli.command()
@click.argument("session")
@click.option("-n", "count", type=click.IntRange(min=0), default=20, show_default=True)
@click.option("--follow", "-f", is_flag=True, help="Keep printing new events as they commit.")
@filter_options
@native_option
@pass_settings
def tail(settings: Settings, /, session: str, count: int, follow: bool, **filters: Any) -> None:
    """The session's last N events, oldest first; with --follow, then every new one."""
    keep = event_filter(filters)
    if not follow:
        store, session = settings.named(session)
        store = streams_of(store, session, keep.streams)
        events = select_tail(store, session, count, keep)
        show_events(settings, events, session)
        return
    store, session = settings.awaited(session)
    stop_on_sigterm()
    show = EventLines(settings)
    # One cursor splits what was there from what is new: the tail is read up to the session's
    # newest event, and the follow starts right after it, so an event committed in between is
    # printed once, by the follow.
    newest = store.tail(session, 1)
    start = newest[-1].cursor if newest else CURSOR_ZERO
    if newest:
        until = start if keep.until is None else min(start, keep.until)
        for event in select_tail(store, session, count, dataclasses.replace(keep, until=until)):
            show(event)
    try:
        for event in watch(store, session, start):
            if keep.matches(event):
                show(event)
    except KeyboardInterrupt:
        return


@cli.command()
@click.option(
    "--limit",
    type=click.IntRange(min=0),
    default=50,
    show_default=True,
    help="At most this many (0: all).",
)
@click.option("--offset", type=click.IntRange(min=0), default=0, help="Skip this many first.")
@click.option(
    "--active",
    type=Duration(),
    default=None,
    help="Only sessions active within this long (90s, 30m, 12h, 7d, or seconds).",
)
@click.option("--open", "open_only", is_flag=True, help="Only sessions with open attempts.")
@click.option("--rebuild", is_flag=True, help="Rebuild the index from the sessions first.")
@click.option(
    "--archived", is_flag=True, help="The sessions moved to the archive (with --archive)."
)
@pass_settings
def sessions(
    settings: Settings,
    limit: int,
    offset: int,
    active: float | None,
    open_only: bool,
    rebuild: bool,
    archived: bool,
) -> None:
    """Sessions by last activity, most recent first: events, streams, open attempts.

    Those on Redis; with --archived, those moved to the archive (spec 3.10).
    """
    store = settings.store()
    if rebuild and isinstance(store, ServerAdmin):
        store.rebuild_index()
    if not archived:
        found = store.sessions()
    elif isinstance(store, Tiered):
        found = store.archive.sessions()
    else:
        raise BadInput(f"--archived lists an archive: name it with --archive (or {ARCHIVE_ENV})")
    if active is not None:
        since = store.now_ms() - int(active * 1000)
        found = [(s, ms) for s, ms in found if ms >= since]
    if open_only:
        opened = {s for s, _ in store.sessions_with_open_attempts()}
        found = [(s, ms) for s, ms in found if s in opened]
    page = found[offset : offset + limit if limit else None]
    open_now = store.open_attempts_of([s for s, _ in page])  # one round trip for the page
    if open_only:  # the index lists sessions that may have some; keep those that do
        page = [(s, ms) for s, ms in page if open_now[s]]
    rows = []
    for session_id, ms in page:
        info = store.session_info(session_id)
        rows.append(
            {
                "session": session_id,
                "last_at": format_time(ms),
                "events": info.events,
                "streams": len(info.streams),
                "open_attempts": len(open_now[session_id]),
            }
        )
    show_rows(settings, rows, "sessions")


@cli.command()
@click.argument("session")
@pass_settings
def inspect(settings: Settings, session: str) -> None:
    """What a session holds: streams and versions, event count, first and last commit, and its
    open calls (each with what a probe said of it)."""
    store, session = settings.named(session)
    info = store.session_info(session).to_dict()
    opened = None
    if isinstance(store, Attempts):
        attempts = store.open_attempts(session)
        opened = open_for(attempts, store.now_ms(), store.run_op(probes_op(store, attempts)))
        info["open_calls"] = opened
    if not settings.as_table:
        emit(info)
        return
    rows = [{"stream": name, "version": str(v)} for name, v in info["streams"].items()]
    show_rows(
        settings,
        rows,
        f"{session}: {info['events']} events, {info['first_at']} .. {info['last_at']}",
    )
    if opened:
        show_rows(settings, opened, f"{session}: open calls")


@cli.command()
@click.argument("session")
@click.argument("sha256")
@click.argument("file", required=False, type=click.Path(dir_okay=False, allow_dash=True))
@pass_settings
def artifact(settings: Settings, session: str, sha256: str, file: str | None) -> None:
    """The bytes of one of a session's artifacts (spec 3.11), by its sha256, to FILE or stdout.

    `read`, `scan`, `tail` and `export` with --refs show which fields are artifacts.
    """
    store, session = settings.named(session)
    data = store.artifact(session, sha256)
    if file in (None, "-"):
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return
    assert file is not None
    with replace_whole(file, binary=True) as out:
        out.write(data)
    click.echo(f"wrote {len(data)} bytes to {file}", err=True)
