"""Options several commands share (the event filters), and values of options as people write
them: durations, one syntax everywhere (`90s`, `30m`, `12h`, `7d`, or plain seconds; the `-ms`
options take plain milliseconds as well)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import click

from ledger_bus.agent.filters import EventFilter, parse_bound
from ledger_bus.cli.app import BadInput, did_you_mean, refs_option
from ledger_bus.model.durations import duration_seconds
from ledger_bus.model.vocabulary import EVENT_TYPES


class Duration(click.ParamType):  # type: ignore[type-arg]
    """A span of time as seconds: 90s, 30m, 12h, 7d, or plain seconds (2.5); `minimum` the
    least it may be."""

    name = "DURATION"

    def __init__(self, minimum: float = 0.0):
        self.minimum = minimum

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, int | float):
            seconds: float | None = float(value)
        else:
            seconds = duration_seconds(str(value))
        if seconds is None:
            self.fail(f"{value!r} is not a duration such as 90s, 30m, 12h, 7d or 2.5", param, ctx)
        if seconds < self.minimum:
            self.fail(f"{value!r} is below the least it may be, {self.minimum:g}s", param, ctx)
        return seconds


class DurationMs(Duration):
    """A span of time as whole milliseconds: plain milliseconds (2000), as the option's name
    says, or a duration with its unit (2s, 5m)."""

    name = "MS|DURATION"

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> int:
        if isinstance(value, int) or str(value).strip().isdigit():
            return int(str(value))
        return round(super().convert(value, param, ctx) * 1000)


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
