"""Values of options as people write them: durations, one syntax everywhere (`90s`, `30m`,
`12h`, `7d`, or plain seconds; the `-ms` options take plain milliseconds as well)."""

from __future__ import annotations

from typing import Any

import click

from ledger_bus.model.durations import duration_seconds


class Duration(click.ParamType):  # type: ignore[type-arg]
    """A span of time as seconds: 90s, 30m, 12h, 7d, or plain seconds (2.5); `minimum` the
    least it may be."""

    name = "DURATION"

    def __init__(self, minimum: float = 0.0):
        self.minimum = minimum

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
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

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, int) or str(value).strip().isdigit():
            return int(value)
        return round(super().convert(value, param, ctx) * 1000)
