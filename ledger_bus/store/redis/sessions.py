"""What the scripts over a whole session are given (delete_session.lua, archive_finish.lua), and
the other looks at a session that more than one concern takes: plain operations on the client,
which the concerns run through their boundary."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import redis.exceptions as rx

from ledger_bus.model.errors import BackendUnavailable
from ledger_bus.store.redis.client import RedisClient, RedisPipeline
from ledger_bus.store.redis.core import pipelined
from ledger_bus.store.redis.encoding import text_of
from ledger_bus.store.redis.keys import Keys
from ledger_bus.store.steps import Op

# How many times a script over a whole session is run while it replies "changed": a stream or
# group was created between looking at the session and calling.
SETTLE_TRIES: Final = 100


def kept_changing(session_id: str) -> BackendUnavailable:
    """The error once SETTLE_TRIES calls all found the session changed."""
    return BackendUnavailable(f"session {session_id!r} kept changing; nothing done to it")


@dataclass(frozen=True, slots=True)
class SessionLayout:
    """A session's streams and consumer groups as found, for a script over the whole session
    (delete_session.lua, archive_finish.lua), which checks that what was found is still so."""

    session: str
    streams: list[str]
    groups: list[str]

    def keys(self, keys: Keys) -> list[str]:
        """delete_session.lua's KEYS for what was found."""
        return keys.delete_session_keys(self.session, self.streams, self.groups)


def session_layout(keys: Keys, session_id: str) -> Op[SessionLayout]:
    log = keys.log(session_id)
    meta = keys.meta(session_id)

    def stream_names(c: RedisClient) -> object:
        return c.hkeys(meta)

    def group_infos(c: RedisClient) -> object:
        return c.xinfo_groups(log)

    streams = sorted(text_of(name) for name in (yield stream_names))
    try:
        groups = [text_of(g["name"]) for g in (yield group_infos)]
    except rx.ResponseError:  # no log: no group either
        groups = []
    return SessionLayout(session_id, streams, groups)


def idempotency_streams(keys: Keys, session_id: str) -> Op[set[str]]:
    """The streams with append_id records: those in meta, and those deleted (spec 3.9)."""

    def look(pipe: RedisPipeline) -> None:
        pipe.hkeys(keys.meta(session_id))
        pipe.hkeys(keys.tombstone(session_id))

    live, tomb = yield pipelined(look)
    deleted = (text_of(f) for f in tomb if text_of(f).startswith("stream:"))
    return {text_of(name) for name in live} | {f.split(":", 1)[1] for f in deleted}


def newest_entry_id(log: str) -> Op[str]:
    """The id of the newest entry of the session log `log`, "0-0" for none."""

    def newest(c: RedisClient) -> object:
        return c.xrevrange(log, "+", "-", count=1)

    found = yield newest
    return text_of(found[0][0]) if found else "0-0"
