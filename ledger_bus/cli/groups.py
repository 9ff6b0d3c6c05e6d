"""Consumer groups on a session's log: `follow` (an agent's tail through one), and `groups`, their
administration."""

from __future__ import annotations

import click

from ledger_bus.agent.tailer import Tailer, TailerOptions
from ledger_bus.cli.app import (
    Settings,
    cli,
    pass_settings,
    say,
    stop_on_sigterm,
)
from ledger_bus.cli.output import EventLines, show_record, show_rows
from ledger_bus.cli.params import DurationMs
from ledger_bus.model.errors import NotFound
from ledger_bus.model.ids import CURSOR_ZERO, check_name
from ledger_bus.model.jsontext import JSONObject
from ledger_bus.model.records import GroupStats
from ledger_bus.store.base import EventStore


@cli.command()
@click.argument("session")
@click.option("--group", required=True, help="Consumer group; a new one starts at the end.")
@click.option("--consumer", required=True, help="This consumer's name within the group.")
@click.option(
    "--count", type=click.IntRange(min=1), default=100, show_default=True, help="Events per batch."
)
@click.option(
    "--block-ms",
    type=DurationMs(),
    default=2000,
    show_default=True,
    help="How long a read waits for new events.",
)
@click.option("--once", is_flag=True, help="Stop after one batch.")
@click.option("--no-ack", is_flag=True, help="Leave delivered events pending.")
@click.option(
    "--claim-idle-ms",
    type=DurationMs(),
    default=None,
    help="First take over events other consumers left pending this long.",
)
@click.option(
    "--max-deliveries",
    type=click.IntRange(min=1),
    default=5,
    show_default=True,
    help="Past this, an event moves to the group's dead-letter stream.",
)
@click.option("--skip-agent", default=None, help="Ack this agent's own events without printing.")
@click.option(
    "--type",
    "types",
    multiple=True,
    type=click.Choice(["message", "tool_call", "tool_result", "mutation"]),
    help="Print only these types (repeatable); the rest are acked.",
)
@pass_settings
def follow(
    settings: Settings,
    session: str,
    group: str,
    consumer: str,
    count: int,
    block_ms: int,
    once: bool,
    no_ack: bool,
    claim_idle_ms: int | None,
    max_deliveries: int,
    skip_agent: str | None,
    types: tuple[str, ...],
) -> None:
    """Deliver the session's new events through consumer group G, at least once.

    Each event is acked once printed, unless --no-ack.
    """
    options = TailerOptions(
        count=count,
        block_ms=block_ms,
        claim_idle_ms=claim_idle_ms,
        max_deliveries=max_deliveries,
        skip_agent=skip_agent,
        types=set(types) or None,
    )
    check_name(group, "group name")  # bad input is said before anything else
    check_name(consumer, "consumer name")
    store, session = settings.awaited(session, patient=not once)
    tailer = Tailer(store, session, group, consumer, options)
    tailer.join(0)
    stop_on_sigterm()
    try:
        # A print that fails (a closed pipe) ends the run: its event stays unacked.
        show = EventLines(settings)
        tailer.run(show, ack=not no_ack, batches=1 if once else None, errors="raise")
    except KeyboardInterrupt:
        return


class _Groups(click.Group):
    """`groups SESSION` lists; `groups pending|dead-letters|delete|reset ...` act on one group."""

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        if args and args[0] not in self.commands:
            args = ["list", *args]
        return super().resolve_command(ctx, args)


@cli.group(cls=_Groups)
def groups() -> None:
    """Consumer groups of a session: `groups SESSION`, and what to do with one group."""


@groups.command(name="list")
@click.argument("session")
@click.option(
    "--idle-ms",
    type=DurationMs(),
    default=3_600_000,
    show_default=True,
    help="A consumer holding nothing counts as idle after this long.",
)
@pass_settings
def groups_list(settings: Settings, session: str, idle_ms: int) -> None:
    """Each group: consumers live and idle, pending, lag, last delivered, dead letters."""
    store, session = settings.named(session)
    rows = [_group_row(store, session, stats) for stats in store.groups(session, idle_ms)]
    show_rows(settings, rows, f"{session}: consumer groups")


def _group_row(store: EventStore, session: str, stats: GroupStats) -> JSONObject:
    """What `groups list` says of a group: its stats and how many dead letters it holds."""
    return {**stats.to_dict(), "dead_letters": len(store.group_dead_letters(session, stats.group))}


@groups.command(name="pending")
@click.argument("session")
@click.argument("group")
@click.option("--count", type=click.IntRange(min=1), default=1000, show_default=True)
@pass_settings
def groups_pending(settings: Settings, session: str, group: str, count: int) -> None:
    """Who holds which event, for how long, delivered how often; oldest first."""
    store, session = settings.named(session)
    entries = store.group_pending_entries(session, group, count)
    show_rows(settings, [e.to_dict() for e in entries], f"{session}/{group}: pending")


@groups.command(name="dead-letters")
@click.argument("session")
@click.argument("group")
@click.option("--replay", is_flag=True, help="Put them back for consumers to take over.")
@pass_settings
def groups_dead_letters(settings: Settings, session: str, group: str, replay: bool) -> None:
    """The group's dead letters; with --replay, each is pending again and its letter removed."""
    store, session = settings.named(session)
    if replay:
        count = store.group_replay_dead_letters(session, group)
        show_record(settings, {"session": session, "group": group, "replayed": count})
        return
    show_rows(settings, store.group_dead_letters(session, group), f"{session}/{group}: dead")


@groups.command(name="delete")
@click.argument("session")
@click.argument("group")
@click.option("--yes", is_flag=True, help="Delete; without it, only say what would go.")
@pass_settings
def groups_delete(settings: Settings, session: str, group: str, yes: bool) -> None:
    """Remove a group, its pending list and its dead letters (the events stay). Without --yes,
    say what would go, as `delete` does, and delete nothing."""
    store, session = settings.named(session)
    if not yes:
        stats = store.group_stats(session, group)  # NotFound (exit 6) for no such group
        row = _group_row(store, session, stats)
        show_record(settings, {"session": session, **row, "would_delete": True})
        say("nothing deleted: run again with --yes to delete")
        return
    if not store.group_delete(session, group):
        raise NotFound(f"no consumer group {group!r} on session {session!r}")
    show_record(settings, {"session": session, "group": group, "deleted": True})


@groups.command(name="reset")
@click.argument("session")
@click.argument("group")
@click.option("--to", "cursor", required=True, help="Deliver what commits after this cursor.")
@pass_settings
def groups_reset(settings: Settings, session: str, group: str, cursor: str) -> None:
    """Move a group's place: it delivers next what commits after CURSOR (0: from the start)."""
    target = CURSOR_ZERO if cursor == "0" else cursor
    store, session = settings.named(session)
    store.group_reset(session, group, target)
    show_record(settings, {"session": session, "group": group, "after": target})
