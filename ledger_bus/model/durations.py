"""Spans of time as people write them, one syntax everywhere: `90s`, `30m`, `12h`, `7d`, or
plain seconds (`2.5`); and as people read them (`duration_text`)."""

from __future__ import annotations

import re
from typing import Final

UNITS: Final = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION: Final = re.compile(r"(\d+(?:\.\d+)?)([smhd]?)", re.ASCII)


def duration_seconds(text: str) -> float | None:
    """The seconds `text` spells (`30s`, `5m`, `1h`, `7d`, `2.5`), or None when it spells none."""
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        return None
    return float(match[1]) * UNITS[match[2] or "s"]


def duration_text(ms: int) -> str:
    """A duration as people read it: 840 ms, 2.35 s, 4 m 05 s, 3 h 02 m (the web view's trace
    script writes them alike)."""
    if ms < 1_000:
        return f"{ms} ms"
    if ms < 60_000:
        return f"{ms / 1000:.2f} s"
    if ms < 3_600_000:
        return f"{ms // 60_000} m {ms // 1000 % 60:02d} s"
    return f"{ms // 3_600_000} h {ms // 60_000 % 60:02d} m"
