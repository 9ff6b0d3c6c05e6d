"""The one retry loop every backend's calls go through: backoff until a deadline, for failures
that pass; a failure that will not pass is final at once."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from ledger_bus.errors import BackendUnavailable, LedgerError

T = TypeVar("T")


def retry_until(
    operation: Callable[[], T],
    timeout: float,
    backend_errors: tuple[type[Exception], ...],
    final: Callable[[Exception], LedgerError | None],
    who: str,
    describe: Callable[[Exception], str] = str,
) -> T:
    """Call `operation` until it returns, or `timeout` seconds have passed (BackendUnavailable).

    Only `backend_errors` are judged; anything else propagates as it is. `final(err)` says what
    a backend error means: a LedgerError to raise at once (a refusal that retrying as it is will
    not change), or None for a failure worth trying again (a lost connection, "not now").
    """
    deadline = time.monotonic() + timeout
    delay = 0.02
    while True:
        try:
            return operation()
        except backend_errors as err:
            verdict = final(err)
            if verdict is not None:
                raise verdict from err
            if time.monotonic() + delay > deadline:
                raise BackendUnavailable(
                    f"{who} did not answer within {timeout:g}s: {describe(err)}"
                ) from err
        time.sleep(delay)
        delay = min(delay * 2, 0.5)
