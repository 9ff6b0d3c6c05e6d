"""Commands for agents following a session: follow (a consumer group) and the live demo."""

from __future__ import annotations

import click

from ledger_bus.cli.app import Settings, cli, emit, pass_settings, say, stop_on_sigterm
from ledger_bus.ids import check_name
from ledger_bus.tailer import Tailer, TailerOptions


@cli.command()
@click.argument("session")
@click.option("--group", required=True, help="Consumer group; a new one starts at the end.")
@click.option("--consumer", required=True, help="This consumer's name within the group.")
@click.option(
    "--count", type=click.IntRange(min=1), default=100, show_default=True, help="Events per batch."
)
@click.option(
    "--block-ms",
    type=click.IntRange(min=0),
    default=2000,
    show_default=True,
    help="How long a read waits for new events.",
)
@click.option("--once", is_flag=True, help="Stop after one batch.")
@click.option("--no-ack", is_flag=True, help="Leave delivered events pending.")
@click.option(
    "--claim-idle-ms",
    type=click.IntRange(min=0),
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
    store = settings.store()
    if not store.session_exists(session):
        say(f"no session {session!r} yet: waiting for its first event")
    tailer = Tailer(store, session, group, consumer, options)
    tailer.join(0)
    stop_on_sigterm()
    try:
        while True:
            batch = tailer.poll()
            for delivery in batch:
                emit(delivery.event.to_dict())
            if not no_ack:
                tailer.ack(batch)
            if once:
                return
    except KeyboardInterrupt:
        return
