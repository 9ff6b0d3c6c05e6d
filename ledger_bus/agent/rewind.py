"""Noticing that a failover rewound a session: an event this process already handled is gone.

With asynchronous replication (durability local), a primary that dies takes its last writes with
it, and the promoted replica's history is shorter. Writers find out on their next append
(HistoryRewound). Readers find out here: a consumer or the reconciler remembers the last event it
handled, and after its connection failed, looks for it again. A rewind is reported three ways: a
log line, a count the caller exports as a metric, and a `ledger.rewound` mutation in the session's
`ledger` stream, where an operator looking at the session sees it.
"""

from __future__ import annotations

import logging
from typing import Final

from ledger_bus.model.errors import LedgerError
from ledger_bus.model.ids import ANY, StreamId, previous_cursor
from ledger_bus.store.base import EventStore
from ledger_bus.store.steps import Op

log = logging.getLogger("ledger_bus.rewind")

REWIND_STREAM: Final = "ledger"
REWIND_KIND: Final = "ledger.rewound"


def cursor_gone(store: EventStore, session_id: str, cursor: str) -> bool:
    """Whether the event committed at `cursor` is no longer in the session."""
    return store.run_op(cursor_gone_op(store, session_id, cursor))


def cursor_gone_op(store: EventStore, session_id: str, cursor: str) -> Op[bool]:
    found = yield from store.scan_session_op(session_id, previous_cursor(cursor), 1)
    return not found or found[0].cursor != cursor


def report_rewind(
    store: EventStore, session_id: str, observer: str, lost_cursor: str, what: str
) -> None:
    """Say that `observer` handled the event at `lost_cursor` and the session no longer has it."""
    store.run_op(report_rewind_op(store, session_id, observer, lost_cursor, what))


def report_rewind_op(
    store: EventStore, session_id: str, observer: str, lost_cursor: str, what: str
) -> Op[None]:
    latest = yield from store.tail_op(session_id, 1)
    now_last = latest[0].cursor if latest else None
    log.error(
        "session %s was rewound: %s handled %s at %s, which is gone (the session now ends at %s);"
        " a failover lost acknowledged events",
        session_id,
        observer,
        what,
        lost_cursor,
        now_last,
    )
    event = {
        "type": "mutation",
        "agent": observer,
        "kind": REWIND_KIND,
        "lost_cursor": lost_cursor,
        "what": what,
        "session_last_cursor": now_last,
    }
    ref = StreamId(session_id, REWIND_STREAM)
    try:
        yield from store.append_op(ref, ANY, f"rewound:{observer}:{lost_cursor}", [event])
    except LedgerError as err:
        log.error("could not record the rewind of %s in the session: %s", session_id, err)
