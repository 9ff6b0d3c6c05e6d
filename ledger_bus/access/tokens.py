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
from dataclasses import asdict, dataclass
from typing import Any, Final, Protocol

from ledger_bus.access.identity import Identity
from ledger_bus.model.errors import InvalidInput
from ledger_bus.model.files import replace_whole

logger = logging.getLogger(__name__)

PREFIX: Final = "lbt_"  # a token says what it is, so a scanner for leaked secrets finds one


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class Tokens:
    """The identities of the tokens in a file, by their digests."""

    by_digest: dict[str, Identity]

    @classmethod
    def load(cls, path: str) -> Tokens:
        """The tokens of the file at path (none when it does not exist yet)."""
        if not os.path.exists(path):
            return cls({})
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
            entries = data["tokens"]
            return cls(
                {e["sha256"]: Identity(e["agent"], e["role"], e["sessions"]) for e in entries}
            )
        except (OSError, ValueError, KeyError, TypeError) as err:
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


class TokenFile:
    """The tokens of a file, read again whenever the file has changed, so that a token made
    (or taken out of the file) while a server runs counts from the server's next request. A
    file that cannot be read any more lets nobody in until it can: a server fails closed."""

    def __init__(self, path: str):
        self.path = path
        self._stamp = self._stat()
        self._tokens = Tokens.load(path)  # a file that is no tokens file stops the start

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        # ledger-bus token replaces the file whole: a new inode, whatever the clock says
        return st.st_ino, st.st_mtime_ns, st.st_size

    def identify(self, token: str) -> Identity | None:
        stamp = self._stat()
        if stamp != self._stamp:
            self._stamp = stamp
            try:
                self._tokens = Tokens.load(self.path)
            except InvalidInput as err:
                logger.warning("%s; no token is accepted until it is one again", err)
                self._tokens = Tokens({})
        return self._tokens.identify(token)


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
        entries: list[dict[str, Any]] = [
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
