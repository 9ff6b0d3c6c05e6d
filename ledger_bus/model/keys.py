"""The idempotency key of a logical call (spec/ledger-v1.md, 7.1).

A tool that acts on another system (a payment API, a ticket system, a cloud API) hands that
system a key so that a second attempt at the same call does not act twice. The key must be the
same for every attempt at one logical call, whichever process or language makes it, and differ
between two calls with the same arguments; so it is derived from where the call stands in the
ledger (session, run, the run id's incarnation, step) and never from the attempt or the process.
"""

from __future__ import annotations

import hashlib
from typing import Final

KEY_PREFIX: Final = "lb1-"
_DOMAIN: Final = "ledger-bus idempotency key"


def idempotency_key(session_id: str, run_id: str, step_id: str, incarnation: int = 1) -> str:
    """`lb1-` and the first 32 hex digits of SHA-256 over the domain, session, run, step and
    the decimal incarnation joined by U+001F (which no identifier contains)."""
    text = "\x1f".join((_DOMAIN, session_id, run_id, step_id, str(incarnation)))
    return KEY_PREFIX + hashlib.sha256(text.encode()).hexdigest()[:32]
