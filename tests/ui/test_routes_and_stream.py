"""`ledger-bus ui`: its routes and pages without a browser, and its event stream against a real
server (ledger_bus/ui)."""

from __future__ import annotations

import html
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
import redis
from starlette.testclient import TestClient

import ledger_bus as lb
from ledger_bus import aio
from ledger_bus.agent.recorder import Recorder
from ledger_bus.board.dispatches import Board
from ledger_bus.demo.server import LocalServer, free_port
from ledger_bus.model.ids import CURSOR_ZERO
from ledger_bus.store.base import EventStore
from ledger_bus.ui.app import create_app
from tests.support.events import call, msg, result
from tests.support.helpers import ledger_cli, ledger_here
from tests.support.ui import served, view_app


@pytest.fixture
def client(redis_url: str, prefix: str) -> Iterator[TestClient]:
    app = view_app(redis_url, prefix)
    with TestClient(app) as c:
        yield c


def rows(html: str) -> list[str]:
    """The cursors of the timeline's rows, in page order."""
    return re.findall(r'<tr id="e-([0-9-]+)"', html)


def test_sessions_are_listed_newest_first_with_counts_paging_and_a_filter(
    redis_store: EventStore, client: TestClient
) -> None:
    for n in range(60):
        redis_store.append(lb.StreamId(f"job-{n:02d}", "main"), 0, "a1", [msg("hi")])
    redis_store.append(lb.StreamId("job-59", "main"), 1, "a2", [call("t1")])

    page = client.get("/")
    assert page.status_code == 200
    listed = re.findall(r'<tr data-session="([^"]+)"', page.text)
    assert len(listed) == 50
    shown = client.get("/?format=json").json()["sessions"]
    assert [r["session_id"] for r in shown] == listed
    assert [r["last_ms"] for r in shown] == sorted((r["last_ms"] for r in shown), reverse=True)
    assert "1 open" in page.text
    older = client.get("/?offset=50")
    assert len(re.findall(r'<tr data-session="', older.text)) == 10
    found = client.get("/?q=job-1").text
    assert sorted(re.findall(r'<tr data-session="([^"]+)"', found)) == [
        f"job-{n}" for n in range(10, 20)
    ]
    data = client.get("/?q=job-59&format=json").json()
    assert data["sessions"][0]["events"] == 2
    assert data["sessions"][0]["open_attempts"] == 1
    Board(redis_store, "job-03").open("writer", "Draft", datetime.now(UTC), {})
    (row,) = client.get("/?q=job-03&format=json").json()["sessions"]
    assert row["dispatches"] == 1


def test_a_session_page_pairs_calls_with_results_and_badges_open_ones(
    redis_store: EventStore, client: TestClient
) -> None:
    ref = lb.StreamId("s", "main")
    redis_store.append(
        ref, 0, "a1", [msg("start"), call("t1"), result("t1"), call("t2", tool="fetch")]
    )
    page = client.get("/s/s")
    assert page.status_code == 200
    assert len(rows(page.text)) == 3, "the result is on its call's row"
    assert re.search(
        r'data-attempt="t1".*?<span class="badge ok">ok</span> <span class="duration muted">\d+ ms',
        page.text,
        re.S,
    )
    assert re.search(r'data-attempt="t2".*?badge unresolved', page.text, re.S)
    exported = client.get("/s/s?format=json").json()["events"]
    assert exported[1]["paired_result"]["status"] == "ok"
    assert exported[2]["badge"] == "unresolved"
    assert [e["cursor"] for e in exported] == rows(page.text)


def test_filters_and_search_hide_the_rest_and_unresolved_only_keeps_open_calls(
    redis_store: EventStore, client: TestClient
) -> None:
    ref = lb.StreamId("f", "main")
    redis_store.append(
        ref,
        0,
        "a1",
        [msg("alpha", agent="x"), msg("beta", agent="y"), call("t1"), call("t2"), result("t2")],
    )
    assert len(rows(client.get("/s/f?type=message").text)) == 2
    assert len(rows(client.get("/s/f?agent=y").text)) == 1
    searched = client.get("/s/f?q=ALPHA").text
    assert len(rows(searched)) == 1
    assert "alpha" in searched
    only = (
        client.get("/s/f?unresolved=1").json()
        if False
        else client.get("/s/f?unresolved=1&format=json").json()
    )
    assert [e["attempt_id"] for e in only["events"]] == ["t1"]


