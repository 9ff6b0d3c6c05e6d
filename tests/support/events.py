"""Events as tests write them: a message, a tool call, its result (the contract suite's own)."""

from __future__ import annotations

from ledger_bus.testing.events import call, msg, result

__all__ = ["call", "msg", "result"]
