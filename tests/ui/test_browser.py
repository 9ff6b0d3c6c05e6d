"""The web view end to end in headless Chromium (Debian's `chromium`, driven by Playwright
through its executable path): what a person sees, live."""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import ledger_bus as lb
from ledger_bus.agent.recorder import Recorder
from ledger_bus.board.dispatches import Board
from ledger_bus.demo.server import free_port
from ledger_bus.model.ids import CURSOR_ZERO, cursor_ms
from ledger_bus.model.records import RecordedEvent
from ledger_bus.store.base import EventStore
from tests.support.events import call, msg, result
from tests.support.ui import needs_chromium, served, view_app

pytestmark = needs_chromium


def test_a_filter_changes_what_is_visible(redis_store: EventStore, base: str, page: Any) -> None:
    redis_store.append(
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
    redis_store: EventStore, base: str, page: Any
) -> None:
    ref = lb.StreamId("l", "main")
    redis_store.append(
        ref,
        0,
        "a1",
        [{"type": "tool_call", "agent": "a", "tool": "search", "args": {}, "attempt_id": "t1"}],
    )
    page.goto(f"{base}/s/l")
    page.wait_for_selector("#live.on")
    assert page.locator('#timeline tr[data-attempt="t1"] .badge').inner_text() == "unresolved"
    assert page.locator('#open tr[data-attempt="t1"]').count() == 1
    redis_store.append(ref, 1, "a2", [msg("news")])
    page.wait_for_selector("td.text:text-is('news')")
    redis_store.append(
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
    # The result joined its call's row, as a reload shows it: no row of its own.
    live_rows = page.locator("#timeline tbody tr").all_inner_texts()
    assert len(live_rows) == 2
    # its duration: ms, or s on a machine slow enough that the result came a second later
    assert re.search(r"ok \d+(\.\d+)? m?s", page.locator(call_badge + " >> xpath=..").inner_text())
    assert page.locator('#open tr[data-attempt="t1"]').count() == 0, "no longer listed as open"
    page.reload()
    assert page.locator("#timeline tbody tr").all_inner_texts() == live_rows


def test_script_in_a_payload_shows_as_text(redis_store: EventStore, base: str, page: Any) -> None:
    hostile = "<script>alert('owned')</script><img src=x onerror=\"alert('img')\">"
    redis_store.append(lb.StreamId("x", "main"), 0, "a1", [msg(hostile)])
    page.goto(f"{base}/s/x")
    page.wait_for_selector("#live.on")
    redis_store.append(lb.StreamId("x", "main"), 1, "a2", [msg(hostile)])  # and live
    page.wait_for_function("() => document.querySelectorAll('#timeline tbody tr').length === 2")
    assert page.locator("#timeline tbody td.text").all_inner_texts() == [hostile, hostile]
    assert page.dialogs == []
    assert page.locator("#timeline img").count() == 0


def test_a_server_restart_adds_no_duplicate_row(
    redis_url: str, prefix: str, redis_store: EventStore, page: Any
) -> None:
    ref = lb.StreamId("r", "main")
    redis_store.append(ref, 0, "a0", [msg("first")])
    port = free_port()

    def app() -> Any:
        return view_app(redis_url, prefix)

    with served(app(), port) as url:
        page.goto(f"{url}/s/r")
        page.wait_for_selector("#live.on")
        redis_store.append(ref, 1, "a1", [msg("while up")])
        page.wait_for_selector("td.text:text-is('while up')")
    page.wait_for_selector("#live.off")
    redis_store.append(ref, 2, "a2", [msg("while down 1"), msg("while down 2")])
    with served(app(), port):
        page.wait_for_selector("td.text:text-is('while down 2')", timeout=20_000)
        redis_store.append(ref, 4, "a3", [msg("after")])
        page.wait_for_selector("td.text:text-is('after')")
    texts = page.locator("#timeline tbody td.text").all_inner_texts()
    assert texts == ["first", "while up", "while down 1", "while down 2", "after"]
    assert page.evaluate("document.body.dataset.received") == "4", "each row arrived once"


def test_parent_to_child_to_parent_navigation(
    redis_store: EventStore, base: str, page: Any
) -> None:
    planner = Recorder(redis_store, "nav", "planner")
    with planner.run("plan") as run:
        delegation = run.delegate("writer", "Draft it")
        with Recorder(redis_store, "nav", "writer").run(delegation.child_run_id) as child:
            child.message("in the child")
        run.finish_delegation(delegation, "ok", "done")
    page.goto(f"{base}/s/nav")
    page.click(f'#runs li[data-run="plan"] a.child:text-is("{delegation.child_run_id}")')
    page.wait_for_url(f"**run={delegation.child_run_id}")
    assert "in the child" in page.locator("#timeline").inner_text()
    page.click(f'#runs li[data-run="{delegation.child_run_id}"] a.parent')
    page.wait_for_url("**run=plan")
    assert set(page.locator("#timeline tbody tr td:nth-child(4)").all_inner_texts()) == {"plan"}


def test_lag_falls_on_the_open_page_when_a_consumer_reads_and_acks(
    redis_url: str, prefix: str, redis_store: EventStore, page: Any
) -> None:
    ref = lb.StreamId("lag", "main")
    redis_store.append(ref, 0, "a0", [msg("a"), msg("b"), msg("c")])
    redis_store.group_create("lag", "workers", CURSOR_ZERO)
    app = view_app(redis_url, prefix, refresh_ms=200)
    with served(app) as url:
        page.goto(f"{url}/s/lag")
        lag = page.locator('#groups tr[data-group="workers"] td.lag')
        assert lag.inner_text() == "3"
        delivered = redis_store.group_read("lag", "workers", "c1", 10, None)
        redis_store.group_ack("lag", "workers", [d.entry_id for d in delivered])
        page.wait_for_function(
            """() => document.querySelector('#groups tr[data-group="workers"] td.lag')"""
            """.textContent === '0'"""
        )


def test_staleness_follows_the_injected_clock(
    redis_url: str, prefix: str, redis_store: EventStore, page: Any
) -> None:
    t0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
    dispatch = Board(redis_store, "stale").open("writer", "Draft", t0, {})
    moment = [t0 + timedelta(hours=2)]
    app = view_app(redis_url, prefix, clock=lambda: moment[0], refresh_ms=200)
    with served(app) as url:
        page.goto(f"{url}/s/stale")
        row = page.locator(f'#board tr[data-dispatch="{dispatch}"]')
        assert row.get_attribute("data-window") == "live"
        moment[0] = t0 + timedelta(hours=26)
        page.wait_for_selector(f'#board tr[data-dispatch="{dispatch}"][data-window="stale"]')


def test_a_5000_event_session_pages_and_first_paints(
    redis_store: EventStore, base: str, page: Any
) -> None:
    ref = lb.StreamId("big", "main")
    for n in range(50):
        redis_store.append(ref, lb.ANY, f"a{n}", [msg(f"m{n * 100 + i}") for i in range(100)])
    page.goto(f"{base}/s/big")
    assert page.locator("#timeline tbody tr").count() == 100, "a page, not the session"
    assert page.locator("#timeline tbody td.text").last.inner_text() == "m4999"
    # How long it took is reported, never asserted (scripts/bench_ui.py measures it).
    loaded = page.evaluate("performance.getEntriesByType('navigation')[0].domContentLoadedEventEnd")
    assert loaded > 0
    print(f"5,000-event session: first page's DOM ready after {loaded:.0f} ms")
    page.click("#older")
    assert page.locator("#timeline tbody td.text").last.inner_text() == "m4899"


def test_the_page_follows_new_rows_only_while_scrolled_to_the_bottom(
    redis_store: EventStore, base: str, page: Any
) -> None:
    ref = lb.StreamId("scroll", "main")
    redis_store.append(ref, 0, "a0", [msg(f"m{n}") for n in range(100)])
    page.set_viewport_size({"width": 1000, "height": 400})
    page.goto(f"{base}/s/scroll")
    page.wait_for_selector("#live.on")
    page.evaluate("document.getElementById('end').scrollIntoView({block: 'end'})")
    page.wait_for_timeout(100)
    redis_store.append(ref, 100, "a1", [msg("followed")])
    page.wait_for_selector("td.text:text-is('followed')")
    page.wait_for_function(
        "() => window.innerHeight + window.scrollY >= document.body.scrollHeight - 60"
        " || document.getElementById('end').getBoundingClientRect().top <= window.innerHeight"
    )
    page.evaluate("window.scrollTo(0, 0)")
    page.wait_for_timeout(100)
    redis_store.append(ref, 101, "a2", [msg("not followed")])
    page.wait_for_selector("td.text:text-is('not followed')")
    page.wait_for_timeout(200)
    assert page.evaluate("window.scrollY") == 0, "a reader scrolled up is left where they are"


# What agents write, at its worst: markup, script URLs, bidi overrides, a megabyte, deep JSON.
HOSTILE = [
    "<script>alert('s')</script>",
    '"><img src=x onerror="alert(\'i\')">',
    "javascript:alert('j')",
    "'-alert('q')-'",
    "invoice\u202eevil\u202cfdp.exe",
    "</td></tr></table><svg onload=alert('v')>",
]
HOSTILE_IDS = [
    "<script>alert('s')</script>",
    '"><img/src=x/onerror=alert(1)>',
    "javascript:alert(2)",
    "team/<b>alpha</b>",
    "\u202eexe.txt",
]


def deep_json(levels: int) -> object:
    value: object = "bottom"
    for _ in range(levels):
        value = {"a": [value]}
    return value


def test_what_agents_write_runs_no_script_on_any_page_and_every_page_loads(
    redis_store: EventStore, base: str, page: Any
) -> None:
    # Given sessions whose ids, streams, agents, tools, args, bodies and mutation fields carry
    # markup, script URLs, bidi overrides, a megabyte with no space and deep JSON
    page.add_init_script(
        "window.__calls = 0; for (const f of ['alert', 'confirm', 'prompt'])"
        " window[f] = () => { window.__calls += 1; };"
    )
    for n, session in enumerate(HOSTILE_IDS):
        events: list[dict[str, Any]] = []
        for text in HOSTILE:
            events += [
                {"type": "message", "agent": f"a{text}"[:200].replace(" ", "_"), "body": text},
                {
                    "type": "tool_call",
                    "agent": "a",
                    "tool": text.replace(" ", "_")[:100],
                    "args": {text: text, "deep": deep_json(40)},
                    "attempt_id": f"c{len(events)}",
                },
                {"type": "mutation", "agent": "a", "kind": text, text[:20]: text},
            ]
        events.append({"type": "message", "agent": "a", "body": "B" * (1 << 20)})
        stream = HOSTILE_IDS[(n + 1) % len(HOSTILE_IDS)].replace("/", "_")
        redis_store.append(lb.StreamId(session, stream), lb.ANY, "hostile", events)

    # When every session is opened from its link on the list, and an event and the panels of each
    page.goto(base)
    links = page.eval_on_selector_all(
        "a[href^='/s/']", "els => [...new Set(els.map(e => e.getAttribute('href')))]"
    )
    assert len(links) == len(HOSTILE_IDS)
    for link in links:
        page.goto(base + link)
        page.wait_for_selector("#timeline tbody tr")
        assert page.locator("#timeline tbody tr").count() == 3 * len(HOSTILE) + 1
        # the megabyte is cut on the timeline (its event's page has it whole)
        longest = page.evaluate(
            "() => Math.max(...[...document.querySelectorAll('#timeline td.text')]"
            ".map(td => td.textContent.length))"
        )
        assert longest < 3_000
        event_link = page.locator("#timeline tbody tr td.mono a").last.get_attribute("href")
        page.goto(base + event_link)
        assert len(page.locator("#event").inner_text()) > 1 << 20
        page.goto(base + link + "/panels")

        assert page.evaluate("() => window.__calls") == 0

        # Then no script of theirs ran, no element of theirs was made, no link of theirs is live
        page.goto(base + link)
        assert page.evaluate("() => window.__calls") == 0
        assert page.locator("#timeline img, #timeline svg, #timeline script").count() == 0
        assert page.locator("a[href^='javascript:' i]").count() == 0
        # and bidi overrides show by name, never reordering the text around them
        assert "\u202e" not in page.locator("body").inner_text()
    assert page.dialogs == []


# -- the trace view ------------------------------------------------------------------------------


def trace(page: Any, url: str) -> None:
    page.goto(url)
    page.wait_for_selector("#trace[data-ready]")


def detail_read(page: Any) -> None:
    """Wait until the detail panel has read the events it shows."""
    page.wait_for_function(
        "() => [...document.querySelectorAll('#detail pre')]"
        ".every(p => p.textContent.startsWith('{'))"
    )


def bar_width(page: Any, selector: str) -> float:
    box = page.locator(selector).bounding_box()
    assert box is not None, selector
    return float(box["width"])


def test_the_waterfall_shows_each_call_as_a_bar_with_its_duration_under_its_run(
    redis_store: EventStore, base: str, page: Any
) -> None:
    # Given a run whose tool call took about 150 ms and whose model call reported its tokens
    recorder = Recorder(redis_store, "wf", "planner")
    with recorder.run("plan") as run:

        def answer(model: str) -> dict[str, Any]:
            return {"model": model, "usage": {"input_tokens": 120, "output_tokens": 7}}

        run.call("model", {"model": "m-1"}, answer)
        run.message("let me look")

        def search(q: str) -> str:
            time.sleep(0.15)
            return "found"

        run.call("search", {"q": "x"}, search)
    trace(page, f"{base}/s/wf")
    # Then the run is a row of the tree, its calls under it, each a bar with its duration
    assert page.locator('.wf-row.kind-run[data-run="plan"]').count() == 1
    row = page.locator('.wf-row.kind-tool[data-tool="search"]')
    assert row.get_attribute("data-run") == "plan"
    assert row.get_attribute("data-status") == "ok"
    took = int(row.get_attribute("data-duration-ms"))
    assert 150 <= took < 5_000
    assert re.fullmatch(r"search · \d+ ms", row.locator(".wf-dur").inner_text())
    assert bar_width(page, '.wf-row[data-tool="search"] .wf-bar') > 10
    model = page.locator(".wf-row.kind-model")
    assert "120 in · 7 out tokens" in model.locator(".wf-dur").inner_text()
    # And a click shows the event and its pair
    page.click('.wf-row[data-tool="search"] .wf-bar')
    detail_read(page)
    request, answered = (json.loads(t) for t in page.locator("#detail pre").all_inner_texts())
    assert (request["type"], answered["type"]) == ("tool_call", "tool_result")
    assert request["attempt_id"] == answered["attempt_id"]


def test_an_appended_result_closes_its_bar_live(
    redis_store: EventStore, base: str, page: Any
) -> None:
    ref = lb.StreamId("wl", "main")
    redis_store.append(ref, 0, "a0", [msg("start")])
    trace(page, f"{base}/s/wl")
    page.wait_for_selector("#live.on")
    # Given a call requested while the page is open: an open bar
    redis_store.append(ref, 1, "a1", [call("t1", "r1")])
    page.wait_for_selector('.wf-row[data-attempt="t1"][data-status="unresolved"]')
    # When its result lands, then the bar closes, with its duration, as a reload draws it
    time.sleep(0.05)
    redis_store.append(ref, 2, "a2", [result("t1", run_id="r1")])
    page.wait_for_selector('.wf-row[data-attempt="t1"][data-status="ok"]')
    live = page.locator('.wf-row[data-attempt="t1"]')
    took = live.get_attribute("data-duration-ms")
    assert int(took) >= 50
    assert page.locator('.wf-row[data-attempt="t1"]').count() == 1
    trace(page, f"{base}/s/wl")
    again = page.locator('.wf-row[data-attempt="t1"]')
    assert (again.get_attribute("data-status"), again.get_attribute("data-duration-ms")) == (
        "ok",
        took,
    )


def test_flagged_calls_are_listed_first_and_marked_on_the_waterfall(
    redis_store: EventStore, base: str, page: Any
) -> None:
    from ledger_bus.operations.reconciler import Reconciler, ReconcilerConfig

    # An open call of a run that is alive (its lease held): unresolved, not flagged
    alive = Recorder(redis_store, "fl", "worker").run("alive")
    alive.__enter__()
    alive._drive(alive.begin_call_op("early", {}, False, None))
    # A run's call whose process is gone: the reconciler flags it
    redis_store.append(lb.StreamId("fl", "run-dead"), 0, "d0", [call("lost", "dead", "charge")])
    Reconciler(redis_store, ReconcilerConfig(grace_s=0)).run_pass()
    alive._drive(alive.begin_call_op("late", {}, False, None))
    trace(page, f"{base}/s/fl")
    rows = page.locator("#open tbody tr")
    assert rows.nth(0).get_attribute("data-attempt") == "lost"
    assert rows.nth(0).get_attribute("data-status") == "flagged"
    assert [rows.nth(n).get_attribute("data-status") for n in (1, 2)] == ["unresolved"] * 2
    # The open section comes before the trace on the page
    assert page.evaluate(
        "document.getElementById('open').compareDocumentPosition("
        "document.getElementById('trace')) & Node.DOCUMENT_POSITION_FOLLOWING"
    )
    flagged = page.locator('.wf-row[data-attempt="lost"][data-status="flagged"] .wf-mark')
    assert flagged.inner_text() == "flagged"
    alive.__exit__(None, None, None)


def test_zoom_and_pan_change_the_while_on_screen(
    redis_store: EventStore, base: str, page: Any
) -> None:
    ref = lb.StreamId("zm", "main")
    redis_store.append(ref, 0, "a0", [call("c1", "r")])
    time.sleep(0.2)
    redis_store.append(ref, 1, "a1", [result("c1", run_id="r")])
    time.sleep(0.2)
    redis_store.append(ref, 2, "a2", [msg("end")])
    trace(page, f"{base}/s/zm")
    bar = '.wf-row[data-attempt="c1"] .wf-bar'

    def span() -> int:
        return int(page.get_attribute("#trace", "data-to")) - int(
            page.get_attribute("#trace", "data-from")
        )

    whole, wide = span(), bar_width(page, bar)
    page.click("#zoom-in")
    assert span() == pytest.approx(whole / 2, abs=2)
    assert bar_width(page, bar) == pytest.approx(wide * 2, rel=0.05)
    # Dragging the axis pans: the while moves, its length stays
    before = int(page.get_attribute("#trace", "data-from"))
    box = page.locator(".wf-ticks").bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + 5)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] / 4, box["y"] + 5, steps=5)
    page.mouse.up()
    assert int(page.get_attribute("#trace", "data-from")) > before
    assert span() == pytest.approx(whole / 2, abs=2)
    page.click("#zoom-fit")
    assert span() == pytest.approx(whole, abs=2)
    # Ctrl + wheel zooms where the pointer is; shift + wheel pans
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + 40)
    page.keyboard.down("Control")
    page.mouse.wheel(0, -100)
    page.keyboard.up("Control")
    shown = (
        "(() => { const d = document.getElementById('trace').dataset; return d.to - d.from; })()"
    )
    page.wait_for_function(f"() => {shown} < {whole - 5}")
    zoomed, start = span(), int(page.get_attribute("#trace", "data-from"))
    page.keyboard.down("Shift")
    page.mouse.wheel(0, 100)
    page.keyboard.up("Shift")
    page.wait_for_function(f"() => +document.getElementById('trace').dataset.from > {start}")
    assert span() == pytest.approx(zoomed, abs=2)