def test_a_long_session_is_paged_and_every_event_is_on_exactly_one_page(
    redis_store: EventStore, client: TestClient
) -> None:
    ref = lb.StreamId("long", "main")
    for n in range(0, 450, 50):
        redis_store.append(ref, lb.ANY, f"a{n}", [msg(f"m{n + i}") for i in range(50)])
    seen: list[str] = []
    url = "/s/long"
    pages = 0
    while url:
        html = client.get(url).text
        page_rows = rows(html)
        assert len(page_rows) <= 100
        seen = page_rows + seen
        pages += 1
        found = re.search(r'id="older" href="([^"]+)"', html)
        url = found.group(1).replace("&amp;", "&") if found else ""
    assert pages == 5
    assert seen == [e.cursor for e in redis_store.scan_session("long", limit=1000)]


def test_a_filtered_page_reaches_back_through_older_pages(
    redis_store: EventStore, client: TestClient
) -> None:
    ref = lb.StreamId("sparse", "main")
    redis_store.append(ref, 0, "a0", [msg("needle")])
    for n in range(3):
        redis_store.append(ref, lb.ANY, f"b{n}", [msg("hay") for _ in range(100)])
    found = client.get("/s/sparse?q=needle&format=json").json()["events"]
    assert [e["body"] for e in found] == ["needle"]


def test_what_an_agent_wrote_is_shown_as_text(redis_store: EventStore, client: TestClient) -> None:
    hostile = '<script>document.title="owned"</script><img src=x onerror=alert(1)>'
    redis_store.append(lb.StreamId("x", "main"), 0, "a1", [msg(hostile, agent="a")])
    html = client.get("/s/x").text
    assert "<script>document" not in html
    assert "<img src=x" not in html
    assert "&lt;script&gt;document.title=&#34;owned&#34;&lt;/script&gt;" in html
    (event,) = redis_store.tail("x", 1)
    single = client.get(f"/s/x/e/{event.cursor}")
    assert single.status_code == 200
    assert "<script>document" not in single.text
    assert client.get(f"/s/x/e/{event.cursor}?format=json").json()["body"] == hostile


def test_a_missing_session_a_bad_cursor_and_a_down_store_get_a_page_not_a_traceback(
    client: TestClient,
) -> None:
    missing = client.get("/s/nothing-here")
    assert missing.status_code == 404
    assert "no session &#39;nothing-here&#39;" in missing.text
    assert "Traceback" not in missing.text
    assert client.get("/s/x?before=yesterday").status_code == 400
    assert client.get("/s/x/e/1-2-3").status_code in (400, 404)
    assert client.get("/s/bad%20id").status_code == 400
    # The live stream of a session that does not exist is refused, not left waiting.
    live = client.get("/s/nothing-here/live")
    assert live.status_code == 404
    assert "no session 'nothing-here'" in live.json()["error"]

    dead = create_app(lambda: aio.connect(f"redis://127.0.0.1:{free_port()}/0", timeout=0.3))
    with TestClient(dead) as c:
        down = c.get("/")
        assert down.status_code == 503
        assert "not answering" in down.text
        assert "Traceback" not in down.text


def test_the_live_stream_resumes_after_last_event_id_with_no_duplicate_and_no_gap(
    redis_url: str, prefix: str, redis_store: EventStore
) -> None:
    ref = lb.StreamId("live", "main")
    redis_store.append(ref, 0, "a0", [msg("before")])
    (first,) = redis_store.tail("live", 1)
    app = view_app(redis_url, prefix)
    with served(app) as base:
        for n in range(5):
            redis_store.append(ref, lb.ANY, f"a{n + 1}", [msg(f"m{n}")])
        got = read_events(f"{base}/s/live/live?after={first.cursor}", {}, 3)
        for n in range(5, 8):
            redis_store.append(ref, lb.ANY, f"a{n + 1}", [msg(f"m{n}")])
        rest = read_events(f"{base}/s/live/live", {"Last-Event-ID": got[-1][0]}, 5)
    ids = [i for i, _ in got + rest]
    expected = [e.cursor for e in redis_store.scan_session("live")][1:]
    assert ids == expected, "every event once, in order, across the reconnect"
    assert all("m" in data for _, data in got + rest)


