"""Every Redis key name the ledger uses, built in this one place.

All keys of a session carry the hash tag `{<session>}`, so one Lua call touches one slot and the
layout runs unchanged on Redis Cluster. The cross-session index is split into buckets with hash
tags of their own, so that on a cluster it spreads over the shards instead of making one hot key.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ledger_bus.store.buckets import INDEX_BUCKETS, bucket_of


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

    def open_attempts(self, session_id: str) -> str:
        """Hash: attempt_id -> "<run>\x1f<tool>\x1f<stream>\x1f<cursor>\x1f<flag cursor>"."""
        return f"{self.prefix}:{{{session_id}}}:open"

    def safe_tools(self, session_id: str) -> str:
        """Hash: "<run>\x1f<tool>" -> 1 for tools a run declared safe to replay."""
        return f"{self.prefix}:{{{session_id}}}:safe"

    def tombstone(self, session_id: str) -> str:
        """Hash: what outlives a deletion of the session's events: `generation` (deletions so
        far), `deleted_ms`."""
        return f"{self.prefix}:{{{session_id}}}:tomb"

    def artifact(self, session_id: str, sha256: str) -> str:
        """Hash: an artifact's bytes (spec 3.11) in chunks "0", "1", ... of 1 MiB; volatile
        until an append references it."""
        return f"{self.prefix}:{{{session_id}}}:art:{sha256}"

    def artifact_upload(self, session_id: str, sha256: str, token: str) -> str:
        """Hash: an artifact being written, a chunk at a time, with a TTL."""
        return f"{self.prefix}:{{{session_id}}}:art:{sha256}:{token}"

    def artifact_uses(self, session_id: str) -> str:
        """Hash: sha256 -> how many event fields in the log reference the artifact."""
        return f"{self.prefix}:{{{session_id}}}:arts"

    def bounds(self, session_id: str) -> str:
        """Hash: stream name -> "<keep> <dedup window ms>" for bounded streams (spec 3.12)."""
        return f"{self.prefix}:{{{session_id}}}:bounds"

    def trimmed(self, session_id: str, stream: str) -> str:
        """Stream: the appends a bounded stream trimmed whose append_ids are still kept, entry
        `<first version>-0` with fields i (append_id) and c (cursor of its first event)."""
        return f"{self.prefix}:{{{session_id}}}:t:{stream}"

    def open_index(self, bucket: int) -> str:
        """Sorted set of sessions that may have open attempts, by when one last opened (ms)."""
        return f"{self.prefix}:open-sessions:{{{self.prefix}-{bucket:02d}}}"

    def open_index_of(self, session_id: str) -> str:
        return self.open_index(bucket_of(session_id))

    def lease(self, session_id: str, name: str) -> str:
        """String: the owner of a lease (a run's, an adapter's session), with a TTL."""
        return f"{self.prefix}:{{{session_id}}}:lease:{name}"

    def fences(self, session_id: str) -> str:
        """Hash: lease name -> the token of its current holding (lease.lua); append.lua names it
        from the tombstone's prefix, as it does the bounds."""
        return f"{self.prefix}:{{{session_id}}}:fences"

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
        return self.index(bucket_of(session_id))

    def all_indexes(self) -> list[str]:
        return [self.index(bucket) for bucket in range(INDEX_BUCKETS)]

    # -- each script's KEYS, in the order store/lua/protocol.json gives them (its test,
    # tests/contract/test_script_protocol.py, holds every builder here to it) ------------------

    def append_keys(self, session: str, stream: str) -> list[str]:
        """append.lua's KEYS, and restore.lua's, but an append's artifacts'."""
        return [
            self.log(session),
            self.meta(session),
            self.stream(session, stream),
            self.idempotency(session, stream),
            self.open_attempts(session),
            self.safe_tools(session),
            self.tombstone(session),
        ]

    restore_keys = append_keys

    def artifact_keys(self, session: str, artifacts: Iterable[str]) -> list[str]:
        """The KEYS append.lua and restore.lua take after their own for a call whose events keep
        fields as `artifacts` (their sha256s)."""
        return [self.artifact_uses(session), *(self.artifact(session, a) for a in artifacts)]

    def artifact_put_keys(self, session: str, sha256: str, token: str) -> list[str]:
        return [self.artifact_upload(session, sha256, token), self.artifact(session, sha256)]

    def lease_keys(self, session: str, name: str) -> list[str]:
        return [self.lease(session, name), self.fences(session)]

    def read_stream_keys(self, session: str, stream: str) -> list[str]:
        return [self.stream(session, stream), self.log(session)]

    def delete_session_keys(
        self, session: str, streams: Iterable[str], groups: Iterable[str]
    ) -> list[str]:
        """delete_session.lua's KEYS for the `streams` and consumer `groups` the caller found."""
        return [
            self.log(session),
            self.meta(session),
            self.open_attempts(session),
            self.safe_tools(session),
            self.tombstone(session),
            *(self.stream(session, name) for name in streams),
            *(self.group_dead_letters(session, group) for group in groups),
        ]

    def delete_stream_keys(self, session: str, stream: str) -> list[str]:
        return [
            self.log(session),
            self.meta(session),
            self.stream(session, stream),
            self.open_attempts(session),
            self.tombstone(session),
        ]

    def archive_finish_keys(
        self,
        session: str,
        streams: Iterable[str],
        groups: Iterable[str],
        idempotency_streams: Iterable[str],
    ) -> list[str]:
        """delete_session.lua's KEYS, then the append_id records of `idempotency_streams`."""
        return [
            *self.delete_session_keys(session, streams, groups),
            *(self.idempotency(session, name) for name in idempotency_streams),
        ]

    def archive_abandon_keys(self, session: str) -> list[str]:
        return [self.tombstone(session)]

    def forget_session_keys(self, session: str) -> list[str]:
        return [self.open_index_of(session)]

    def prune_consumers_keys(self, session: str) -> list[str]:
        return [self.log(session)]
