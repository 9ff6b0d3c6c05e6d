"""Every Redis key name the ledger uses, built in this one place.

All keys of a session carry the hash tag `{<session>}`, so one Lua call touches one slot and the
layout runs unchanged on Redis Cluster. The cross-session index is split into buckets with hash
tags of their own, so that on a cluster it spreads over the shards instead of making one hot key.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Final

INDEX_BUCKETS: Final = 64


@dataclass(frozen=True, slots=True)
class Keys:
    """Key names under one prefix."""

    prefix: str = "lb"

    def log(self, session_id: str) -> str:
        """The session log: one entry per event, whose id is the commit cursor."""
        return f"{self.prefix}:{{{session_id}}}:log"

    def meta(self, session_id: str) -> str:
        """Hash: stream name -> version."""
        return f"{self.prefix}:{{{session_id}}}:meta"

    def stream(self, session_id: str, stream: str) -> str:
        """One stream's index: per append, entry `<first version>-0` with first cursor and count."""
        return f"{self.prefix}:{{{session_id}}}:s:{stream}"

    def idempotency(self, session_id: str, stream: str) -> str:
        """Hash: append_id -> "<digest> <first version> <last version> <cursor>"."""
        return f"{self.prefix}:{{{session_id}}}:idem:{stream}"

    def lease(self, session_id: str, name: str) -> str:
        """String: the owner token of a run's lease, with a TTL."""
        return f"{self.prefix}:{{{session_id}}}:lease:{name}"

    def group_dead_letters(self, session_id: str, group: str) -> str:
        """Stream: session log entries a consumer group gave up on, with why."""
        return f"{self.prefix}:{{{session_id}}}:dead:{group}"

    def session_pattern(self) -> str:
        """SCAN pattern matching every session's meta key, for rebuilding the index."""
        return f"{self.prefix}:{{*}}:meta"

    def index(self, bucket: int) -> str:
        """Sorted set of sessions by last activity (ms), one of INDEX_BUCKETS."""
        return f"{self.prefix}:sessions:{{{self.prefix}-{bucket:02d}}}"

    def index_of(self, session_id: str) -> str:
        return self.index(zlib.crc32(session_id.encode()) % INDEX_BUCKETS)

    def all_indexes(self) -> list[str]:
        return [self.index(bucket) for bucket in range(INDEX_BUCKETS)]
