"""The web view served for real: uvicorn on a free loopback port, on a thread of its own; and the
Chromium the browser tests drive, with its flags (scripts/ui_screenshots.py, bench_ui.py use
them too)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import shutil
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import pytest
import uvicorn

from ledger_bus.demo.server import free_port

T = TypeVar("T")

# Debian's package, unless LEDGER_BUS_CHROMIUM names another.
CHROMIUM = os.environ.get("LEDGER_BUS_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
# The browser tests' mark: skipped, saying why, where there is no Chromium.
needs_chromium = pytest.mark.skipif(
    not os.path.exists(CHROMIUM), reason="no chromium: .ci/run installs Debian's package"
)

# As root, with no network beyond loopback: no sandbox, no background fetches.
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@contextmanager
def served(app: Any, port: int | None = None) -> Iterator[str]:
    """The app's base URL while it is served (on `port`, or a free one)."""
    port = port or free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", timeout_graceful_shutdown=1
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the web view did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def view_app(url: str, prefix: str, **options: Any) -> Any:
    """The web view of the ledger at `url` under `prefix`."""
    from ledger_bus import aio
    from ledger_bus.ui.app import create_app

    return create_app(lambda: aio.connect(url, prefix=prefix), url, **options)


def in_thread(make: Callable[[], Awaitable[T]]) -> T:
    """A coroutine run to its end on an event loop of its own, in a thread of its own: what a
    browser test records with an asyncio framework (Playwright runs a loop in the test's
    thread)."""

    async def run() -> T:
        return await make()

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, run()).result()
