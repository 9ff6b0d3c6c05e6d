"""Google ADK agents on a scripted model (no network), and one scenario run on any session
service: the differential tests' and the crash script's."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import AsyncGenerator, Callable
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.events.event import Event
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions.base_session_service import BaseSessionService, GetSessionConfig
from google.adk.tools.tool_context import ToolContext
from google.genai import types
from pydantic import Field

APP = "shop"


class ScriptedModel(BaseLlm):
    """A model that answers from its script, a response per request, keeping the requests."""

    model: str = "scripted-1"
    script: list[LlmResponse] = Field(default_factory=list)
    requests: list[LlmRequest] = Field(default_factory=list)

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        self.requests.append(llm_request)
        yield self.script.pop(0)


def said(text: str, tokens: tuple[int, int] = (12, 5)) -> LlmResponse:
    usage = types.GenerateContentResponseUsageMetadata(
        prompt_token_count=tokens[0], candidates_token_count=tokens[1]
    )
    content = types.Content(role="model", parts=[types.Part(text=text)])
    return LlmResponse(content=content, usage_metadata=usage, model_version="scripted-1")


def calls(name: str, args: dict[str, Any]) -> LlmResponse:
    part = types.Part(function_call=types.FunctionCall(name=name, args=args))
    return LlmResponse(content=types.Content(role="model", parts=[part]))


def user(text: str) -> types.Content:
    return types.Content(role="user", parts=[types.Part(text=text)])


def lookup(city: str, tool_context: ToolContext) -> dict[str, Any]:
    """The weather in a city; keeps what it was asked in state of every scope."""
    tool_context.state["last_city"] = city
    tool_context.state["app:lookups"] = int(tool_context.state.get("app:lookups", 0)) + 1
    tool_context.state["user:home"] = city
    tool_context.state["temp:scratch"] = f"looked up {city}"
    return {"city": city, "weather": "sunny"}


def agents(root_script: list[LlmResponse], billing_script: list[LlmResponse]) -> LlmAgent:
    """A root agent with a tool, that may transfer to a billing agent (which keeps its answer
    in state, output_key)."""
    billing = LlmAgent(
        name="billing",
        model=ScriptedModel(script=billing_script),
        instruction="You handle refunds.",
        output_key="billing_note",
    )
    return LlmAgent(
        name="root",
        model=ScriptedModel(script=root_script),
        instruction="You help shoppers.",
        tools=[lookup],
        sub_agents=[billing],
    )


ROOT = [
    calls("lookup", {"city": "Paris"}),
    said("sunny in Paris"),
    calls("lookup", {"city": "Oslo"}),
    said("sunny in Oslo too"),
    calls("transfer_to_agent", {"agent_name": "billing"}),
    said("hello bob"),
]
BILLING = [said("refund issued", (30, 4)), said("you're welcome")]
TURNS: list[tuple[str, dict[str, Any] | None]] = [
    ("weather in Paris?", {"app:plan": "pro", "user:lang": "fr", "temp:t": 1, "mood": "curious"}),
    ("and in Oslo?", None),
    ("I need a refund", {"mood": "annoyed", "user:lang": None}),
    ("thanks", {"temp:t": 2}),
]


async def run_turn(
    runner: Runner, user_id: str, session_id: str, text: str, delta: dict[str, Any] | None = None
) -> list[Event]:
    out = []
    async for event in runner.run_async(
        user_id=user_id, session_id=session_id, new_message=user(text), state_delta=delta
    ):
        out.append(event)
    return out


async def scenario(service: BaseSessionService) -> dict[str, Any]:
    """Two users' sessions through a Runner: tools, a transfer, state of every scope; what the
    service then hands back (sessions, events, states, lists, reads with a config) and what the
    models were asked, as `canonical` makes them comparable."""
    root = agents(list(ROOT), list(BILLING))
    runner = Runner(app_name=APP, agent=root, session_service=service)
    made = await service.create_session(
        app_name=APP,
        user_id="ann",
        session_id="s1",
        state={"app:region": "eu", "user:tier": "gold", "temp:x": 1, "cart": ["pen"]},
    )
    for text, delta in TURNS:
        await run_turn(runner, "ann", "s1", text, delta)
    await service.create_session(app_name=APP, user_id="bob", session_id="s2")
    await run_turn(runner, "bob", "s2", "hi", {"user:tier": "silver"})
    full = await service.get_session(app_name=APP, user_id="ann", session_id="s1")
    assert full is not None
    fourth = full.events[3].timestamp
    recent = await service.get_session(
        app_name=APP, user_id="ann", session_id="s1", config=GetSessionConfig(num_recent_events=3)
    )
    after = await service.get_session(
        app_name=APP,
        user_id="ann",
        session_id="s1",
        config=GetSessionConfig(after_timestamp=fourth),
    )
    none = await service.get_session(
        app_name=APP, user_id="ann", session_id="s1", config=GetSessionConfig(num_recent_events=0)
    )
    listed = await service.list_sessions(app_name=APP)
    anns = await service.list_sessions(app_name=APP, user_id="ann")
    bob = await service.get_session(app_name=APP, user_id="bob", session_id="s2")
    await service.delete_session(app_name=APP, user_id="bob", session_id="s2")
    gone = await service.get_session(app_name=APP, user_id="bob", session_id="s2")
    after_delete = await service.list_sessions(app_name=APP)
    models = [root.model, billing_of(root).model]
    found: dict[str, Any] = canonical(
        {
            "made": made.state,
            "full": full,
            "recent": recent,
            "after": after,
            "none": none,
            "bob": bob,
            "gone": gone,
            "listed": [(s.user_id, s.id, s.state, len(s.events)) for s in listed.sessions],
            "anns": [(s.user_id, s.id, s.state) for s in anns.sessions],
            "after_delete": [(s.user_id, s.id) for s in after_delete.sessions],
            "requests": [
                [c.model_dump(mode="json", exclude_none=True) for c in r.contents]
                for m in models
                if isinstance(m, ScriptedModel)
                for r in m.requests
            ],
        }
    )
    return found


def billing_of(root: LlmAgent) -> LlmAgent:
    billing = root.sub_agents[0]
    assert isinstance(billing, LlmAgent)
    return billing


def canonical(value: Any) -> Any:
    """What differs from run to run (ADK's ids, times) named by order of first appearance."""
    names: dict[str, str] = {}

    def name(kind: str, v: str) -> str:
        return names.setdefault(f"{kind}:{v}", f"<{kind} {sum(k.startswith(kind) for k in names)}>")

    def walk(v: Any, key: str = "") -> Any:
        if hasattr(v, "model_dump"):
            v = v.model_dump(mode="json", exclude_none=True)
        if isinstance(v, dict):
            return {
                k: walk(x, k) for k, x in v.items() if k not in ("timestamp", "last_update_time")
            }
        if isinstance(v, list | tuple):
            return [walk(x) for x in v]
        if isinstance(v, str) and key in ("id", "invocation_id"):
            return name(key, v)
        if isinstance(v, str) and v.startswith(("adk-", "e-")):
            return name("generated", v)
        return v

    return walk(value)


def in_thread(make: Callable[[], Any]) -> Any:
    """A coroutine run to its end on an event loop of its own, in a thread of its own: for a
    caller whose thread runs a loop already (the browser tests' Playwright)."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: asyncio.run(make())).result()
