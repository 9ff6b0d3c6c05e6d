"""The one retry loop every backend's calls go through: backoff until a deadline, for failures
that pass; a failure that will not pass is final at once (store/ops.py's `retried`, run by the
blocking driver for the backends whose calls are plain functions)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from ledger_bus.model.errors import LedgerError
from ledger_bus.store.ops import call, retried, run

T = TypeVar("T")


def retry_until(
    operation: Callable[[], T],
    timeout: float,
    backend_errors: tuple[type[Exception], ...],
    final: Callable[[Exception], LedgerError | None],
    who: str,
    describe: Callable[[Exception], str] = str,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Call `operation` until it returns, or `timeout` seconds have passed (BackendUnavailable);
    `final` judges each backend error as `retried` does; `sleep` pauses between tries."""
    op = retried(lambda: call(lambda _: operation()), timeout, backend_errors, final, who, describe)
    result: T = run(op, None, sleep)
    return result
