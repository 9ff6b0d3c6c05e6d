"""The exports, from the command line: export (conversation.jsonl, an ATIF trajectory, OTLP
spans), import, otel (spans sent as sessions settle) and mirror (the conversation log as a
file, kept current)."""

from __future__ import annotations

import sys
import threading
from typing import Any

import click

from ledger_bus.agent.filters import EventFilter
from ledger_bus.cli.app import BadInput, Settings, cli, pass_settings, stop_on_sigterm
from ledger_bus.cli.output import emit, show_record
from ledger_bus.cli.params import Duration, event_filter, filter_options
from ledger_bus.exports.atif import write_atif
from ledger_bus.exports.conversation import export_session, plan_import, run_import
from ledger_bus.exports.mirror import Mirror
from ledger_bus.model.files import replace_whole
from ledger_bus.store.base import EventStore


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
    if form == "otlp" and (endpoint is None or file is not None):
        raise BadInput("--format otlp sends spans to --endpoint URL, and writes no FILE")
    store, session = settings.named(session)
    if form == "atif":
        export_trajectory(store, session, file)
        return
    if form == "otlp":
        assert endpoint is not None
        export_spans(store, session, endpoint, content)
        return
    if file in (None, "-"):
        export_session(store, session, sys.stdout, keep)
        return
    assert file is not None
    with replace_whole(file) as out:
        count = export_session(store, session, out, keep)
    click.echo(f"exported {count} events to {file}", err=True)


def export_trajectory(store: EventStore, session: str, file: str | None) -> None:
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
    # The [otel] extra: loaded by the commands that send spans alone.
    from ledger_bus.exports.otel import Options, send_spans, streamed  # noqa: PLC0415

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
    # The [otel] extra: loaded by the commands that send spans alone.
    from ledger_bus.exports.otel import Options  # noqa: PLC0415
    from ledger_bus.exports.otel_follow import Follower  # noqa: PLC0415

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
    store = settings.store()
    plan = plan_import(store, session, file, default_stream)
    total = sum(len(b.events) for b in plan.batches)
    if sys.stderr.isatty():
        from rich.progress import Progress  # noqa: PLC0415  (rich only for a terminal)

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
