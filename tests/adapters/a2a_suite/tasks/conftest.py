"""LEDGER-BUS ADDITION (README.md): every test of this folder once on the SDK's in-memory store
(`sdk`) and once on LedgerTaskStore over each ledger backend."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .._ledger import BACKENDS, Chosen


@pytest.fixture(autouse=True, params=["sdk", *BACKENDS])
def backend(request: pytest.FixtureRequest) -> Iterator[str]:
    Chosen.backend = request.param
    yield request.param
    Chosen.backend = "sdk"