def test_a_5000_event_trace_paints_a_window_and_reads_earlier_ones(
    redis_store: EventStore, base: str, page: Any
) -> None:
    ref = lb.StreamId("bigtrace", "main")
    for n in range(25):  # 2,500 calls, each with its result: 5,000 events
        events: list[dict[str, Any]] = []
        for i in range(100):
            events += [call(f"c{n * 100 + i}"), result(f"c{n * 100 + i}")]
        redis_store.append(ref, lb.ANY, f"a{n}", events)
    trace(page, f"{base}/s/bigtrace")
    # The newest 1,000 events: 500 calls, not the session
    assert page.locator(".wf-row.kind-tool").count() == 500
    assert page.locator('.wf-row[data-attempt="c2499"]').count() == 1
    assert page.locator('.wf-row[data-attempt="c1999"]').count() == 0
    page.click("#trace-earlier")
    page.wait_for_function("() => document.querySelectorAll('.wf-row.kind-tool').length === 1000")
    assert page.locator('.wf-row[data-attempt="c1999"][data-status="ok"]').count() == 1
    # Search filters the rows
    page.fill("#trace-search", "c2498")
    assert page.locator(".wf-row.kind-tool:not([hidden])").count() == 1


def test_script_in_a_payload_shows_as_text_on_the_trace_and_in_the_conversation(
    redis_store: EventStore, base: str, page: Any
) -> None:
    hostile = "<script>alert('owned')</script><img src=x onerror=\"alert('img')\">"
    page.add_init_script(
        "window.__calls = 0; for (const f of ['alert', 'confirm', 'prompt'])"
        " window[f] = () => { window.__calls += 1; };"
    )
    recorder = Recorder(redis_store, "hx", hostile.replace(" ", "_")[:60])
    with recorder.run("r1", objective=hostile) as run:
        run.message(hostile)
        run.call(hostile.replace(" ", "_")[:60], {hostile: hostile}, lambda **_: hostile)
    trace(page, f"{base}/s/hx")
    assert hostile.replace(" ", "_")[:60] in page.locator("#waterfall").inner_text()
    page.click(".wf-row.kind-tool .wf-bar")
    detail_read(page)
    assert hostile in page.locator("#detail").inner_text().replace("\\", "")
    page.click("#tab-conversation")
    assert hostile in page.locator("#conversation").inner_text()
    page.locator("#conversation details").first.click()
    assert (
        page.locator("#waterfall img, #detail img, #conversation img, #conversation script").count()
        == 0
    )
    assert page.evaluate("() => window.__calls") == 0
    assert page.dialogs == []


