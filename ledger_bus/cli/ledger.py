"""Commands over the ledger itself: append, read, scan, tail, sessions, inspect, export, import,
and mirror (the conversation log as a file, kept current)."""

from __future__ import annotations

import dataclasses
import itertools
import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any, Final

import click

from ledger_bus.agent.filters import EventFilter, parse_bound, select, select_tail
from ledger_bus.agent.tailer import watch
from ledger_bus.cli.app import (
    BadInput,
    Settings,
    cli,
    did_you_mean,
    pass_settings,
    refs_option,
    say,
    stop_on_sigterm,
)
from ledger_bus.cli.output import EventLines, emit, show_events, show_record, show_rows
from ledger_bus.cli.params import Duration
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
from ledger_bus.model.vocabulary import EVENT_TYPES
from ledger_bus.store import ARCHIVE_ENV
from ledger_bus.store.base import EventStore


class ExpectedVersionType(click.ParamType):  # type: ignore[type-arg]
    name = "N|any"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
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
    ref = StreamId(session, stream)
    store = streams_of(settings.session(session), session, (stream,))
    events = store.read_stream(ref, after, limit)
    show_events(settings, events, f"{session}/{stream}")


def native_option(command: Callable[..., None]) -> Callable[..., None]:
    """--native, for the commands that show events to a reader."""
    return click.option(
        "--native",
        is_flag=True,
        help="Show the frameworks' native records too (LangGraph checkpoints, Agents SDK"
        " items, snapshots); hidden otherwise: the other events say what they hold.",
    )(command)


def filter_options(command: Callable[..., None]) -> Callable[..., None]:
    """--type, --agent, --stream, --run (each repeatable) and --since / --until."""
    for name, what in reversed(FILTERS):
        command = click.option(
            f"--{name}", f"{name}s", multiple=True, metavar=name.upper(), help=what
        )(command)
    command = click.option(
        "--until",
        default=None,
        help="Up to this time: ISO 8601, a date, a cursor, or a duration ago (1h, 30m).",
    )(refs_option(command))
    return click.option(
        "--since",
        default=None,
        help="From this time: ISO 8601, a date, a cursor, or a duration ago (1h, 30m, 7d).",
    )(command)


FILTERS: Final = (
    ("type", "Only events of this type (repeatable)."),
    ("agent", "Only events of this agent (repeatable)."),
    ("stream", "Only events of this stream (repeatable)."),
    ("run", "Only events of this run (repeatable)."),
)


def event_filter(options: dict[str, Any]) -> EventFilter:
    """The filter the options name; bad input is said before the session is looked at: an
    event type the vocabulary has not (exit 2, naming the closest)."""
    since, until = options.pop("since"), options.pop("until")
    for kind in options["types"]:
        if kind not in EVENT_TYPES:
            hint = did_you_mean(kind, EVENT_TYPES, f"; the types are {', '.join(EVENT_TYPES)}")
            raise BadInput(f"--type {kind!r} is no event type{hint}")
    return EventFilter(
        types=options.pop("types"),
        agents=options.pop("agents"),
        streams=options.pop("streams"),
        runs=options.pop("runs"),
        since=None if since is None else parse_bound(since),
        until=None if until is None else parse_bound(until, end=True),
        native=options.pop("native", True),  # an export keeps everything
    )


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
    store = streams_of(settings.session(session), session, keep.streams)
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
        store = streams_of(settings.session(session), session, keep.streams)
        events = select_tail(store, session, count, keep)
        show_events(settings, events, session)
        return
    store = settings.store(patient=True)
    if not store.session_exists(session):
        say(f"no session {session!r} yet: waiting for its first event")
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
    admin = store.server_admin()
    if rebuild and admin is not None:
        admin.rebuild_index()
    if archived and store.archive is None:
        raise BadInput(f"--archived lists an archive: name it with --archive (or {ARCHIVE_ENV})")
    found = store.archive.sessions() if store.archive is not None and archived else store.sessions()
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
    """What a session holds: streams and versions, event count, first and last commit."""
    info = settings.session(session).session_info(session).to_dict()
    if not settings.as_table:
        emit(info)
        return
    rows = [{"stream": name, "version": str(v)} for name, v in info["streams"].items()]
    show_rows(
        settings,
        rows,
        f"{session}: {info['events']} events, {info['first_at']} .. {info['last_at']}",
    )


