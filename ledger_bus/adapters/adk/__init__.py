"""Google ADK on the ledger: a session service.

    from ledger_bus.adapters.adk import LedgerSessionService

    service = LedgerSessionService(await aio.connect(url))   # or ledger_bus.connect(url)
    runner = Runner(app_name="support", agent=agent, session_service=service)

Each ADK session is a ledger session; its events are kept as ADK writes them, once, with the
ledger's own events beside them (layout.py, normalize.py). A runner whose session went stale
under it is refused with ADK's StaleSessionError; `get_session(..., num_recent_events=N)` reads
the tail; a function call left open by a crash is flagged by the reconciler, and once resolved
(`ledger-bus resolve`) given back to the agent as its response (service.py).
"""

from __future__ import annotations

from ledger_bus.model.extras import needs

try:
    import google.adk.sessions  # noqa: F401  (the extra is there, or say which to install)
except ImportError as err:
    raise needs(err, "ledger_bus.adapters.adk") from None

from ledger_bus.adapters.adk.service import LedgerSessionService

__all__ = ["LedgerSessionService"]