def test_a_call_arriving_live_goes_in_under_its_run_and_the_other_rows_stay(
    redis_store: EventStore, base: str, page: Any
) -> None:
    # Given two runs, each with a call, on an open trace
    for run in ("first", "second"):
        ref = lb.StreamId("ins", f"run-{run}")
        started = {"type": "mutation", "agent": "a", "kind": "run.started", "run_id": run}
        redis_store.append(
            ref, 0, "s", [started, call(f"{run}-1", run), result(f"{run}-1", run_id=run)]
        )
    trace(page, f"{base}/s/ins")
    page.wait_for_selector("#live.on")
    page.evaluate("document.querySelector('.wf-row[data-attempt=\"second-1\"]').dataset.kept = '1'")
    # When a call of the first run arrives
    redis_store.append(lb.StreamId("ins", "run-first"), 3, "c2", [call("first-2", "first")])
    page.wait_for_selector('.wf-row[data-attempt="first-2"]')
    # Then it sits under the first run, after its call, and no other row was drawn again
    order = page.eval_on_selector_all(
        ".wf-row", "rows => rows.map(r => r.dataset.attempt || 'run:' + r.dataset.run)"
    )
    assert order == ["run:first", "first-1", "first-2", "run:second", "second-1"]
    assert page.get_attribute('.wf-row[data-attempt="second-1"]', "data-kept") == "1"
    assert page.get_attribute('.wf-row[data-attempt="first-2"]', "data-status") == "unresolved"


