"""The store contract as capabilities, and EventStore, the store that has them all.

A store is a log (store/log.py) and declares what else it can do by deriving from it:
- Attempts (store/attempts.py): leases and open attempts, what recovery and the reconciler use;
- Groups (store/groups.py): consumer groups, what a tailer reads through;
- Bounds (store/bounds.py): streams that keep only their newest events;
- Deletes (store/deletes.py): sessions and streams removed;
- Restores (store/restore.py): sessions written as recorded, and what moves with them.

Each is a small class: the public methods, checked once, over a few primitives a backend
supplies. A caller that needs a capability asks for it (`need(store, Groups)`) and is refused in
one line, Unsupported, by a store that lacks it; the stores of this package have them all
(EventStore). What some stores have besides (store/families.py: an archiving side, an archive
side, a server to watch, an archive read through) are capabilities too, asked for the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, TypeVar, cast

from ledger_bus.model.errors import Unsupported
from ledger_bus.store.attempts import Attempts
from ledger_bus.store.bounds import DEFAULT_DEDUP_WINDOW_MS, Bounds
from ledger_bus.store.deletes import Deletes
from ledger_bus.store.families import ArchiveSource, ArchiveTarget, ServerAdmin, Tiered
from ledger_bus.store.groups import Groups
from ledger_bus.store.log import PAGE, REMEMBERED, Log
from ledger_bus.store.restore import Restores

C = TypeVar(
    "C",
    Log,
    Attempts,
    Groups,
    Bounds,
    Deletes,
    Restores,
    ArchiveSource,
    ArchiveTarget,
    ServerAdmin,
    Tiered,
)

Capability = type[Log | Attempts | Groups | Bounds | Deletes | Restores]
Family = ArchiveSource | ArchiveTarget | ServerAdmin | Tiered
CAPABILITIES: Final[tuple[Capability, ...]] = (
    Log,
    Attempts,
    Groups,
    Bounds,
    Deletes,
    Restores,
)


class EventStore(Log, Attempts, Groups, Bounds, Deletes, Restores):
    """A store with every capability of the contract: memory, Redis, SQLite and PostgreSQL."""


def capabilities_of(store: object) -> list[str]:
    """What a store can do, by the capabilities' names (`log`, `consumer groups`, ...)."""
    return [c.what for c in CAPABILITIES if isinstance(store, c)]


def declaring(steps: Callable[..., object]) -> Capability:
    """The capability that has an operation's steps (`Groups.group_read_op`: Groups, whichever
    of its halves declares them)."""
    for capability in CAPABILITIES:
        if getattr(capability, steps.__name__, None) is steps:
            return capability
    raise TypeError(f"{steps.__qualname__} is no operation of the contract's capabilities")


def need(store: object, capability: Callable[..., C]) -> C:
    """`store` as the capability a caller needs; Unsupported, in one line, when it lacks it.

    `capability` is one of CAPABILITIES or of the families (typed as what makes one, since mypy
    takes no abstract class where a `type` is asked for)."""
    wanted = cast(type[C], capability)
    if isinstance(store, wanted):
        return store
    raise unsupported(store, wanted)


def unsupported(store: object, wanted: Capability | type[Family]) -> Unsupported:
    """The one-line refusal of a store that lacks the capability `wanted`."""
    kind = getattr(store, "tier", None) or type(store).__name__
    return Unsupported(
        f"this store ({kind}) has no {wanted.what}: it has "
        + (", ".join(capabilities_of(store)) or "none of the contract's capabilities")
    )


__all__ = [
    "CAPABILITIES",
    "DEFAULT_DEDUP_WINDOW_MS",
    "PAGE",
    "REMEMBERED",
    "ArchiveSource",
    "ArchiveTarget",
    "Attempts",
    "Bounds",
    "Capability",
    "Deletes",
    "EventStore",
    "Groups",
    "Log",
    "Restores",
    "ServerAdmin",
    "Tiered",
    "capabilities_of",
    "declaring",
    "need",
    "unsupported",
]
