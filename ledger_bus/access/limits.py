"""What one token may hold at once on the ledger's HTTP faces, so that one tenant cannot take
what the others need: MCP sessions, waits (each holds a thread while it waits) and live streams
(the web view's event streams, the MCP server's subscriptions). Each is counted by token; a
request over its token's limit is refused at once, and no other token's count moves.

Counts live in one event loop (the server's), which is what makes them safe without a lock: a
place is taken and given back with no await between the look and the change."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from ledger_bus.model.errors import InvalidInput, Refused

NO_TOKEN: Final = ""  # the key of every request of a face without tokens (stdio, loopback)


class OverLimit(Refused):
    """Raised when a token already holds as many of something as it may at once."""


@dataclass(frozen=True)
class Limits:
    """How many of each a token may hold at once."""

    sessions: int = 32  # MCP sessions (the protocol's older handshake opens one per initialize)
    waits: int = 8  # MCP waits in flight (of the 32 threads that serve waits)
    streams: int = 32  # live streams: the web view's event streams, MCP subscriptions

    def __post_init__(self) -> None:
        for name in ("sessions", "waits", "streams"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidInput(f"a limit of {name} is a whole number from 1, got {value!r}")


def key_of(token: str | None) -> str:
    """What a token's counts are kept under: its digest (the token itself is kept nowhere)."""
    return NO_TOKEN if token is None else hashlib.sha256(token.encode()).hexdigest()


class Quota:
    """At most `limit` of one thing held at once per key."""

    def __init__(self, limit: int, what: str):
        self.limit = limit
        self.what = what
        self.held: dict[str, int] = {}

    def count(self, key: str) -> int:
        return self.held.get(key, 0)

    def take(self, key: str, who: str) -> Callable[[], None]:
        """A place held for `key`, and what gives it back (once, however often it is called);
        OverLimit when `key` holds them all."""
        if self.count(key) >= self.limit:
            raise OverLimit(
                f"{who} holds {self.limit} {self.what} at once already, the most one token"
                f" may: end one first (or give each agent a token of its own)"
            )
        self.held[key] = self.count(key) + 1
        given_back = False

        def release() -> None:
            nonlocal given_back
            if given_back:
                return
            given_back = True
            left = self.held[key] - 1
            if left:
                self.held[key] = left
            else:
                del self.held[key]

        return release
