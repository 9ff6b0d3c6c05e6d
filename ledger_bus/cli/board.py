"""The dispatch board's commands: open, stage, close, list, check, import and export."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from ledger_bus.board.dispatches import Board, launch_field, parse_now, read_spawn_log, spawn_log
from ledger_bus.cli.app import (
    BadInput,
    Settings,
    cli,
    pass_settings,
)
from ledger_bus.cli.output import show_record, show_rows
from ledger_bus.model.files import replace_whole
from ledger_bus.model.jsontext import JSONObject, parse_json

NOW_HELP = "The time to act as of, ISO 8601 (default: now)."


@cli.group()
def dispatch() -> None:
    """The dispatch board: dispatches kept as mutations in the session's `dispatch` stream."""


def _fields(pairs: tuple[str, ...]) -> dict[str, str]:
    fields = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise BadInput(f"--field takes key=value, got {pair!r}")
        if key in ("id", "timestamp", "outcome", "completedAt", "role", "objective"):
            raise BadInput(f"--field {key} is set by the command itself")
        fields[key] = value
    return fields


@dispatch.command(name="open")
@click.argument("session")
@click.option("--role", required=True, help="The target role (writer, librarian, ...).")
@click.option("--objective", required=True, help="One-line summary of the ask.")
@click.option("--field", "pairs", multiple=True, help="key=value, any other field (repeatable).")
@click.option("--now", default=None, help=NOW_HELP)
@click.option(
    "--request-id",
    default=None,
    help="Make the open idempotent: run again with it, it prints the dispatch it opened.",
)
@pass_settings
def open_(
    settings: Settings,
    session: str,
    role: str,
    objective: str,
    pairs: tuple[str, ...],
    now: str | None,
    request_id: str | None,
) -> None:
    """Record a dispatch as it fires; print its new id d-YYYY-MM-DD-NNN.

    Piped, the line is {"session": ..., "id": ...}: `jq -r .id` gives the bare id.
    """
    fields = _fields(pairs)
    board = Board(settings.store(), session)
    dispatch_id = board.open(role, objective, parse_now(now), fields, request_id)
    show_record(
        settings, {"session": session, "id": dispatch_id, "role": role, "objective": objective}
    )


@dispatch.command()
@click.argument("session")
@click.option("--id", "dispatch_id", required=True)
@click.option("--line", required=True, help="What happened at this checkpoint.")
@click.option("--stage", default=None, help="The stage reached.")
@click.option("--now", default=None, help=NOW_HELP)
@pass_settings
def stage(
    settings: Settings,
    session: str,
    dispatch_id: str,
    line: str,
    stage: str | None,
    now: str | None,
) -> None:
    """Append a checkpoint; refused (exit 1) on a closed dispatch."""
    Board(settings.store(), session).stage(dispatch_id, line, stage, parse_now(now))


@dispatch.command()
@click.argument("session")
@click.option("--id", "dispatch_id", required=True)
@click.option(
    "--outcome",
    default="done",
    show_default=True,
    help="Must begin with a closed word (done, success, failed, partial, ...).",
)
@click.option("--now", default=None, help=NOW_HELP)
@pass_settings
def close(
    settings: Settings, session: str, dispatch_id: str, outcome: str, now: str | None
) -> None:
    """Set completedAt and the outcome; a second close is refused (exit 1)."""
    Board(settings.store(), session).close(dispatch_id, outcome, parse_now(now))


def _in_flight(settings: Settings, found: list[tuple[str, JSONObject]], title: str) -> None:
    """Dispatches in flight: whole records as JSONL, or their main fields as a table."""
    if not settings.as_table:
        show_rows(settings, ({"window": where, **record} for where, record in found))
        return
    rows = [
        {
            "window": where,
            "id": str(record.get("id")),
            "role": str(record.get("role")),
            "launched": str(launch_field(record) or ""),
            "stage": str(record.get("stage") or ""),
            "objective": str(record.get("objective") or ""),
        }
        for where, record in found
    ]
    show_rows(settings, rows, title)


@dispatch.command(name="list")
@click.argument("session")
@click.option("--json", "as_json", is_flag=True, hidden=True, help="The same as --output jsonl.")
@click.option(
    "--all",
    "include_other",
    is_flag=True,
    help="Add the open ones in flight nowhere (older than 48 h, or untimed).",
)
@click.option("--now", default=None, help=NOW_HELP)
@pass_settings
def list_(
    settings: Settings, session: str, as_json: bool, include_other: bool, now: str | None
) -> None:
    """The dispatches in flight, each marked live (< 24 h) or stale (24-48 h)."""
    if as_json:
        settings.output = "jsonl"
    found = Board(settings.store(), session).in_flight(parse_now(now), include_other)
    _in_flight(settings, list(found), f"{session}: {len(found)} in flight")


@dispatch.command()
@click.argument("session")
@click.option("--now", default=None, help=NOW_HELP)
@pass_settings
def check(settings: Settings, session: str, now: str | None) -> None:
    """Every dispatch in flight, then a warning per unrecognised status word (exit 0).

    Piped, the warnings are lines of their own: {"warning": "..."}.
    """
    board = Board(settings.store(), session)
    moment = parse_now(now)
    found = board.in_flight(moment)
    _in_flight(settings, list(found), f"{session}: {len(found)} in flight")
    warnings = [{"warning": line} for line in board.warnings(moment)]
    if warnings or not settings.as_table:
        show_rows(settings, warnings, f"{len(warnings)} warnings")


@dispatch.command(name="import")
@click.argument("session")
@click.argument("file", type=click.File("rb"))
@pass_settings
def import_(settings: Settings, session: str, file: Any) -> None:
    """A spawn-log.json in any of its three shapes; importing it again changes nothing."""
    data = parse_json(file.read(), file.name)
    records = read_spawn_log(data)
    changed = Board(settings.store(), session).import_records(records)
    show_record(settings, {"session": session, "records": len(records), "changed": changed})


@dispatch.command(name="export")
@click.argument("session")
@click.argument("file", required=False, type=click.Path(dir_okay=False, allow_dash=True))
@pass_settings
def export_(settings: Settings, session: str, file: str | None) -> None:
    """The board as {"version": "1.0", "spawns": [...]} (stdout when no FILE)."""
    text = (
        json.dumps(
            spawn_log(Board(settings.store(), session).records()), indent=2, ensure_ascii=False
        )
        + "\n"
    )
    if file in (None, "-"):
        sys.stdout.write(text)
        return
    assert file is not None
    with replace_whole(file) as out:
        out.write(text)