def test_the_slow_and_the_failed_are_easy_to_find(
    redis_store: EventStore, base: str, page: Any
) -> None:
    ref = lb.StreamId("slow", "run-r")
    started = {"type": "mutation", "agent": "a", "kind": "run.started", "run_id": "r"}
    redis_store.append(ref, 0, "s", [started])
    # Durations far apart: a loaded machine (the suite on three processes) can take tens of
    # milliseconds between the two appends of the quick call.
    for attempt, pause, status in (
        ("quick", 0.0, "ok"),
        ("slow", 0.8, "ok"),
        ("broke", 0.3, "error"),
    ):
        redis_store.append(ref, lb.ANY, f"{attempt}-c", [call(attempt, "r")])
        time.sleep(pause)
        redis_store.append(
            ref, lb.ANY, f"{attempt}-r", [result(attempt, status=status, run_id="r")]
        )
    trace(page, f"{base}/s/slow")

    def calls() -> list[str]:
        found: list[str] = page.eval_on_selector_all(
            ".wf-row.kind-tool:not([hidden])", "rows => rows.map(r => r.dataset.attempt)"
        )
        return found

    assert calls() == ["quick", "slow", "broke"]  # in the order they were made
    page.click("#trace-slowest")
    assert calls() == ["slow", "broke", "quick"]  # the longest first
    page.fill("#trace-search", "error")
    assert calls() == ["broke"]  # the failed, by their status


