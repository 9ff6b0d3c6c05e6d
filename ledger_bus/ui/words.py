"""Counts as the web view writes them, in words that agree with them: "1 stream", "2 streams",
"0 runs" (static/trace.js `counted` writes them alike)."""

from __future__ import annotations


def counted(n: int, one: str, many: str | None = None) -> str:
    """`n` and the word for one thing, or for many (`one` + "s" unless given) when `n` is not 1:
    `counted(1, "run")` is "1 run", `counted(3, "dispatch", "dispatches")` "3 dispatches"."""
    return f"{n:,} {one if n == 1 else many or one + 's'}"
