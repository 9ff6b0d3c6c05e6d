"""What an append waits for before it is acknowledged: the durability levels of a store."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from ledger_bus.model.errors import InvalidInput

DEFAULT_TIMEOUT_MS: Final = 1000
_LEVEL = re.compile(r"(local|aof|replicas:([1-9][0-9]?)|aof\+replicas:([1-9][0-9]?))")


@dataclass(frozen=True, slots=True)
class Durability:
    """local: acknowledged once the primary has it in memory (and on disk as its own
    `appendfsync` says). replicas:N: and N replicas have it (WAIT). aof: and the primary's AOF is
    fsynced (WAITAOF). aof+replicas:N: and N replicas' AOFs too. `timeout_ms`: how long an append
    waits for that before it is reported not confirmed."""

    replicas: int = 0
    aof: bool = False
    timeout_ms: int = DEFAULT_TIMEOUT_MS

    @property
    def local(self) -> bool:
        return not self.replicas and not self.aof

    @property
    def name(self) -> str:
        if self.aof:
            return f"aof+replicas:{self.replicas}" if self.replicas else "aof"
        return f"replicas:{self.replicas}" if self.replicas else "local"

    def __str__(self) -> str:
        return self.name


LOCAL: Final = Durability()


def parse_durability(text: str, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> Durability:
    """`local`, `replicas:N`, `aof` or `aof+replicas:N` (N from 1 to 99); InvalidInput else."""
    match = _LEVEL.fullmatch(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise InvalidInput(
            f"durability must be local, replicas:N, aof or aof+replicas:N; got {text!r}"
        )
    if not isinstance(timeout_ms, int) or isinstance(timeout_ms, bool) or timeout_ms < 1:
        raise InvalidInput(
            f"durability timeout must be an int of milliseconds >= 1: {timeout_ms!r}"
        )
    replicas = int(match[2] or match[3] or 0)
    return Durability(replicas, text.strip().startswith("aof"), timeout_ms)