def test_hidden_events_still_move_the_stream_on(
    redis_url: str, prefix: str, redis_store: EventStore
) -> None:
    ref = lb.StreamId("hid", "main")
    redis_store.append(ref, 0, "a0", [msg("x")])
    (first,) = redis_store.tail("hid", 1)
    redis_store.append(
        ref, 1, "a1", [msg("seen", agent="b"), msg("hidden", agent="c"), msg("seen2", agent="b")]
    )
    app = view_app(redis_url, prefix)
    with served(app) as base:
        got = read_events(f"{base}/s/hid/live?agent=b&after={first.cursor}", {}, 3, kinds=True)
    assert [kind for kind, _, _ in got] == ["row", "skip", "row"]


def read_events(url: str, headers: dict[str, str], n: int, kinds: bool = False) -> list[Any]:
    """The first `n` events of the stream at `url`: (id, data), or (event, id, data)."""
    out: list[Any] = []
    with httpx.stream("GET", url, headers=headers, timeout=10) as response:
        assert response.status_code == 200
        event: dict[str, str] = {}
        for line in response.iter_lines():
            if not line:
                if "id" in event:
                    item = (event["id"], event.get("data", ""))
                    out.append((event.get("event", "message"), *item) if kinds else item)
                    if len(out) == n:
                        return out
                event = {}
                continue
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            event[name] = event[name] + "\n" + value if name == "data" and name in event else value
    return out