# A session recorded ten minutes ago, in 5 s: a run that died with its call left open first,
# then two runs that finished (a tool call, a model call). Restored with the times it was
# recorded at (a cursor carries its commit time), so the open call is old without waiting.
OLD_SESSION: list[tuple[str, int, dict[str, Any]]] = [
    ("run-stuck", 0, {"type": "mutation", "agent": "worker", "kind": "run.started"}),
    ("run-stuck", 100, call("stuck-1", "stuck", "summarize_archive", agent="worker")),
    ("run-r1", 400, {"type": "mutation", "agent": "fetcher", "kind": "run.started"}),
    ("run-r1", 500, call("f1", "r1", "fetch", agent="fetcher", url="https://example.com")),
    ("run-r1", 2400, result("f1", "fetch", agent="fetcher", run_id="r1")),
    ("run-r1", 2500, {"type": "mutation", "agent": "fetcher", "kind": "run.finished"}),
    ("run-r2", 2600, {"type": "mutation", "agent": "writer", "kind": "run.started"}),
    ("run-r2", 2700, call("m1", "r2", "model", agent="writer", model="m-1")),
    (
        "run-r2",
        4900,
        result(
            "m1",
            "model",
            agent="writer",
            run_id="r2",
            value={"model": "m-1", "usage": {"input_tokens": 120, "output_tokens": 7}},
        ),
    ),
    ("run-r2", 5000, {"type": "mutation", "agent": "writer", "kind": "run.finished"}),
]
OLD_BY_MS = 600_000  # how long before the test the session was recorded


