"""Bearer tokens for the ledger's HTTP faces: each names an identity (an agent, its sessions, a
role). A token is shown once, when it is made; its file keeps only its SHA-256, so the file
read by someone else lets them in nowhere.

The file is JSON: {"tokens": [{"sha256": ..., "agent": ..., "role": ..., "sessions": ...}]}.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import logging
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Final, Protocol

from ledger_bus.access.identity import Identity
from ledger_bus.model.errors import InvalidInput
from ledger_bus.model.files import replace_whole
from ledger_bus.model.jsontext import JSONObject

logger = logging.getLogger(__name__)

PREFIX: Final = "lbt_"  # a token says what it is, so a scanner for leaked secrets finds one
RECHECK_S: Final = 1.0  # a tokens file's content is read again at most this often


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class Tokens:
    """The identities of the tokens in a file, by their digests."""

    by_digest: dict[str, Identity]

    @classmethod
    def load(cls, path: str) -> Tokens:
        """The tokens of the file at path (none when it does not exist yet)."""
        try:
            return cls.parse(_read(path), path)
        except OSError as err:
            raise InvalidInput(f"{path} is not a tokens file: {err}") from None

    @classmethod
    def parse(cls, data: bytes | None, path: str) -> Tokens:
        """The tokens of a file's bytes (None: a file that does not exist yet)."""
        if data is None:
            return cls({})
        try:
            entries = json.loads(data)["tokens"]
            return cls(
                {e["sha256"]: Identity(e["agent"], e["role"], e["sessions"]) for e in entries}
            )
        except (ValueError, KeyError, TypeError) as err:
            raise InvalidInput(f"{path} is not a tokens file: {err}") from None

    def identify(self, token: str) -> Identity | None:
        """The identity a token names, or None; every digest is compared, in constant time."""
        digest = _digest(token)
        found = None
        for known, who in self.by_digest.items():
            if hmac.compare_digest(known, digest):
                found = who
        return found


class Identifies(Protocol):
    """What a server asks of its tokens: the identity a token names, or None."""

    def identify(self, token: str) -> Identity | None: ...


def _read(path: str) -> bytes | None:
    """A file's bytes; None when it does not exist."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


class TokenFile:
    """The tokens of a file, read again whenever the file has changed, so that a token made
    (or taken out of the file) while a server runs counts from the server's next request. A
    file that cannot be read any more lets nobody in until it can: a server fails closed.

    A change is seen by the file's inode, time and size, on every look; and by its content, read
    again at most once every RECHECK_S: an edit in place that keeps the size and puts the time
    back (a token's role changed from writer to reader, a digest spoiled) counts from then."""

    def __init__(self, path: str, clock: Callable[[], float] = time.monotonic):
        self.path = path
        self.clock = clock
        self._stamp = self._stat()
        try:
            self._content = _read(path)
        except OSError as err:
            raise InvalidInput(f"{path} is not a tokens file: {err}") from None
        self._tokens = Tokens.parse(self._content, path)  # no tokens file: no start
        self._checked = clock()

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        # ledger-bus token replaces the file whole: a new inode, whatever the clock says
        return st.st_ino, st.st_mtime_ns, st.st_size

    def identify(self, token: str) -> Identity | None:
        stamp, now = self._stat(), self.clock()
        if stamp != self._stamp or now - self._checked >= RECHECK_S:
            self._checked = now
            self._look_again(stamp)
        return self._tokens.identify(token)

    def _look_again(self, stamp: tuple[int, int, int] | None) -> None:
        try:
            content = _read(self.path)
        except OSError as err:
            content = f"unreadable: {err}".encode()  # never a tokens file: nobody gets in
        if (stamp, content) == (self._stamp, self._content):
            return
        self._stamp, self._content = stamp, content
        try:
            self._tokens = Tokens.parse(content, self.path)
        except InvalidInput as err:
            logger.warning("%s; no token is accepted until it is one again", err)
            self._tokens = Tokens({})


def add_token(path: str, who: Identity) -> str:
    """A new token for `who`, its digest added to the file at path (mode 0600, made when
    missing); the token itself is returned, and kept nowhere. Two at once both land: the file
    is read and written under a lock."""
    token = PREFIX + secrets.token_urlsafe(32)
    try:
        lock = os.open(path + ".lock", os.O_CREAT | os.O_WRONLY, 0o600)
    except OSError as err:
        raise InvalidInput(f"cannot write {path!r}: {err.strerror}") from None
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.exists(path):
            # Made 0600 before anything is in it; the replacement below keeps its mode.
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
            with open(path, "w", encoding="utf-8") as f:
                json.dump({"tokens": []}, f)
        tokens = Tokens.load(path)
        entries: list[JSONObject] = [
            {"sha256": digest, **asdict(known)} for digest, known in tokens.by_digest.items()
        ]
        entries.append({"sha256": _digest(token), **asdict(who)})
        with replace_whole(path) as f:
            json.dump({"tokens": entries}, f, indent=1)
            f.write("\n")
        os.chmod(path, 0o600)
    finally:
        os.close(lock)  # and with it the lock
    return token
