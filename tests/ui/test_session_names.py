"""The web view finds a session by the name its framework knows it by (ledger_bus/agent/names.py):
ADK's session id, a LangGraph thread's id. The search lists it; its page at that name opens it,
or names each session the name may mean; a token sees only its own sessions this way too."""

from __future__ import annotations

import html
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

import ledger_bus as lb
from ledger_bus.access.identity import Identity
from ledger_bus.access.tokens import TokenFile, add_token
from ledger_bus.agent.names import adk_part, digested
from ledger_bus.store.base import EventStore
from ledger_bus.ui.app import session_path
from tests.support.events import msg
from tests.support.ui import view_app


@pytest.fixture
def client(redis_url: str, prefix: str) -> Iterator[TestClient]:
    with TestClient(view_app(redis_url, prefix), follow_redirects=False) as c:
        yield c


def session_of(app: str, user: str, session: str) -> str:
    """The ledger session Google ADK's session is kept in (adapters/adk/layout.py)."""
    return f"adk~{adk_part(app)}~{adk_part(user)}~{adk_part(session)}"


def thread_session(thread: str) -> str:
    """The ledger session of a LangGraph thread whose id is no session id."""
    return digested(thread)[0]


def listed(client: TestClient, search: str) -> list[str]:
    rows = client.get("/", params={"q": search, "format": "json"}).json()["sessions"]
    return sorted(row["session_id"] for row in rows)


def said(store: EventStore, session: str) -> None:
    store.append(lb.StreamId(session, "main"), 0, "a1", [msg(f"in {session}")])


def test_the_search_lists_a_session_by_its_framework_s_id(
    redis_store: EventStore, client: TestClient
) -> None:
    # Given ADK sessions (one of an id that is not plain, kept under its digest) and a
    # LangGraph thread whose id is no session id
    for session in (
        session_of("shop", "ann", "t1"),
        session_of("shop", "ann", "chat 42/β"),
        thread_session("order #7"),
        "t2",
    ):
        said(redis_store, session)
    # Then each is found by the id its framework knows
    assert listed(client, "t1") == ["adk~shop~ann~t1"]
    assert listed(client, "chat 42/β") == [session_of("shop", "ann", "chat 42/β")]
    assert listed(client, "order #7") == [thread_session("order #7")]
    # and a part of a session's own name still finds it
    assert listed(client, "ann") == sorted(
        [session_of("shop", "ann", "t1"), session_of("shop", "ann", "chat 42/β")]
    )


def test_a_session_s_page_at_its_framework_s_id_opens_it(
    redis_store: EventStore, client: TestClient
) -> None:
    said(redis_store, "adk~shop~ann~t1")
    said(redis_store, thread_session("order #7"))
    # When /s/t1 is asked for, where only ADK's session t1 is
    went = client.get("/s/t1?type=message")
    # Then it is a redirect to that session's page, the filters kept
    assert went.status_code == 307
    assert went.headers["location"] == session_path("adk~shop~ann~t1") + "?type=message"
    page = client.get(went.headers["location"])
    assert page.status_code == 200
    assert "in adk~shop~ann~t1" in page.text
    # and a thread id that is no session id goes to its thread's session
    went = client.get(session_path("order #7"))
    assert went.headers["location"] == session_path(thread_session("order #7"))
    # A name no session has is not found
    missing = client.get("/s/t9")
    assert missing.status_code == 404
    assert "no session 't9' in this ledger" in html.unescape(missing.text)


def test_a_name_several_sessions_go_by_lists_them(
    redis_store: EventStore, client: TestClient
) -> None:
    for user in ("ann", "bob"):
        said(redis_store, session_of("shop", user, "t1"))
    page = client.get("/s/t1")
    assert page.status_code == 404
    assert "a framework knows these by that name" in page.text
    for user in ("ann", "bob"):
        assert f'<a href="{session_path(session_of("shop", user, "t1"))}">' in page.text


def test_a_token_finds_by_name_only_sessions_it_may_read(
    redis_url: str, prefix: str, redis_store: EventStore, tmp_path: Path
) -> None:
    # Given an ADK session t1 of team b's, and a reader of team a's
    said(redis_store, "adk~team-b~ann~t1")
    file = str(tmp_path / "tokens.json")
    reader = add_token(file, Identity("viewer", "reader", "adk~team-a~*"))
    app = view_app(redis_url, prefix, tokens=TokenFile(file))
    with TestClient(app, follow_redirects=False) as client:
        headers = {"Authorization": f"Bearer {reader}"}
        # Then its search and its page at t1 find nothing of team b's
        found = client.get("/?q=t1&format=json", headers=headers).json()
        assert found["sessions"] == []
        refused = client.get("/s/t1", headers=headers)
        assert refused.status_code == 403
        assert "team-b" not in refused.text