def restore_old_session(redis_store: EventStore, session: str) -> int:
    """Write OLD_SESSION as recorded OLD_BY_MS ago; return the time of its last event (ms)."""
    t0 = int(time.time() * 1000) - OLD_BY_MS
    versions: dict[str, int] = {}
    events = []
    for n, (stream, at, fields) in enumerate(OLD_SESSION):
        versions[stream] = versions.get(stream, 0) + 1
        run = stream.removeprefix("run-")
        recorded = {"run_id": run, **fields, "event_id": f"old-{n}"}
        if recorded.get("kind") == "run.finished":
            recorded["status"] = "ok"
        events.append(
            RecordedEvent(lb.StreamId(session, stream), versions[stream], f"{t0 + at}-0", recorded)
        )
    redis_store.restore(events)
    return t0 + OLD_SESSION[-1][1]


# Each bar's box and its label's, against its track; the union of the finished runs' bars over
# the axis; each label's text against the box it has.
GEOMETRY = """() => {
  const rows = [...document.querySelectorAll('.wf-row')].filter(r => r.querySelector('.wf-bar'));
  const box = e => { const b = e.getBoundingClientRect(); return [b.left, b.right]; };
  const track = box(rows[0].querySelector('.wf-track'));
  const finished = rows.filter(r => r.dataset.run === 'r1' || r.dataset.run === 'r2')
    .map(r => box(r.querySelector('.wf-bar'))).sort((a, b) => a[0] - b[0]);
  let covered = 0, end = -Infinity;
  for (const [l, r] of finished) {
    const from = Math.max(l, end, track[0]), to = Math.min(r, track[1]);
    if (to > from) { covered += to - from; }
    end = Math.max(end, r);
  }
  return {
    finished: covered / (track[1] - track[0]),
    bars: Object.fromEntries(rows.map(r => [r.dataset.attempt || 'run:' + r.dataset.run,
      box(r.querySelector('.wf-bar'))])),
    track: track,
    labels: rows.map(r => ({text: r.querySelector('.wf-dur').textContent,
      box: box(r.querySelector('.wf-dur')), track: box(r.querySelector('.wf-track'))})),
    names: [...document.querySelectorAll('.wf-row .wf-label')].map(l => ({text: l.textContent,
      cut: l.scrollWidth > l.clientWidth})),
  };
}"""


