"""The Lua scripts (package data in ledger_bus/store/lua/), each with the SHA1 EVALSHA calls it
by."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import resources
from typing import Final


@dataclass(frozen=True, slots=True)
class LuaScript:
    """A script the store runs by its sha, loading its text where the server lacks it."""

    text: str
    sha: str


def load_script(name: str) -> LuaScript:
    text = resources.files("ledger_bus.store").joinpath(f"lua/{name}.lua").read_text("utf-8")
    return LuaScript(text, hashlib.sha1(text.encode()).hexdigest())


APPEND: Final = load_script("append")
RESTORE: Final = load_script("restore")
LEASE: Final = load_script("lease")
FORGET_SESSION: Final = load_script("forget_session")
PRUNE_CONSUMERS: Final = load_script("prune_consumers")
DELETE_SESSION: Final = load_script("delete_session")
DELETE_STREAM: Final = load_script("delete_stream")
ARCHIVE_FINISH: Final = load_script("archive_finish")
ARCHIVE_ABANDON: Final = load_script("archive_abandon")
ARTIFACT_PUT: Final = load_script("artifact_put")
READ_STREAM: Final = load_script("read_stream")
