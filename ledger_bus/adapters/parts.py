"""An id from a framework as a part of a ledger name: the rule the adapters share
(ledger_bus/agent/names.py says it again, for finding sessions without the frameworks)."""

from __future__ import annotations

import hashlib
import re
from typing import Final

_PLAIN: Final = re.compile(r"[A-Za-z0-9._@+-]{1,60}")


def part(value: str) -> str:
    """An id as a part of a ledger name: itself when plain, else `~` and its digest."""
    if _PLAIN.fullmatch(value):
        return value
    return "~" + hashlib.sha256(value.encode()).hexdigest()[:32]
