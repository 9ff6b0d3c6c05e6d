"""The vocabulary's names, apart from its models (ledger_bus.model.events), so that what only
names event types imports no validator."""

from __future__ import annotations

from typing import Final

EVENT_TYPES: Final = ("message", "tool_call", "tool_result", "mutation")

# Names the ledger sets on every recorded event; a mutation field may not shadow them.
RESERVED_FIELDS: Final = frozenset({"session", "stream", "version", "cursor", "recorded_at"})
