"""Screenshots of the web view's main pages for docs/ui.md, from a session made here.

    python scripts/ui_screenshots.py      # writes docs/img/ui-*.png

Starts a private Redis, records a small multi-agent session into it with the recorder, a
LangGraph thread and a Google ADK session (with the dev extras' frameworks), serves the view and
photographs it in headless Chromium (Debian's `chromium`).
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from playwright.sync_api import sync_playwright

import ledger_bus as lb
from ledger_bus import aio
from ledger_bus.agent.recorder import Recorder
from ledger_bus.board.dispatches import Board
from ledger_bus.demo.server import LocalServer
from ledger_bus.operations.reconciler import Reconciler, ReconcilerConfig
from ledger_bus.ui.app import create_app, session_path
from tests.support.ui import FLAGS, served

OUT = Path(__file__).resolve().parent.parent / "docs" / "img"


def model(run: Any, said: str, tokens: tuple[int, int], seconds: float) -> None:
    """A model call as the recorder writes one (the tool `model`), then what it said."""

    def answer(model: str) -> dict[str, Any]:
        time.sleep(seconds)
        return {"model": model, "usage": {"input_tokens": tokens[0], "output_tokens": tokens[1]}}

    run.call("model", {"model": "gpt-4.1-mini"}, answer)
    run.message(said)


def slow(seconds: float, value: Any) -> Callable[..., Any]:
    def tool(**_: Any) -> Any:
        time.sleep(seconds)
        return value

    return tool


def record(store: lb.EventStore) -> None:
    session = "launch-42"
    store.append(
        lb.StreamId(session, "main"),
        lb.ANY,
        "ask",
        [{"type": "message", "agent": "user", "body": "Announce the 2.0 release on the blog."}],
    )
    planner = Recorder(store, session, "planner")
    with planner.run("plan") as run:
        model(run, "Research first, then a draft.", (412, 38), 0.35)
        run.call("search", {"q": "redis streams consumer groups"}, slow(0.12, ["doc1", "doc2"]))
        research = run.delegate("researcher", "Collect prior art")
        with Recorder(store, session, "researcher").run(research.child_run_id) as sub:
            model(sub, "Two sources worth citing.", (980, 120), 0.5)
            sub.call("fetch", {"url": "https://example.com/a"}, slow(0.2, "<html>…"))
            with contextlib.suppress(RuntimeError):  # recorded as an error
                sub.call("fetch", {"url": "https://example.com/b"}, _fail)
        run.finish_delegation(research, "ok", "two sources")
        writing = run.delegate("writer", "Draft the announcement")
        with Recorder(store, session, "writer").run(writing.child_run_id) as sub:
            model(sub, "A 300-word draft.", (1530, 410), 0.9)
            sub.call("draft", {"words": 300}, slow(0.3, "Today we ..."))
        run.finish_delegation(writing, "ok", "drafted")
        model(run, "Ready to publish.", (2100, 22), 0.25)
    # A call whose process died before its result: the reconciler flags it.
    store.append(
        lb.StreamId(session, f"run-{writing.child_run_id}"),
        lb.ANY,
        "publish-1",
        [
            {
                "type": "tool_call",
                "agent": "writer",
                "tool": "publish",
                "args": {"channel": "blog"},
                "attempt_id": "publish-1",
                "run_id": writing.child_run_id,
            }
        ],
    )
    Reconciler(store, ReconcilerConfig(grace_s=0)).run_pass()
    # One still open: requested, no result yet.
    store.append(
        lb.StreamId(session, "main"),
        lb.ANY,
        "notify-1",
        [
            {
                "type": "tool_call",
                "agent": "planner",
                "tool": "notify",
                "args": {"team": "docs"},
                "attempt_id": "notify-1",
            }
        ],
    )
    board = Board(store, session)
    now = datetime.now(UTC)
    board.open("researcher", "Collect prior art", now - timedelta(hours=2), {})
    board.open("reviewer", "Review the draft", now - timedelta(hours=30), {})
    store.group_create(session, "notifier", None)


def _fail(**_: Any) -> Any:
    raise RuntimeError("503 from example.com")


def thread(store: lb.EventStore, folder: Path) -> None:
    """A LangGraph thread: a question, two tools, the answer."""
    from ledger_bus.adapters.langgraph import LedgerSaver
    from tests.support.graphs import ask, build

    graph = build(LedgerSaver(store), folder)
    question, config = ask("support-chat")
    graph.invoke(question, config)


def adk_session(store: lb.EventStore) -> str:
    """Google ADK's Runner on the ledger: ann's four turns, one transferred to billing (the
    scenario of the adapter's tests); the ledger session of hers."""
    import asyncio

    from ledger_bus.adapters.adk import LedgerSessionService
    from ledger_bus.adapters.adk.layout import session_of
    from tests.support.adk import APP, scenario

    asyncio.run(scenario(LedgerSessionService(store)))
    return session_of(APP, "ann", "s1")


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    with LocalServer() as server:
        store = lb.connect(server.url)
        record(store)
        with tempfile.TemporaryDirectory() as folder:
            thread(store, Path(folder))
        adk = adk_session(store)
        app = create_app(lambda: aio.connect(server.url), server.url)
        with served(app) as base, sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, headless=True, args=FLAGS)
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(f"{base}/")
            page.screenshot(path=str(OUT / "ui-sessions.png"))
            page.goto(f"{base}/s/launch-42")
            page.wait_for_selector("#trace[data-ready]")
            page.wait_for_selector("#live.on")
            page.screenshot(path=str(OUT / "ui-trace.png"))
            page.click('.wf-row[data-tool="draft"] .wf-bar')
            page.wait_for_function(
                "() => !document.querySelector('#detail pre').textContent.startsWith('…')"
            )
            page.screenshot(path=str(OUT / "ui-detail.png"))
            page.goto(f"{base}/s/launch-42")
            page.wait_for_selector("#trace[data-ready]")
            page.locator("h2:text-is('Events')").scroll_into_view_if_needed()
            page.screenshot(path=str(OUT / "ui-session.png"), full_page=True)
            page.goto(f"{base}/s/support-chat")
            page.wait_for_selector("#trace[data-ready]")
            page.click("#tab-conversation")
            page.screenshot(path=str(OUT / "ui-conversation.png"))
            page.goto(f"{base}{session_path(adk)}")
            page.wait_for_selector("#trace[data-ready]")
            page.screenshot(path=str(OUT / "ui-adk.png"))
            browser.close()
        store.close()
    print(f"wrote {OUT}/ui-*.png")


if __name__ == "__main__":
    main()
