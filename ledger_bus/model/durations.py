"""Spans of time as people write them, one syntax everywhere: `90s`, `30m`, `12h`, `7d`, or
plain seconds (`2.5`)."""

from __future__ import annotations

import re
from typing import Final

from ledger_bus.model.errors import InvalidInput

UNITS: Final = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION: Final = re.compile(r"(\d+(?:\.\d+)?)([smhd]?)", re.ASCII)


def duration_seconds(text: str) -> float | None:
    """The seconds `text` spells (`30s`, `5m`, `1h`, `7d`, `2.5`), or None when it spells none."""
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        return None
    return float(match[1]) * UNITS[match[2] or "s"]


def parse_duration(text: str, what: str = "duration") -> float:
    """`duration_seconds(text)`, or InvalidInput naming `what`."""
    seconds = duration_seconds(text)
    if seconds is None:
        raise InvalidInput(f"{what}: {text!r} is not a duration such as 90s, 30m, 12h, 7d or 2.5")
    return seconds