def cut_off(labels: list[dict[str, Any]]) -> list[str]:
    """The labels cut by their track's edges (each label is one line, never wrapped)."""
    return [
        label["text"]
        for label in labels
        if label["box"][0] < label["track"][0] - 0.5 or label["box"][1] > label["track"][1] + 0.5
    ]


def test_a_trace_is_drawn_to_the_session_s_own_while_with_an_old_open_call(
    redis_store: EventStore, base: str, page: Any
) -> None:
    # Given a session of 5 s whose call, left open at its start, is ten minutes old
    last = restore_old_session(redis_store, "old")
    trace(page, f"{base}/s/old")
    shown = page.evaluate(GEOMETRY)
    # Then the axis is the session's 5 s, not the ten minutes to now: the finished runs fill it
    axis = int(page.get_attribute("#trace", "data-to")) - int(
        page.get_attribute("#trace", "data-from")
    )
    assert axis < 6_000
    assert shown["finished"] > 0.6, shown
    # The open call's bar ends at the session's last event, where the last run's does
    stuck, ended = shown["bars"]["stuck-1"], shown["bars"]["run:r2"]
    assert stuck[1] == pytest.approx(ended[1], abs=2)
    assert page.locator('.wf-row[data-attempt="stuck-1"] .wf-bar.open').count() == 1
    # and says how long it has been open, by the clock
    said = page.locator('.wf-row[data-attempt="stuck-1"] .wf-dur').inner_text()
    open_for = re.search(r"open for (\d+) m \d\d s", said)
    assert open_for, said
    assert int(open_for.group(1)) >= OLD_BY_MS // 60_000, said
    # And every label is whole: inside its track, its name not cut
    assert cut_off(shown["labels"]) == [], shown["labels"]
    assert [n["text"] for n in shown["names"] if n["cut"]] == []
    assert page.evaluate(f"() => +document.getElementById('trace').dataset.to > {last}")

    # "to now" draws the axis on to now, the open call with it, and back
    clock = page.evaluate("Date.now()")
    page.click("#trace-to-now")
    assert int(page.get_attribute("#trace", "data-to")) >= clock
    to_now = page.evaluate(GEOMETRY)
    assert to_now["finished"] < 0.05
    assert to_now["bars"]["stuck-1"][1] > to_now["bars"]["run:r2"][1] + 100
    assert cut_off(to_now["labels"]) == [], to_now["labels"]
    page.click("#trace-to-now")
    assert page.evaluate(GEOMETRY)["finished"] > 0.6