def test_the_command_serves_the_view_on_loopback(
    redis_url: str, prefix: str, redis_store: EventStore
) -> None:
    redis_store.append(lb.StreamId("cmd", "main"), 0, "a1", [msg("hello")])
    port = free_port()
    env = {**os.environ, "LEDGER_BUS_URL": redis_url}
    proc = subprocess.Popen(
        [sys.executable, "-m", "ledger_bus", "--prefix", prefix, "ui", "--port", str(port)],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                page = httpx.get(f"http://127.0.0.1:{port}/s/cmd", timeout=2)
                break
            except httpx.TransportError:
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                assert time.monotonic() < deadline, "the view did not start"
                time.sleep(0.1)
        assert page.status_code == 200
        assert "hello" in page.text
        # The header names the ledger: the server, and the prefix when it is not the default
        assert f"· prefix {prefix}</span>" in page.text
    finally:
        proc.terminate()
        proc.communicate(timeout=10)


def test_an_empty_ledger_says_where_the_demo_s_sessions_are(client: TestClient) -> None:
    page = client.get("/").text
    assert "0 sessions" in page
    assert "<code>ledger-bus --prefix lb-demo ui</code>" in page


def test_a_port_taken_is_one_line_and_exit_2(redis_url: str, prefix: str) -> None:
    # Given a port something else listens on
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        # When the view is asked to listen there
        done = ledger_cli(redis_url, prefix, "ui", "--port", str(port), timeout=30)
    # Then it says so in one line, without an address it never served, and exits 2
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr
    assert "http://" not in done.stderr


def test_bad_usage_is_one_line_and_exit_2(redis_url: str, prefix: str) -> None:
    done = ledger_here("memory://", prefix, "ui")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert "memory://" in done.stderr
    assert ledger_here(redis_url, prefix, "ui", "--port", "70000").returncode == 2


def delegated_session(redis_store: EventStore, session: str = "tree") -> tuple[str, str]:
    """A planner run that delegates to a writer run, which delegates to an editor run that is
    still going; returns (writer run id, editor run id)."""
    planner = Recorder(redis_store, session, "planner")
    with planner.run("plan") as run:
        run.message("plan it")
        writing = run.delegate("writer", "Draft it")
        with Recorder(redis_store, session, "writer").run(writing.child_run_id) as writer:
            writer.message("drafting")
            editing = writer.delegate("editor", "Edit it")
            editor = Recorder(redis_store, session, "editor").run(editing.child_run_id)
            editor.__enter__()  # still running when the page is looked at
            editor.message("editing")
        run.finish_delegation(writing, "ok", "drafted")
    return writing.child_run_id, editing.child_run_id


def test_the_runs_tree_links_both_ways_with_each_runs_status_and_collapses_to_a_depth(
    redis_store: EventStore, client: TestClient
) -> None:
    writer, editor = delegated_session(redis_store)
    html = client.get("/s/tree").text
    assert re.findall(r'<li data-run="([^"]+)" data-status="([^"]+)"', html) == [
        ("plan", "ok"),
        (writer, "ok"),
        (editor, "running"),
    ]
    assert f'class="child" href="/s/tree?run={writer}"' in html
    assert 'class="parent" href="/s/tree?run=plan"' in html
    assert f'class="parent" href="/s/tree?run={writer}"' in html
    # The trace's runs: the tree in order, each with its parent, depth and times.
    spans = client.get("/s/tree/runs").json()
    assert [(r["run"], r["parent"], r["depth"]) for r in spans] == [
        ("plan", None, 0),
        (writer, "plan", 1),
        (editor, writer, 2),
    ]
    assert all(r["started_ms"] <= (r["ended_ms"] or r["started_ms"]) for r in spans)
    assert spans[2]["ended_ms"] is None, "the editor is still running"
    shallow = client.get("/s/tree?depth=1&format=json").json()["events"]
    assert {e.get("run_id") for e in shallow} == {"plan", writer}, "the editor's run is folded away"
    only_writer = client.get(f"/s/tree?run={writer}&format=json").json()["events"]
    assert {e["run_id"] for e in only_writer} == {writer}


def test_a_langgraph_thread_s_node_runs_are_a_tree_its_subgraph_and_sends_under_their_parents(
    redis_store: EventStore, client: TestClient
) -> None:
    pytest.importorskip("langgraph")
    from langchain_core.messages import HumanMessage

    from ledger_bus.adapters.langgraph import LedgerSaver
    from tests.support.graphs import delegating

    graph = delegating(LedgerSaver(redis_store))
    graph.invoke({"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": "lg-tree"}})
    html = client.get("/s/lg-tree").text
    found = re.findall(
        r'<li data-run="[^"]+\.([a-z_0-9]+)" data-status="([^"]+)" style="margin-left: (\d+)px',
        html,
    )
    tree = [(name, status, int(indent) // 20) for name, status, indent in found]
    # Each parent before its children, one level in: plan above the two workers it sent,
    # delegate above its subgraph's node (siblings in the order they were written).
    assert sorted(tree) == [
        ("delegate", "ok", 0),
        ("inner_model", "ok", 1),
        ("plan", "ok", 0),
        ("send0", "ok", 1),
        ("send1", "ok", 1),
    ]
    names = [name for name, _, _ in tree]
    assert names.index("plan") < min(names.index("send0"), names.index("send1"))
    assert names.index("delegate") + 1 == names.index("inner_model")


def test_a_run_whose_lease_is_gone_without_run_finished_shows_as_died(
    redis_store: EventStore, client: TestClient
) -> None:
    recorder = Recorder(redis_store, "gone", "worker", lease_ttl_ms=200)
    run = recorder.run("w1")
    run.__enter__()
    run.message("working")
    run._stop_renewing_and_release()  # the process died: its lease is no longer renewed
    time.sleep(0.4)
    assert 'data-run="w1" data-status="died"' in client.get("/s/gone/panels").text


def test_the_dispatch_board_shows_live_and_stale_by_the_injected_clock(
    redis_url: str, prefix: str, redis_store: EventStore
) -> None:
    board = Board(redis_store, "d")
    t0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
    first = board.open("writer", "Draft", t0, {})
    board.open("reviewer", "Review", t0 + timedelta(hours=20), {})
    moment = [t0 + timedelta(hours=1)]
    app = view_app(redis_url, prefix, clock=lambda: moment[0])
    with TestClient(app) as c:
        windows = re.findall(r'data-dispatch="([^"]+)" data-window="([^"]+)"', c.get("/s/d").text)
        assert windows == [(first, "live"), (windows[1][0], "live")]
        moment[0] = t0 + timedelta(hours=30)  # the first is 30 h old, the second 10 h
        windows = re.findall(
            r'data-dispatch="([^"]+)" data-window="([^"]+)"', c.get("/s/d/panels").text
        )
        assert [w for _, w in windows] == ["stale", "live"]
        moment[0] = t0 + timedelta(hours=50)  # 50 h: in flight nowhere; 30 h
        windows = re.findall(
            r'data-dispatch="([^"]+)" data-window="([^"]+)"', c.get("/s/d/panels").text
        )
        assert [w for _, w in windows] == ["other", "stale"]


def test_consumer_groups_show_pending_and_lag_and_lag_falls_as_a_consumer_reads(
    redis_store: EventStore, client: TestClient
) -> None:
    ref = lb.StreamId("g", "main")
    redis_store.append(ref, 0, "a1", [msg("x")])
    redis_store.group_create("g", "workers", CURSOR_ZERO)
    redis_store.append(ref, 1, "a2", [msg("y"), msg("z")])

    def numbers() -> tuple[str, str]:
        html = client.get("/s/g/panels").text
        found = re.search(
            r'data-group="workers">.*?class="pending">(\d+)<.*?class="lag">(\d+)<', html, re.S
        )
        assert found is not None
        return found.group(1), found.group(2)

    assert numbers() == ("0", "3")
    delivered = redis_store.group_read("g", "workers", "c1", 2, None)
    assert numbers() == ("2", "1")
    redis_store.group_ack("g", "workers", [d.entry_id for d in delivered])
    assert numbers() == ("0", "1")


def test_the_view_runs_on_the_sql_store_too(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    sql = lb.connect(url)
    writer, _ = delegated_session(sql, "sqlview")
    sql.group_create("sqlview", "workers", CURSOR_ZERO)
    with TestClient(create_app(lambda: aio.connect(url), url)) as c:
        html = c.get("/s/sqlview").text
        assert f'<li data-run="{writer}" data-status="ok"' in html
        assert 'data-group="workers"' in html
        assert c.get("/").status_code == 200
    sql.close()


def test_pages_watching_one_session_share_one_wait_on_the_store(
    redis_url: str, prefix: str, redis_store: EventStore
) -> None:
    ref = lb.StreamId("shared", "main")
    redis_store.append(ref, 0, "a0", [msg("start")])
    (first,) = redis_store.tail("shared", 1)
    raw = redis.Redis.from_url(redis_url)

    def xreads() -> int:
        return int(raw.info("commandstats").get("cmdstat_xread", {}).get("calls", 0))

    app = view_app(redis_url, prefix)
    with served(app) as base:
        got: list[list[Any]] = [[] for _ in range(5)]
        readers = [
            threading.Thread(
                target=lambda k=k: got[k].extend(
                    read_events(f"{base}/s/shared/live?after={first.cursor}", {}, 10)
                )
            )
            for k in range(5)
        ]
        for reader in readers:
            reader.start()
        time.sleep(0.5)  # all five are watching
        before = xreads()
        for n in range(10):
            redis_store.append(ref, lb.ANY, f"a{n + 1}", [msg(f"m{n}")])
            time.sleep(0.05)
        for reader in readers:
            reader.join(timeout=20)
        used = xreads() - before
    expected = [e.cursor for e in redis_store.scan_session("shared")][1:]
    assert all([i for i, _ in g] == expected for g in got), "each page got every event once"
    # One watcher makes at most two XREADs an event (the wait, the read after it); a wait for
    # each page would make fifty or more.
    assert used <= 24, f"{used} XREADs for 10 events and 5 pages"
    raw.close()


ODD_IDS = ["team/alpha", "org/user", "a<b", 'q"x', "x>y", "..", "victim/panels", "~tilde", "ok-1"]


def test_every_session_on_the_list_opens_from_its_own_link_whatever_its_id(
    redis_store: EventStore, redis_url: str, prefix: str
) -> None:
    # Given sessions whose ids hold slashes, dots, brackets and quotes, and one named like a page
    for n, session_id in enumerate(ODD_IDS):
        redis_store.append(lb.StreamId(session_id, "main"), 0, "a1", [msg(f"said in session {n}")])
    redis_store.append(lb.StreamId("victim", "main"), 0, "a1", [msg("said in victim")])
    with served(view_app(redis_url, prefix)) as base:
        listing = httpx.get(f"{base}/?q=", timeout=10).text
        found = re.findall(r'<td><a href="(/s/[^"]*)">([^<]*)</a></td>', listing)
        links = {html.unescape(name): html.unescape(href) for href, name in found}
        # When each is opened from its link on the list
        for n, session_id in enumerate(ODD_IDS):
            page = httpx.get(base + links[session_id], timeout=10)
            # Then it is that session's page, and no other's
            assert page.status_code == 200, (session_id, links[session_id])
            assert f"said in session {n}" in page.text, session_id
            assert "said in victim" not in page.text
            # And its panels open from it too
            panels = httpx.get(base + links[session_id] + "/panels", timeout=10)
            assert panels.status_code == 200, session_id
        # And a name that reorders the text around it shows its controls
        redis_store.append(
            lb.StreamId("bidi", "main"), 0, "a1", [msg("invoice\u202eevil\u202cfdp.exe")]
        )
        shown = httpx.get(f"{base}/s/bidi", timeout=10).text
        assert "invoice\u27e8U+202E\u27e9evil\u27e8U+202C\u27e9fdp.exe" in shown
        assert "\u202e" not in shown
        # And a path that names no session's encoding is a clean 4xx
        assert httpx.get(f"{base}/s/~%%%", timeout=10).status_code in (400, 404)


# -- the view under attack (docs/ui.md) -----------------------------------------------------------

ODD_PATHS = [
    "/s/..%2f..",
    "/s/..%2F..%2Fetc%2Fpasswd",
    "/s/%00",
    "/s/a%00b",
    "/s/" + "a" * 10_000,
    "/s/~" + "A" * 10_000,
    "/s/~!!!not-base64",
    "/s/%ff%fe",
    "/s/x/e/" + "9" * 5_000,
    "/s/x/e/..%2f..",
    "/?offset=" + "9" * 5_000,
    "/?offset=-1",
    "/s/x?before=" + "z" * 10_000,
]


@pytest.mark.parametrize("path", ODD_PATHS, ids=lambda p: p[:24])
def test_an_odd_path_is_a_clean_4xx_page_of_bounded_size(
    redis_store: EventStore, client: TestClient, path: str
) -> None:
    redis_store.append(lb.StreamId("x", "main"), lb.ANY, "a1", [msg("there")])
    got = client.get(path)
    assert 400 <= got.status_code < 500, (got.status_code, got.text[:200])
    assert "Traceback" not in got.text
    assert len(got.content) < 8_000, "an error page never echoes a hostile value whole"


@pytest.mark.parametrize(
    "last_event_id",
    ["garbage", "1-2-3", "../../", "9" * 100, "0-" + "9" * 50_000, "\u202e1-1", "-1--1"],
    ids=lambda v: v[:12],
)
def test_a_garbage_or_huge_last_event_id_is_a_clean_4xx(
    redis_store: EventStore, client: TestClient, last_event_id: str
) -> None:
    redis_store.append(lb.StreamId("x", "main"), lb.ANY, "a1", [msg("there")])
    got = client.get("/s/x/live", headers={b"Last-Event-ID": last_event_id.encode()})
    assert got.status_code == 400, got.text[:200]
    assert len(got.content) < 2_000
    assert "not a cursor" in got.json()["error"]


def test_no_route_writes_to_the_ledger_whatever_it_is_asked(
    redis_server: LocalServer, prefix: str, redis_store: EventStore, client: TestClient
) -> None:
    # Given a session, and every key of the server before
    ref = lb.StreamId("ro", "main")
    redis_store.append(ref, 0, "a1", [msg("x"), call("t1")])
    raw = redis.Redis.from_url(redis_server.url)

    def everything() -> dict[bytes, bytes | None]:
        return {key: raw.dump(key) for key in sorted(raw.scan_iter(count=1000))}

    before = everything()
    (event,) = redis_store.tail("ro", 1)
    # When every route is asked, with every method, and odd paths besides
    paths = [
        "/",
        "/s/ro",
        "/s/ro?unresolved=1",
        "/s/ro?format=json",
        f"/s/ro/e/{event.cursor}",
        "/s/ro/panels",
        "/s/none",
        *ODD_PATHS,
    ]
    for path in paths:
        for method in ("GET", "POST", "PUT", "DELETE", "PATCH"):
            client.request(method, path)
    live_url = f"/s/ro/live?after={CURSOR_ZERO}"
    # An app of its own for a real server: the test client's app keeps a store whose
    # connections belong to the test client's event loop, not to the server's.
    with (
        served(view_app(redis_server.url, prefix)) as base,
        httpx.Client(timeout=5) as http,
        http.stream("GET", base + live_url) as live,
    ):
        next(live.iter_lines())
    # Then no key was written, added or removed
    assert everything() == before
    raw.close()


def test_event_streams_opened_and_closed_leave_the_servers_memory_and_files_as_they_were(
    redis_url: str, prefix: str, redis_store: EventStore
) -> None:
    # Given `ledger-bus ui` in a process of its own, with a session to watch
    redis_store.append(lb.StreamId("w", "main"), 0, "a1", [msg("x")])
    port = free_port()
    env = {**os.environ, "LEDGER_BUS_URL": redis_url, "LEDGER_BUS_PREFIX": prefix}
    server = subprocess.Popen(
        [sys.executable, "-m", "ledger_bus", "ui", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"

    def files() -> int:
        return len(os.listdir(f"/proc/{server.pid}/fd"))

    def memory_kb() -> int:
        with open(f"/proc/{server.pid}/status") as status:
            line = next(s for s in status if s.startswith("VmRSS:"))
        return int(line.split()[1])

    def streams(n: int) -> None:
        with httpx.Client(timeout=5) as http:
            for _ in range(n):
                with http.stream("GET", f"{base}/s/w/live?after={CURSOR_ZERO}") as live:
                    next(live.iter_lines())

    def settled(probe: Any, want: int) -> int:
        deadline = time.monotonic() + 10
        while probe() > want and time.monotonic() < deadline:
            time.sleep(0.1)
        return int(probe())

    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                httpx.get(base, timeout=1)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the view never came up"
                time.sleep(0.1)
        streams(20)  # the store's connections and the server's first allocations
        fds, rss = settled(files, 0), memory_kb()
        # When 200 event streams are opened and closed
        streams(200)
        # Then the server holds the files it held, and about the memory
        assert settled(files, fds) == fds
        grown = memory_kb() - rss
        assert grown < 8_000, f"the server kept {grown} kB after 200 streams closed"
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_the_trace_reads_the_export_s_trajectory_a_window_at_a_time(
    redis_store: EventStore, client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ledger_bus.exports.atif import atif_of
    from ledger_bus.ui import app

    delegated_session(redis_store)
    redis_store.append(
        lb.StreamId("tree", "main"), lb.ANY, "more", [msg(f"m{n}") for n in range(10)]
    )
    # The whole session: what `ledger-bus export --format atif` writes, read a page at a time
    whole = atif_of(redis_store, "tree")
    assert client.get("/s/tree/trajectory").json() == whole
    monkeypatch.setattr(app, "READ_PAGE", 3)
    assert client.get("/s/tree/trajectory").json() == whole
    # A window: the newest N events, saying which, and where the one before it ends
    newest = redis_store.tail("tree", 4)
    first = client.get("/s/tree/trajectory?window=4").json()
    window = first["extra"]["ledger"]["window"]
    assert (window["first"], window["last"]) == (newest[0].cursor, newest[-1].cursor)
    assert window["older"] == newest[0].cursor
    assert [s["message"] for s in first["steps"]] == ["m6", "m7", "m8", "m9"]
    before = client.get(f"/s/tree/trajectory?window=4&before={window['older']}").json()
    earlier = before["extra"]["ledger"]["window"]
    assert earlier["last"] < window["first"]
    assert [s["message"] for s in before["steps"]] == ["m2", "m3", "m4", "m5"]
    # A window holding the session's start has none before it
    total = redis_store.session_info("tree").events
    whole = client.get(f"/s/tree/trajectory?window={total + 5}").json()
    assert whole["extra"]["ledger"]["window"]["older"] is None
    # Bad input: a 400 that says why, never a read of the whole session
    too_big = client.get("/s/tree/trajectory?window=20000")
    assert too_big.status_code == 400
    assert "window must be at most 10,000 events" in too_big.text
    assert client.get("/s/tree/trajectory?window=4&before=nope").status_code == 400


def test_a_trace_window_counts_the_events_it_draws_not_the_native_records_between(
    redis_store: EventStore, client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ledger_bus.ui import app

    native = {"type": "mutation", "agent": "langgraph", "kind": "langgraph.checkpoint"}
    ref = lb.StreamId("thread", "main")
    for n in range(12):  # as a LangGraph thread: each message among checkpoints
        redis_store.append(ref, lb.ANY, f"a{n}", [native, native, native, msg(f"m{n}")])
    seen: list[list[str]] = []
    older = None
    while True:
        query = "window=4" + (f"&before={older}" if older else "")
        found = client.get(f"/s/thread/trajectory?{query}").json()
        seen.append([s["message"] for s in found["steps"]])
        older = found["extra"]["ledger"]["window"]["older"]
        if older is None:
            break
    # Four messages a window, newest first, and then the session's start (checkpoints only:
    # an empty trajectory's one placeholder step, as ATIF needs a step)
    assert seen[:3] == [[f"m{n}" for n in range(k, k + 4)] for k in (8, 4, 0)]
    assert len(seen) == 4
    assert not any(step.startswith("m") for step in seen[3])
    # A stretch of native records longer than a window may pass over ends the window early,
    # saying where the next begins: a window's cost stays bounded by its size.
    monkeypatch.setattr(app, "NATIVE_READ", 2)
    for n in range(4):
        redis_store.append(ref, lb.ANY, f"b{n}", [native] * 4)
    found = client.get("/s/thread/trajectory?window=2").json()
    assert not any(step["message"].startswith("m") for step in found["steps"])
    assert found["extra"]["ledger"]["window"]["older"] is not None


def test_the_trace_s_runs_are_those_of_the_while_it_shows(
    redis_store: EventStore, client: TestClient
) -> None:
    with Recorder(redis_store, "while", "early").run("old") as run:
        run.message("long ago")
    time.sleep(0.05)
    with Recorder(redis_store, "while", "planner").run("plan") as run:
        delegation = run.delegate("writer", "Draft it")
        with Recorder(redis_store, "while", "writer").run(delegation.child_run_id) as child:
            child.message("in the child")
        run.finish_delegation(delegation, "ok", "done")
    spans = {r["run"]: r for r in client.get("/s/while/runs").json()}
    assert set(spans) == {"old", "plan", delegation.child_run_id}
    old, kid = spans["old"], spans[delegation.child_run_id]
    assert old["ended_ms"] < spans["plan"]["started_ms"]
    # The while of the child: the child and the run above it, not the run that ended before
    during = client.get(f"/s/while/runs?from={kid['started_ms']}&to={kid['ended_ms']}").json()
    assert [(r["run"], r["depth"]) for r in during] == [("plan", 0), (delegation.child_run_id, 1)]
    # The while of the first run: that run alone
    first = client.get(f"/s/while/runs?from={old['started_ms']}&to={old['ended_ms']}").json()
    assert [r["run"] for r in first] == ["old"]


def test_a_session_of_many_runs_lists_the_newest_with_the_runs_above_them(
    redis_store: EventStore, client: TestClient
) -> None:
    def started(run: str, **more: Any) -> dict[str, Any]:
        return {"type": "mutation", "agent": "a", "kind": "run.started", "run_id": run, **more}

    redis_store.append(lb.StreamId("many", "run-root"), 0, "root", [started("root")])
    for n in range(60):
        redis_store.append(
            lb.StreamId("many", f"run-r{n:02d}"),
            0,
            f"r{n}",
            [started(f"r{n:02d}", parent_run="root")],
        )
    page = client.get("/s/many").text
    listed = re.findall(r'<li data-run="([^"]+)"', page)
    # The 50 that started last, and the run above them (started first, kept for the tree)
    assert listed == ["root"] + [f"r{n:02d}" for n in range(10, 60)]
    assert "51 of 61: the newest" in page
    assert "61 runs" in page
