"""The browser the web view's browser tests drive (headless Chromium through Playwright), a page
of it per test, and the view served over the test's ledger."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.ui import CHROMIUM, FLAGS, served, view_app


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context()
    opened = context.new_page()
    dialogs: list[str] = []

    def dismissed(dialog: Any) -> None:  # an alert() would mean a payload ran
        dialogs.append(dialog.message)
        dialog.dismiss()

    opened.on("dialog", dismissed)
    opened.dialogs = dialogs
    yield opened
    context.close()


@pytest.fixture
def base(redis_url: str, prefix: str) -> Iterator[str]:
    with served(view_app(redis_url, prefix)) as url:
        yield url
