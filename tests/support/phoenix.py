"""A real Arize Phoenix (`phoenix serve`), started by the test on free loopback ports with a
working directory of its own, and its spans read back from its REST API."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from ledger_bus.demo.server import free_port


@contextmanager
def phoenix(folder: Path) -> Iterator[str]:
    """The base URL of a Phoenix serving OTLP/HTTP at /v1/traces, stopped after."""
    program = shutil.which("phoenix", path=str(Path(sys.executable).parent))
    if program is None:
        pytest.fail("arize-phoenix is not installed: `make install` installs the dev extra")
    port, grpc = free_port(), free_port()
    env = {
        **os.environ,
        "PHOENIX_WORKING_DIR": str(folder),
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(grpc),
        "PHOENIX_TELEMETRY_ENABLED": "false",
    }
    log = (folder / "phoenix.log").open("w")
    proc = subprocess.Popen([program, "serve"], env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(
                    f"phoenix did not start: {(folder / 'phoenix.log').read_text()[-2000:]}"
                )
            time.sleep(0.25)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()


def phoenix_spans(url: str, wanted: int | None = None, timeout: float = 20) -> list[dict[str, Any]]:
    """Every span of the default project (waiting, with `wanted`, until that many are in:
    Phoenix takes spans in the background)."""
    deadline = time.monotonic() + timeout
    while True:
        found: list[dict[str, Any]] = []
        cursor = None
        while True:
            params: dict[str, Any] = {"limit": 1000}
            if cursor:
                params["cursor"] = cursor
            page = httpx.get(f"{url}/v1/projects/default/spans", params=params, timeout=10)
            if page.status_code == 404:  # no project yet: nothing taken
                break
            page.raise_for_status()
            body = page.json()
            found += body["data"]
            cursor = body.get("next_cursor")
            if not cursor:
                break
        if wanted is None or len(found) >= wanted or time.monotonic() > deadline:
            return found
        time.sleep(0.25)
