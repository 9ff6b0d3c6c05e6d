"""A2A servers on the ledger (a2a-sdk): their tasks, and their event streams across replicas.

    from ledger_bus.adapters.a2a import LedgerTaskStore

    handler = DefaultRequestHandler(agent_executor=..., agent_card=card,
                                    task_store=LedgerTaskStore(await aio.connect(url)))

or, for replicas behind one address (the SDK's cluster mode):

    handler = DefaultRequestHandler(agent_executor=..., agent_card=card,
                                    task_store=LedgerVersionedTaskStore(store),
                                    event_stream=LedgerTaskEventStream(store))

or, with streams a client resumes where it left off (`Last-Event-ID`: handler.py):

    handler = LedgerRequestHandler(agent_executor=..., agent_card=card,
                                   task_store=LedgerVersionedTaskStore(store))

Each task is a ledger session; every save is an append at the version the server read (a stale
replica's is refused), every status and artifact update is kept, and a resubscription on any
replica reads the task's events from the ledger (store.py, layout.py). The ledger's own events
are written beside A2A's records, so `tail`, the web view and the exports read a task as any
session (normalize.py).
"""

from __future__ import annotations

from ledger_bus.model.extras import needs

try:
    import a2a.server.cluster  # noqa: F401  (the extra is there, or say which to install)
except ImportError as err:
    raise needs(err, "ledger_bus.adapters.a2a") from None

from ledger_bus.adapters.a2a.handler import VERSION, LedgerRequestHandler, version_of
from ledger_bus.adapters.a2a.layout import session_of
from ledger_bus.adapters.a2a.store import (
    LedgerTaskEventStream,
    LedgerTaskStore,
    LedgerVersionedTaskStore,
    Saved,
)

__all__ = [
    "VERSION",
    "LedgerRequestHandler",
    "LedgerTaskEventStream",
    "LedgerTaskStore",
    "LedgerVersionedTaskStore",
    "Saved",
    "session_of",
    "version_of",
]
