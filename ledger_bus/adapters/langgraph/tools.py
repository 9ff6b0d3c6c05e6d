"""LangGraph's tool calls recorded before they run: ToolNode's wrappers (record_tools)."""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from langchain_core.messages import ToolCall, ToolMessage

from ledger_bus.adapters.calls import CallLedger, ToolStep, decided_text
from ledger_bus.adapters.langgraph.layout import AGENT, TOOLS, Typed, thread_session
from ledger_bus.model.errors import InvalidInput
from ledger_bus.model.ids import StreamId
from ledger_bus.model.records import RecordedEvent
from ledger_bus.store.steps import Op

T = TypeVar("T")


class ToolRecording(abc.ABC):
    """The saver's tool wrappers, on its drivers and serde (LedgerSaver's)."""

    calls: CallLedger
    # Whether this saver's record_tools is in use: its tool calls are requested there.
    tools_recorded: bool = False

    @abc.abstractmethod
    def _sync(self, op: Op[T]) -> T: ...

    @abc.abstractmethod
    async def _async(self, op: Op[T]) -> T: ...

    @abc.abstractmethod
    def _dump(self, value: object) -> Typed: ...

    @abc.abstractmethod
    def _load(self, typed: Typed) -> object: ...

    def record_tools(self, *, safe_to_replay: Sequence[str] = ()) -> dict[str, Any]:
        """ToolNode's `wrap_tool_call` and `awrap_tool_call`, recording each call of a tool in
        the thread's session (`lg.tools`) before it runs and its result after; on a resumed
        thread, a call whose result is recorded returns it instead of running the tool again.
        `safe_to_replay`: the tools that may run again after a crash left their call unfinished
        (the others stop the resume: UnresolvedAttempt).

        Each call is one attempt, named by its call id: its request is the one written here,
        just before the tool runs, and the checkpoints that hold the model's reply then write
        no request of their own (LangGraph writes checkpoints on a thread of their own, so a
        checkpoint and a tool that start together would both find none written)."""
        safe = frozenset(safe_to_replay)
        self.tools_recorded = True

        def begin(request: Any) -> Op[tuple[bool, Any]]:
            call = request.tool_call
            step = ToolStep(
                call["id"], call["name"], call["args"], call["name"] in safe, named=True
            )
            begun: tuple[bool, Any] = yield from self._guard(request).begin_op(step)
            return begun

        def wrap(request: Any, execute: Callable[[Any], Any]) -> Any:
            call = request.tool_call
            guard = self._guard(request)
            done, found = self._sync(begin(request))
            if done:
                return self._replayed(found, call)
            return guard.finish_sync(found, lambda: execute(request), self._outcome)

        async def awrap(request: Any, execute: Callable[[Any], Any]) -> object:
            call = request.tool_call
            guard = self._guard(request)
            done, found = await self._async(begin(request))
            if done:
                return self._replayed(found, call)
            return await guard.finish_async(
                found, lambda: execute(request), self._outcome, self._async
            )

        return {"wrap_tool_call": wrap, "awrap_tool_call": awrap}

    def _outcome(self, value: object) -> tuple[str, Any]:
        """What a tool returned, as its recorded result: a ToolMessage's content, name and
        status (readable in the ledger); anything else (a Command) in the saver's serde."""
        if isinstance(value, ToolMessage):
            status = "error" if value.status == "error" else "ok"
            return status, {"content": value.content, "name": value.name, "status": value.status}
        return "ok", {"serde": self._dump(value)}

    def _replayed(self, recorded: RecordedEvent, call: ToolCall) -> object:
        """A call's recorded outcome as the tool returned it. An outcome someone else decided
        (`ledger-bus resolve --ok VALUE`, `--error VALUE`) is a ToolMessage of that value,
        successful or not; a tool that raised, or an outcome nobody knows, an error one."""
        result = recorded.get("result")
        if recorded.agent == AGENT and isinstance(result, dict):
            if "serde" in result:
                return self._load(result["serde"])
            if "content" in result:
                return ToolMessage(
                    content=result["content"],
                    name=result.get("name") or call["name"],
                    tool_call_id=call["id"],
                    status=result.get("status", "success"),
                )
        return ToolMessage(
            content=decided_text(result),
            name=call["name"],
            tool_call_id=call["id"],
            status="success" if recorded.get("status") == "ok" else "error",
        )

    def _guard(self, request: Any) -> Any:
        config = request.runtime.config if request.runtime is not None else {}
        thread_id = str(config.get("configurable", {}).get("thread_id", ""))
        if not thread_id:
            raise InvalidInput("a recorded tool runs in a graph with a thread_id in its config")
        return self.calls.guard(StreamId(thread_session(thread_id), TOOLS), self._sync)
