"""Screenshots of the web view's main pages for docs/ui.md, from a session made here.

    python scripts/ui_screenshots.py      # writes docs/img/ui-*.png

Starts a private Redis, records a small multi-agent session into it with the recorder, serves
the view and photographs it in headless Chromium (Debian's `chromium`).
"""

from __future__ import annotations

import shutil
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from playwright.sync_api import sync_playwright

import ledger_bus as lb
from ledger_bus import aio
from ledger_bus.dispatch import Board
from ledger_bus.recorder import Recorder
from ledger_bus.server import LocalServer
from ledger_bus.ui.app import create_app
from tests.support.ui import served
from tests.test_ui_browser import FLAGS

OUT = Path(__file__).resolve().parent.parent / "docs" / "img"


def record(store: lb.EventStore) -> None:
    planner = Recorder(store, "launch-42", "planner")
    with planner.run("plan") as run:
        run.message("Split the work: research, then a draft.")
        run.call("search", {"q": "redis streams consumer groups"}, lambda q: ["doc1", "doc2"])
        delegation = run.delegate("writer", "Draft the announcement")
        writer = Recorder(store, "launch-42", "writer")
        with writer.run(delegation.child_run_id, parents=[delegation.call_event_id]) as sub:
            sub.call("draft", {"words": 300}, lambda words: "Today we ...")
        run.finish_delegation(delegation, "ok", "drafted")
    # A call requested and never finished (its process died): the view badges it.
    store.append(
        lb.StreamId("launch-42", f"run-{delegation.child_run_id}"),
        lb.ANY,
        "publish-1",
        [
            {
                "type": "tool_call",
                "agent": "writer",
                "tool": "publish",
                "args": {"channel": "blog"},
                "attempt_id": "publish-1",
                "run_id": delegation.child_run_id,
            }
        ],
    )
    board = Board(store, "launch-42")
    now = datetime.now(UTC)
    board.open("researcher", "Collect prior art", now - timedelta(hours=2), {})
    board.open("reviewer", "Review the draft", now - timedelta(hours=30), {})
    store.group_create("launch-42", "notifier", None)


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    with LocalServer() as server:
        store = lb.connect(server.url)
        record(store)
        app = create_app(lambda: aio.connect(server.url), server.url)
        with served(app) as base, sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, headless=True, args=FLAGS)
            page = browser.new_page(viewport={"width": 1280, "height": 720})
            page.goto(f"{base}/")
            page.screenshot(path=str(OUT / "ui-sessions.png"))
            page.goto(f"{base}/s/launch-42")
            page.wait_for_selector("#live.on")
            page.screenshot(path=str(OUT / "ui-session.png"), full_page=True)
            page.goto(f"{base}/s/launch-42?type=tool_call")
            page.screenshot(path=str(OUT / "ui-filtered.png"))
            browser.close()
        store.close()
    print(f"wrote {OUT}/ui-*.png")


if __name__ == "__main__":
    main()
