"""The sessions a user may mean by a name: the session of that name, else those an adapter made
for a framework's session of that id (ADK, LangGraph, the Agents SDK), held to the adapters'
own naming."""

from __future__ import annotations

import asyncio

import pytest

from ledger_bus.adapters.a2a.layout import session_of as a2a_session_of
from ledger_bus.adapters.adk import LedgerSessionService
from ledger_bus.adapters.adk.layout import session_of
from ledger_bus.adapters.langgraph.layout import thread_session
from ledger_bus.adapters.openai_agents import LedgerSession, ledger_session
from ledger_bus.agent.names import framework_id, sessions_named
from ledger_bus.store.memory import MemoryStore

# Ids as users give them: plain, with what a ledger name refuses, with the parts' own `~`,
# longer than a plain part, and empty-looking.
IDS = ["t1", "chat 1", "a~b", "x" * 61, "thread/7", "é", "{braced}"]


def test_a_session_of_that_name_is_the_one_meant() -> None:
    # Given a session named t1 and an ADK session whose id is t1
    sessions = ["t1", "adk~app~ann~t1"]
    # Then t1 means the session of that name, alone
    assert sessions_named("t1", sessions) == ["t1"]


def test_an_adk_session_is_found_by_its_session_id() -> None:
    sessions = ["adk~shop~ann~t1", "adk~shop~bob~t2", "adk.app~shop", "other"]
    assert sessions_named("t1", sessions) == ["adk~shop~ann~t1"]
    assert sessions_named("t3", sessions) == []


def test_several_framework_sessions_of_one_id_are_all_named_sorted() -> None:
    sessions = ["adk~shop~bob~t1", "adk~desk~ann~t1", "adk~shop~ann~t10", "t10x"]
    assert sessions_named("t1", sessions) == ["adk~desk~ann~t1", "adk~shop~bob~t1"]


def test_a_part_that_only_looks_like_the_id_is_not_taken_for_it() -> None:
    # The app or the user being t1 is not the session id t1; nor is a suffix of a longer id.
    sessions = ["adk~t1~ann~s", "adk~shop~t1~s", "adk~shop~ann~xt1", "notadk~a~b~t1"]
    assert sessions_named("t1", sessions) == []


def test_names_of_no_session_find_nothing() -> None:
    assert sessions_named("", []) == []
    assert sessions_named("t1", []) == []


@pytest.mark.parametrize("given", IDS)
def test_each_adapters_naming_is_undone(given: str) -> None:
    """The rules written again in agent/names.py are the adapters' own."""
    adk = session_of("my app", "ann@example.com", given)
    thread, agents_sdk = thread_session(given), ledger_session(given)
    task = a2a_session_of(given)
    decoys = [session_of("my app", "ann", given + "x"), session_of(given, given, "other")]
    sessions = [adk, thread, agents_sdk, task, *decoys, a2a_session_of(given + "x")]
    if given in sessions:
        # Kept under its own name (a thread or an Agents SDK session whose id is a session id)
        assert sessions_named(given, sessions) == [given]
        sessions = [s for s in sessions if s != given]
    assert sessions_named(given, sessions) == sorted({adk, thread, agents_sdk, task} - {given})
    assert framework_id(adk) is not None
    assert framework_id(decoys[0]) != framework_id(adk)


def test_sessions_the_adapters_made_are_found_by_the_id_their_users_know() -> None:
    store = MemoryStore()

    async def made() -> None:
        service = LedgerSessionService(store)
        await service.create_session(app_name="shop", user_id="ann", session_id="t1")
        await service.create_session(app_name="shop", user_id="ann", session_id="chat 9")
        session = LedgerSession("chat 1", store)
        await session.add_items([{"role": "user", "content": "hi"}])

    asyncio.run(made())
    known = [s for s, _ in store.sessions()]
    assert "t1" not in known
    assert "chat 1" not in known
    (adk,) = sessions_named("t1", known)
    assert adk.startswith("adk~shop~ann~")
    assert len(sessions_named("chat 9", known)) == 1
    (agents_sdk,) = sessions_named("chat 1", known)
    assert agents_sdk.startswith("oa~")