def test_events_arriving_live_extend_the_session_s_axis_and_its_open_bars(
    redis_store: EventStore, base: str, page: Any
) -> None:
    # Given the trace of a session ten minutes old, with a call left open, drawn to its 5 s
    restore_old_session(redis_store, "grows")
    trace(page, f"{base}/s/grows")
    page.wait_for_selector("#live.on")
    before = int(page.get_attribute("#trace", "data-to"))
    # When an event arrives now
    appended = redis_store.append(lb.StreamId("grows", "main"), 0, "late", [msg("still here")])
    last = cursor_ms(appended.cursor)
    # Then the axis runs on to it, and so does the open call's bar
    page.wait_for_function(f"() => +document.getElementById('trace').dataset.to > {last}")
    assert int(page.get_attribute("#trace", "data-to")) > before
    # (the axis's data is written after the bars are placed: they are where it says)
    frm, to = (int(page.get_attribute("#trace", a)) for a in ("data-from", "data-to"))
    shown = page.evaluate(GEOMETRY)
    left, right = shown["track"]
    expected = left + (last - frm) / (to - frm) * (right - left)
    assert shown["bars"]["stuck-1"][1] == pytest.approx(expected, abs=2)
    assert cut_off(shown["labels"]) == [], shown["labels"]


def test_behind_tokens_a_browser_given_a_reader_s_token_sees_a_session_live_and_its_trace(
    redis_url: str, prefix: str, redis_store: EventStore, browser: Any, tmp_path: Any
) -> None:
    from ledger_bus.access.identity import Identity
    from ledger_bus.access.tokens import TokenFile, add_token

    file = str(tmp_path / "tokens.json")
    reader = add_token(file, Identity("viewer", "reader", "team-a-*"))
    ref = lb.StreamId("team-a-1", "main")
    redis_store.append(ref, 0, "a1", [msg("first")])
    with served(view_app(redis_url, prefix, tokens=TokenFile(file))) as url:
        # A browser whose user gives no token is challenged and shown no page (headless, the
        # challenge is cancelled as a user would cancel the browser's prompt)
        stranger = browser.new_context()
        with pytest.raises(Exception, match="ERR_INVALID_AUTH_CREDENTIALS"):
            stranger.new_page().goto(f"{url}/s/team-a-1")
        stranger.close()
        # One that has (the password of the Basic challenge) sees the page, its live stream
        # and the trace's fetches, all sent with the token
        context = browser.new_context(http_credentials={"username": "me", "password": reader})
        page = context.new_page()
        page.goto(f"{url}/s/team-a-1")
        page.wait_for_selector("#live.on")
        redis_store.append(ref, 1, "a2", [msg("arrived live")])
        page.wait_for_selector("td.text:text-is('arrived live')")
        trace(page, f"{url}/s/team-a-1")
        assert page.goto(f"{url}/s/team-b-1").status == 403
        context.close()


def test_an_open_call_shows_what_its_probe_said_and_a_settled_one_its_evidence(
    redis_store: EventStore, base: str, page: Any
) -> None:
    from ledger_bus.operations.probes import Probed
    from ledger_bus.operations.reconciler import Reconciler, ReconcilerConfig

    # Two calls whose runs are gone: a refund its probe cannot tell about, a charge it finds
    ref = lb.StreamId("pr", "run-dead")
    redis_store.append(ref, 0, "d0", [call("r1", "dead", "refund"), call("c1", "dead", "charge")])
    probes = {
        "refund": lambda found: Probed.unknown("refunds cannot be looked up"),
        "charge": lambda found: Probed.done({"charged": 5}, {"charge_id": "ch_7"}),
    }
    config = ReconcilerConfig(grace_s=0)
    Reconciler(redis_store, config, on_action=lambda r: None, probes=probes).run_pass()
    trace(page, f"{base}/s/pr")
    (row,) = page.locator('#open tbody tr[data-attempt="r1"]').all()
    assert row.get_attribute("data-status") == "flagged"
    assert row.locator("td.probe").inner_text() == "unknown: refunds cannot be looked up"
    assert page.locator('#open tbody tr[data-attempt="c1"]').count() == 0
    # The settled call: its bar says so, its detail shows the probe's evidence
    page.click('.wf-row[data-attempt="c1"] .wf-bar')
    detail_read(page)
    said = page.locator("#detail .settled-by").inner_text()
    assert "settled by the probe" in said
    assert "done" in said
    assert '"charge_id":"ch_7"' in said
    answered = json.loads(page.locator('#detail pre[data-part="result"]').inner_text())
    assert answered["settled_by"]["evidence"] == {"charge_id": "ch_7"}
