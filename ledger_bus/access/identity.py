"""Who a client of the ledger's faces is, and what it may do: an agent's name, the sessions it
may touch (a pattern) and a role. The MCP server over stdio acts as the identity its command
line names, over HTTP as each request's token names; the web view lets a token's identity look
at its sessions. The checks are the same everywhere: a call its identity may not make is
`Refused` and writes nothing.

A sessions pattern reads a session id as a path: `/` divides it into segments (`team-a/run-7`,
LangGraph's `org/user`). `*`, `?` and `[...]` match within one segment, as fnmatch does within a
file name, so `team-a/*` is not `team-a/x/y`; `**`, a segment of its own, matches any number of
whole segments (one at least); `*` alone, the default, is every session."""

from __future__ import annotations

import fnmatch
import functools
from dataclasses import dataclass
from typing import Final, Literal

from ledger_bus.model.errors import InvalidInput, Refused
from ledger_bus.model.ids import check_name

Role = Literal["reader", "writer", "operator"]
ROLES: Final[tuple[Role, ...]] = ("reader", "writer", "operator")


@dataclass(frozen=True)
class Identity:
    """A client's identity: it posts as `agent`, touches sessions matching `sessions` (a
    pattern whose `*` keeps within a `/`-segment; `*` alone for all) and acts as a `role`: a
    reader reads, a writer also posts and keeps the dispatch board, an operator also resolves
    open calls."""

    agent: str
    role: Role = "writer"
    sessions: str = "*"

    def __post_init__(self) -> None:
        check_name(self.agent, "agent")
        if self.role not in ROLES:
            raise InvalidInput(f"a role is one of {', '.join(ROLES)}, got {self.role!r}")
        if not self.sessions:
            raise InvalidInput("a sessions pattern is a non-empty string ('*' for all)")

    def reads(self, session: str) -> bool:
        """Whether the session is one of the identity's."""
        return matches(session, self.sessions)

    def may_read(self, session: str) -> None:
        check_name(session, "session id")
        if not self.reads(session):
            raise Refused(
                f"session {session!r} is outside {self.agent}'s sessions ({self.sessions})"
            )

    def may_write(self, session: str) -> None:
        self.may_read(session)
        if self.role == "reader":
            raise Refused(f"{self.agent} is a reader: it may not write")

    def may_operate(self, session: str) -> None:
        self.may_read(session)
        if self.role != "operator":
            raise Refused(f"{self.agent} is a {self.role}: only an operator resolves calls")


ALL: Final = "*"


def matches(session: str, pattern: str) -> bool:
    """Whether a session id matches a sessions pattern, segment by segment (module docstring)."""
    if pattern == ALL:
        return True
    names, patterns = session.split("/"), pattern.split("/")

    # Whether names[i:] match patterns[j:]; each pair once, so `**`s cost no more than a table.
    @functools.cache
    def rest(i: int, j: int) -> bool:
        if j == len(patterns):
            return i == len(names)
        if patterns[j] == "**":
            return any(rest(k, j + 1) for k in range(i + 1, len(names) + 1))
        return i < len(names) and fnmatch.fnmatchcase(names[i], patterns[j]) and rest(i + 1, j + 1)

    return rest(0, 0)
