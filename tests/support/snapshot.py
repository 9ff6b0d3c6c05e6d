"""Everything a store holds, in a form that shows any write: a refusal must write nothing."""

from __future__ import annotations

import copy
import weakref
from typing import Any

from sqlalchemy import Engine, MetaData, select

from ledger_bus.store.base import EventStore
from ledger_bus.store.memory import MemoryStore
from ledger_bus.store.redis import RedisStore
from ledger_bus.store.sql import SqlStore

# Reflecting the schema costs more than reading a small database: once per engine.
_tables: weakref.WeakKeyDictionary[Engine, MetaData] = weakref.WeakKeyDictionary()


def whole_state(store: EventStore) -> Any:
    """Every key under the store's prefix with its serialized value (Redis), every row of every
    table (SQL), or the sessions and indexes (memory): the cross-session indexes included."""
    if isinstance(store, MemoryStore):
        return copy.deepcopy((store._sessions_by_id, store._open_index))
    if isinstance(store, RedisStore):
        client: Any = store.client  # redis-py's own, whose DUMP the store never calls
        keys = sorted(client.scan_iter(match=f"{store.keys.prefix}:*", count=1000))
        pipe = client.pipeline(transaction=False)
        for key in keys:
            pipe.dump(key)
        return list(zip(keys, pipe.execute(), strict=True))
    assert isinstance(store, SqlStore)
    tables = _tables.get(store.engine)
    if tables is None:
        tables = MetaData()
        tables.reflect(store.engine)
        if tables.tables:  # reflected again until the ledger's tables are there
            _tables[store.engine] = tables
    with store.engine.connect() as conn:
        return {
            name: sorted(map(repr, conn.execute(select(table)).all()))
            for name, table in sorted(tables.tables.items())
        }