@cli.command()
@click.argument("session")
@click.argument("file", required=False, type=click.Path(dir_okay=False, allow_dash=True))
@click.option(
    "--format",
    "form",
    type=click.Choice(["jsonl", "atif", "otlp"]),
    default="jsonl",
    show_default=True,
    help="jsonl: conversation.jsonl, every event; atif: an ATIF v1.7 trajectory (Harbor's);"
    " otlp: OpenTelemetry GenAI spans, sent to --endpoint.",
)
@click.option("--endpoint", default=None, help="otlp: the OTLP/HTTP endpoint (its /v1/traces).")
@click.option(
    "--content",
    is_flag=True,
    help="otlp: the tools' arguments and results as attributes (the conventions' opt-in).",
)
@filter_options
@pass_settings
def export(
    settings: Settings,
    /,
    session: str,
    file: str | None,
    form: str,
    endpoint: str | None,
    content: bool,
    **filters: Any,
) -> None:
    """The whole session as conversation.jsonl, in commit order, or as a trajectory (stdout
    when no FILE), or as spans to an OTLP endpoint."""
    keep = event_filter(filters)
    if form != "jsonl" and keep != EventFilter():
        raise BadInput(f"a trajectory is of the whole session: --format {form} takes no filter")
    if form != "otlp" and (endpoint is not None or content):
        raise BadInput("--endpoint and --content are for --format otlp")
    if form == "atif":
        export_trajectory(settings.session(session), session, file)
        return
    if form == "otlp":
        if endpoint is None or file is not None:
            raise BadInput("--format otlp sends spans to --endpoint URL, and writes no FILE")
        export_spans(settings.session(session), session, endpoint, content)
        return
    from ledger_bus.exports.conversation import export_session  # what only this command needs

    store = settings.session(session)
    if file in (None, "-"):
        export_session(store, session, sys.stdout, keep)
        return
    assert file is not None
    with replace_whole(file) as out:
        count = export_session(store, session, out, keep)
    click.echo(f"exported {count} events to {file}", err=True)


def export_trajectory(store: EventStore, session: str, file: str | None) -> None:
    from ledger_bus.exports.atif import write_atif

    if file in (None, "-"):
        write_atif(store, session, sys.stdout)
        sys.stdout.write("\n")
        return
    assert file is not None
    with replace_whole(file) as out:  # NotFound leaves no file
        write_atif(store, session, out)
        out.write("\n")
    click.echo(f"exported the trajectory of {session} to {file}", err=True)


def export_spans(store: EventStore, session: str, endpoint: str, content: bool) -> None:
    from ledger_bus.exports.otel import Options, send_spans, streamed

    sent = send_spans(streamed(store, session, Options(content=content)), endpoint)
    click.echo(f"exported {sent} spans of {session} to {endpoint}", err=True)


@cli.command()
@click.option("--endpoint", required=True, help="The OTLP/HTTP endpoint (its /v1/traces).")
@click.option("--follow", is_flag=True, help="Pass after pass, until stopped (SIGTERM, Ctrl-C).")
@click.option(
    "--name",
    default="default",
    show_default=True,
    help="The follower's name: its cursors, kept in the ledger, are its own.",
)
@click.option(
    "--state-session",
    default="otel",
    show_default=True,
    help="The session the follower keeps its cursors in (it sends nothing of its own).",
)
@click.option(
    "--every",
    type=Duration(minimum=0.001),
    default="1s",
    show_default=True,
    help="The pause between passes (1s, 5m, or seconds).",
)
@click.option(
    "--content",
    is_flag=True,
    help="The tools' arguments and results as attributes (the conventions' opt-in).",
)
@pass_settings
def otel(
    settings: Settings,
    endpoint: str,
    follow: bool,
    name: str,
    state_session: str,
    every: float,
    content: bool,
) -> None:
    """Send what sessions settled since the last pass to an OTLP endpoint, as GenAI spans,
    once or (--follow) as they grow; one line per session a pass sent on stdout."""
    from ledger_bus.exports.otel import Options
    from ledger_bus.exports.otel_follow import Follower

    follower = Follower(
        settings.store(patient=follow),
        endpoint,
        name,
        state_session=state_session,
        options=Options(content=content),
    )
    follower.on_pass = emit
    if not follow:
        follower.run_pass()
        return
    stop_on_sigterm()
    try:
        follower.run(threading.Event(), every)
    except KeyboardInterrupt:
        return


@cli.command(name="import")
@click.argument("session")
@click.argument("file", type=click.File("rb"))
@click.option(
    "--stream",
    "default_stream",
    default="main",
    show_default=True,
    help="Stream for lines that name none.",
)
@pass_settings
def import_(settings: Settings, session: str, file: Any, default_stream: str) -> None:
    """A conversation.jsonl into a session; importing the same file again changes nothing."""
    from ledger_bus.exports.conversation import (  # what only this command needs
        plan_import,
        run_import,
    )

    store = settings.store()
    plan = plan_import(store, session, file, default_stream)
    total = sum(len(b.events) for b in plan.batches)
    if sys.stderr.isatty():
        from rich.progress import Progress

        with Progress(transient=True) as bar:
            task = bar.add_task(f"importing into {session}", total=total)
            report = run_import(store, plan, lambda n: bar.advance(task, n))
    else:
        report = run_import(store, plan)
    show_record(settings, {"session": session, **report.to_dict()})


@cli.command()
@click.argument("session")
@click.option(
    "--dir",
    "directory",
    required=True,
    type=click.Path(file_okay=False),
    help="Writes DIR/SESSION/conversation.jsonl.",
)
@click.option("--once", is_flag=True, help="Catch up, then exit.")
@pass_settings
def mirror(settings: Settings, session: str, directory: str, once: bool) -> None:
    """Keep DIR/SESSION/conversation.jsonl up to date: lines appended as events commit."""
    from ledger_bus.exports.mirror import Mirror  # what only this command needs

    follower = Mirror(settings.store(patient=not once), session, directory)
    if once:
        follower.catch_up()
        return
    stop = threading.Event()
    stop_on_sigterm()
    try:
        follower.run(stop)
    except KeyboardInterrupt:
        return
