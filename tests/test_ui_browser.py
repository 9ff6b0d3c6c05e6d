"""The web view end to end in headless Chromium (Debian's `chromium`, driven by Playwright
through its executable path): what a person sees, live."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

import ledger_bus as lb
from ledger_bus import aio
from ledger_bus.store.base import EventStore
from ledger_bus.ui.app import create_app
from tests.support.ui import served

CHROMIUM = os.environ.get("LEDGER_BUS_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
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

pytestmark = pytest.mark.skipif(
    not os.path.exists(CHROMIUM), reason="no chromium: .ci/run installs Debian's package"
)


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
def store(redis_url: str, prefix: str) -> Iterator[EventStore]:
    s = lb.connect(redis_url, prefix=prefix)
    yield s
    s.close()


@pytest.fixture
def base(redis_url: str, prefix: str) -> Iterator[str]:
    with served(create_app(lambda: aio.connect(redis_url, prefix=prefix), redis_url)) as url:
        yield url


def msg(body: str, agent: str = "a") -> dict[str, Any]:
    return {"type": "message", "agent": agent, "body": body}


def test_a_filter_changes_what_is_visible(store: EventStore, base: str, page: Any) -> None:
    store.append(
        lb.StreamId("f", "main"), 0, "a1", [msg("one", "x"), msg("two", "y"), msg("three", "x")]
    )
    page.goto(f"{base}/s/f")
    assert page.locator("#timeline tbody tr").count() == 3
    assert page.locator('#open tr[data-attempt="t1"]').count() == 0, "no longer listed as open"
    page.fill("input[name=agent]", "x")
    page.click("#filters button")
    page.wait_for_url("**agent=x**")
    texts = page.locator("#timeline tbody td.text").all_inner_texts()
    assert texts == ["one", "three"]


def test_an_appended_event_appears_without_reload_and_a_badge_clears_when_its_result_lands(
    store: EventStore, base: str, page: Any
) -> None:
    ref = lb.StreamId("l", "main")
    store.append(
        ref,
        0,
        "a1",
        [{"type": "tool_call", "agent": "a", "tool": "search", "args": {}, "attempt_id": "t1"}],
    )
    page.goto(f"{base}/s/l")
    page.wait_for_selector("#live.on")
    assert page.locator('#timeline tr[data-attempt="t1"] .badge').inner_text() == "unresolved"
    assert page.locator('#open tr[data-attempt="t1"]').count() == 1
    store.append(ref, 1, "a2", [msg("news")])
    page.wait_for_selector("td.text:text-is('news')")
    store.append(
        ref,
        2,
        "a3",
        [
            {
                "type": "tool_result",
                "agent": "a",
                "tool": "search",
                "attempt_id": "t1",
                "status": "ok",
                "result": 1,
            }
        ],
    )
    call_badge = 'tr[data-type="tool_call"][data-attempt="t1"] .badge'
    page.wait_for_function(f"() => document.querySelector('{call_badge}').textContent === 'ok'")
    assert page.locator("#timeline tbody tr").count() == 3
    assert page.locator('#open tr[data-attempt="t1"]').count() == 0, "no longer listed as open"


def test_script_in_a_payload_shows_as_text(store: EventStore, base: str, page: Any) -> None:
    hostile = "<script>alert('owned')</script><img src=x onerror=\"alert('img')\">"
    store.append(lb.StreamId("x", "main"), 0, "a1", [msg(hostile)])
    page.goto(f"{base}/s/x")
    page.wait_for_selector("#live.on")
    store.append(lb.StreamId("x", "main"), 1, "a2", [msg(hostile)])  # and live
    page.wait_for_function("() => document.querySelectorAll('#timeline tbody tr').length === 2")
    assert page.locator("#timeline tbody td.text").all_inner_texts() == [hostile, hostile]
    assert page.dialogs == []
    assert page.locator("#timeline img").count() == 0
