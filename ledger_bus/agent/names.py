"""The sessions a user may mean by a name: the ledger session of that name, else those the
adapters made for a framework's session of that id.

An adapter keeps a framework's session in a ledger session whose name is not always the id the
user knows (docs/adapters.md):

- Google ADK: `adk~<app>~<user>~<session id>`, each part itself when plain
  (`[A-Za-z0-9._@+-]{1,60}`), else `~` and 32 hex digits of its SHA-256
  (ledger_bus/adapters/adk/layout.py);
- LangGraph: a thread's id when it is a session id, else `lg~` and 40 hex digits of its SHA-256
  (ledger_bus/adapters/langgraph/layout.py);
- the OpenAI Agents SDK: a session's id when it is a session id, else `oa~` and 40 hex digits
  (ledger_bus/adapters/openai_agents.py);
- A2A: `a2a~<task id>`, the id as an ADK part (ledger_bus/adapters/a2a/layout.py);
- Pi and AgentGo keep their sessions in the ledger session the caller names, so that name is
  the one a user knows (a Pi session's own id names a stream of it, `pi.<id>`).

The rules are written again here, not imported, so that this module needs none of the
frameworks; tests/features/test_names.py holds them equal to the adapters' own.
"""

from __future__ import annotations

import difflib
import hashlib
import re
from collections.abc import Callable, Iterable
from typing import Final, Protocol

from ledger_bus.model.errors import InvalidInput, NotFound
from ledger_bus.model.ids import check_name, quoted

_PLAIN: Final = r"[A-Za-z0-9._@+-]{1,60}"
_PART: Final = rf"(?:{_PLAIN}|~[0-9a-f]{{32}})"
_ADK: Final = re.compile(rf"adk~{_PART}~{_PART}~({_PART})")
# The most recently active sessions a name a user gave is looked for among, when no session
# has that name: an ADK session is found by a part of its name, which only a listing shows.
SEARCHED: Final = 10_000
NAMED: Final = 10  # the sessions an ambiguous name is said to name, at most


class Sessions(Protocol):
    """What finding a session asks of a store."""

    def session_exists(self, session_id: str) -> bool: ...

    def sessions(self, limit: int | None = None) -> list[tuple[str, int]]: ...


def adk_part(value: str) -> str:
    """An id as a part of an ADK ledger session's name: itself when plain, else `~` and its
    digest (adapters/adk/layout.py's `part`)."""
    if re.fullmatch(_PLAIN, value):
        return value
    return "~" + hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def digested(name: str) -> list[str]:
    """The sessions a LangGraph thread and an Agents SDK session of id `name` are kept in when
    `name` is no session id: those the adapters name by its digest. None when it is one (their
    session is then `name` itself)."""
    if _is_name(name):
        return []
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:40]
    return [f"lg~{digest}", f"oa~{digest}"]


def _is_name(value: str) -> bool:
    try:
        check_name(value, "session id")
    except InvalidInput:
        return False
    return True


def framework_id(session: str) -> str | None:
    """The id a user knows a ledger session by, as its framework names it, when an adapter gave
    the session a name of its own (ADK's `adk~app~user~id`: the `id` part, itself or its
    digest); None for any other session."""
    found = _ADK.fullmatch(session)
    return found.group(1) if found else None


def sessions_named(name: str, sessions: Iterable[str]) -> list[str]:
    """The sessions a user may mean by `name`, among `sessions`: `[name]` when that session is
    one of them; else, sorted, each whose framework knows it by `name` (an ADK session by its
    session id, a LangGraph thread by its thread id, an Agents SDK session by its id, an A2A
    task by its task id); `[]` when none is."""
    known = set(sessions)
    if name in known:
        return [name]
    part = adk_part(name)
    found = {s for s in known if framework_id(s) == part}
    found.update(s for s in digested(name) if s in known)
    if f"a2a~{part}" in known:  # an A2A task, by its task id
        found.add(f"a2a~{part}")
    return sorted(found)


def closest(name: str, known: Iterable[str], n: int = 3) -> list[str]:
    """The names in `known` closest to `name`, case aside (`S1` finds `s1`): one that differs in
    case alone first, then difflib's closest."""
    by_folded: dict[str, list[str]] = {}
    for candidate in known:
        by_folded.setdefault(candidate.casefold(), []).append(candidate)
    folded = name.casefold()
    found = [c for c in by_folded.get(folded, []) if c != name]
    for match in difflib.get_close_matches(folded, list(by_folded), n=n):
        found += [c for c in by_folded[match] if c != name and c not in found]
    return found[:n]


def named_sessions(
    store: Sessions, name: str, readable: Callable[[str], bool] = lambda _: True
) -> list[str]:
    """The sessions of `store` that `readable` keeps and a user may mean by `name`
    (sessions_named), among the SEARCHED most recently active."""
    return _looked(store, name, readable)[0]


def find_session(
    store: Sessions,
    name: str,
    readable: Callable[[str], bool] = lambda _: True,
    *,
    exact: bool = False,
    then: str = "",
) -> str:
    """The session `name` names, among those `readable` keeps: itself when it holds events,
    else the one session its framework knows by that id (sessions_named); with `exact`, itself
    alone (for what deletes). NotFound otherwise, naming every session it may mean, else the
    closest names and `then`."""
    found, known = _looked(store, name, readable)
    if found == [name]:
        return name
    if len(found) == 1 and not exact:
        return found[0]
    if found:
        more = f" and {len(found) - NAMED} more" if len(found) > NAMED else ""
        why = "this command takes the session's own name" if exact else "name one"
        raise NotFound(
            f"no such session {quoted(name)}; did you mean {', '.join(found[:NAMED])}{more}?"
            f" (what a framework knows as {quoted(name)}; {why})"
        )
    near = closest(name, known)
    hint = f"; did you mean {', '.join(near)}?" if near else ""
    raise NotFound(f"no such session {quoted(name)}{hint}{then}")


def _looked(
    store: Sessions, name: str, readable: Callable[[str], bool]
) -> tuple[list[str], list[str]]:
    """The sessions `name` may mean, and those it was looked for among."""
    if _is_name(name) and readable(name) and store.session_exists(name):
        return [name], [name]
    known = [s for s, _ in store.sessions(SEARCHED) if readable(s)]
    # A digest's session is looked for by its name: it may be older than the listing goes.
    known += [s for s in digested(name) if readable(s) and store.session_exists(s)]
    return sessions_named(name, known), known
