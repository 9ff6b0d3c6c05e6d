"""Bounds (spec 3.12), a capability of a store: a stream declared to keep only its newest events,
trimmed a whole append at a time, with the append_ids of what it trimmed kept a while so that a
late retry still deduplicates."""

from __future__ import annotations

import abc
from typing import ClassVar, Final, TypeVar

from ledger_bus.model.errors import InvalidInput
from ledger_bus.model.ids import StreamId
from ledger_bus.model.records import Bound
from ledger_bus.store.steps import Op, operation

T = TypeVar("T")
# How long a bounded stream keeps the append_id of an append it trimmed, unless declared otherwise.
DEFAULT_DEDUP_WINDOW_MS: Final = 86_400_000


class Bounds(abc.ABC):
    """Streams that keep only their newest events."""

    what: ClassVar[str] = "bounded streams"

    @abc.abstractmethod
    def run_op(self, op: Op[T]) -> T:
        """Run an operation to its end (the store's own driver: Log.run_op)."""

    def bound_stream_op(
        self,
        stream: StreamId,
        keep: int | None,
        dedup_window_ms: int = DEFAULT_DEDUP_WINDOW_MS,
        *,
        only: str | None = None,
    ) -> Op[None]:
        """Declare `stream` bounded (spec 3.12): from its next append on, it keeps at least its
        newest `keep` events, trimming older ones a whole append at a time (with the references
        they held to artifacts); the append_id of a trimmed append is kept `dedup_window_ms`
        after it committed, so a retry within that window still deduplicates, and one after it
        appends anew. `keep=None`: unbounded again (what was trimmed stays trimmed). For streams
        whose newest events alone matter, such as a framework's checkpoints: a stream that
        carries tool calls must keep them for the reconciler.

        `only`: the bound trims at appends whose append_id begins with it, and at no other. A
        rewrite (append what stays, trim what came before) bounds its stream `only` for its own
        appends: a process killed inside it leaves a bound that trims nothing written after."""
        if not isinstance(stream, StreamId):
            raise InvalidInput(f"stream must be a StreamId, got {stream!r}")
        if keep is not None and (not isinstance(keep, int) or isinstance(keep, bool) or keep < 1):
            raise InvalidInput(f"keep must be an int >= 1 or None, got {keep!r}")
        if (
            not isinstance(dedup_window_ms, int)
            or isinstance(dedup_window_ms, bool)
            or dedup_window_ms < 0
        ):
            raise InvalidInput(f"dedup_window_ms must be an int >= 0, got {dedup_window_ms!r}")
        if only is not None and (
            not isinstance(only, str) or not only or any(c.isspace() for c in only)
        ):
            raise InvalidInput(f"only must be a non-empty string without spaces, got {only!r}")
        bound = None if keep is None else Bound(keep, dedup_window_ms, only)
        yield from self._set_bound(stream, bound)

    bound_stream = operation(bound_stream_op)

    def stream_bound_op(self, stream: StreamId) -> Op[Bound | None]:
        """What `stream` keeps, if it was declared bounded."""
        if not isinstance(stream, StreamId):
            raise InvalidInput(f"stream must be a StreamId, got {stream!r}")
        return (yield from self._bound(stream))

    stream_bound = operation(stream_bound_op)

    # -- what a backend provides ----------------------------------------------------------------

    @abc.abstractmethod
    def _set_bound(self, stream: StreamId, bound: Bound | None) -> Op[None]: ...

    @abc.abstractmethod
    def _bound(self, stream: StreamId) -> Op[Bound | None]: ...
