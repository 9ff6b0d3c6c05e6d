"""The web view served for real: uvicorn on a free loopback port, on a thread of its own; and the
flags Chromium runs with for the browser tests (and scripts/ui_screenshots.py, bench_ui.py)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

from ledger_bus.demo.server import free_port

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
