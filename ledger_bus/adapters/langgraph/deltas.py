"""The message lists of a thread's checkpoints, kept as deltas whose new messages are written
once as the ledger's own events (normalize.py), with the node execution that wrote each."""

from __future__ import annotations

import abc
import base64
import builtins
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from ledger_bus.adapters.calls import CallLedger
from ledger_bus.adapters.langgraph.layout import (
    MESSAGES,
    TOOLS,
    Namespace,
    Saved,
    Typed,
    channel_versions,
)
from ledger_bus.adapters.langgraph.normalize import Writer, node_of, task_run
from ledger_bus.adapters.packed import msgpack_array
from ledger_bus.model.ids import StreamId
from ledger_bus.model.jsontext import JSONObject
from ledger_bus.store.steps import Op


class MessageDeltas(abc.ABC):
    """The saver's message lists (LedgerSaver's), on its serde and its recorded tools."""

    calls: CallLedger
    serde: Any

    @abc.abstractmethod
    def _dump(self, value: object) -> Typed: ...

    @abc.abstractmethod
    def _load(self, typed: Typed) -> Any: ...

    def _messages(  # noqa: PLR0913  (the list, where it is written, and what it is a delta on)
        self,
        state: Namespace,
        writer: Writer,
        channel: str,
        messages: builtins.list[BaseMessage],
        parent: str | None,
        seen: dict[str, Any],
        inner: bool = False,
    ) -> builtins.list[Any]:
        """A list of messages as a delta on the list the parent checkpoint held (MESSAGES),
        its new messages written as events by `writer`; the whole list, by event ids, when it
        does not begin with the parent's. `inner`: a subgraph's namespace, whose messages are
        named by their ids and not written as events: a subgraph's input is its parent's
        messages, and what it adds reaches its parent's list, where each is written once (the
        two namespaces' checkpoints are written by threads of their own, in no fixed order)."""
        base = ""
        saved = state.checkpoints.get(parent) if parent else None
        if saved is not None:
            base = self._channel_versions(saved).get(channel, "")
        known = state.refs(channel, base) if base else None
        kept: builtins.list[str | None]
        if (
            known is not None
            and len(known) <= len(messages)
            and all(self._same(state, ref, m) for ref, m in zip(known, messages, strict=False))
        ):
            kept = [None] * (len(messages) - len(known))
            messages = messages[len(known) :]
        else:
            base = ""
            by_id: dict[str, str] = {}
            for ref in state.natives:
                if (message_id := self._object(state, ref).id) is not None:
                    by_id[message_id] = ref
            kept = []
            for message in messages:
                same = by_id.get(message.id or "")
                kept.append(same if same and self._same(state, same, message) else None)
        fresh = [m for m, known_ref in zip(messages, kept, strict=True) if known_ref is None]
        made, unplaced = self._runs(state, parent, fresh, seen)
        if not inner:
            writer.unplaced += unplaced
        items: builtins.list[str | builtins.list[str]] = []
        for message, reused in zip(messages, kept, strict=True):
            if reused is not None:
                items.append(reused)
                continue
            run_id, node = made.get(id(message), (None, None))
            if inner and message.id:
                written = f"m~{message.id}"
            else:
                written = writer.message(message, run_id, node)
            items.append([written, *self._dump(message)])
        return [MESSAGES, base, items]

    def _recorded_op(
        self, state: Namespace, session_id: str, messages: builtins.list[BaseMessage]
    ) -> Op[tuple[dict[str, str], dict[str, str]]]:
        """What the thread's recorded tools (`lg.tools`, record_tools) hold of the tool calls
        these messages ask for and answer: attempt id -> the event id of its request, and of
        its outcome. A call is one attempt: its request and its result are written once,
        whichever of the tool and the checkpoint comes first (LangGraph may run a tool before
        the checkpoint that asks for it is written)."""
        asked: set[str] = set()
        for m in messages:
            if isinstance(m, AIMessage):
                asked.update(str(c["id"]) for c in m.tool_calls if c.get("id"))
            elif isinstance(m, ToolMessage):
                asked.add(str(m.tool_call_id))
        unknown = {a for a in asked - state.recorded.keys() if a not in state.results}
        if unknown:
            found = yield from self.calls.recorded_op(StreamId(session_id, TOOLS), unknown)
            for attempt, (request, outcome) in found.items():
                if outcome is not None:  # final: never looked up again
                    state.recorded[attempt] = (request, outcome.event_id)
                else:
                    state.requested[attempt] = request
        requests = {a: r for a, (r, _) in state.recorded.items() if a in asked}
        requests.update({a: r for a, r in state.requested.items() if a in asked})
        outcomes = {a: o for a, (_, o) in state.recorded.items() if a in asked}
        return requests, outcomes

    def _message_list(self, state: Namespace, refs: builtins.list[str]) -> builtins.list[Any]:
        """The messages `refs` name, read afresh. Messages in the serde's msgpack (its default)
        are read as one msgpack array of them, one call, as a whole list is read from one blob;
        each message's bytes are decoded from base64 once."""
        natives = [state.natives[ref] for ref in refs]
        if not all(typed[0] == "msgpack" for typed in natives):
            return [self._load(typed) for typed in natives]
        raw = state.raw
        parts = []
        for ref, typed in zip(refs, natives, strict=True):
            found = raw.get(ref)
            if found is None:
                found = raw[ref] = base64.b64decode(typed[1])
            parts.append(found)
        found_list: builtins.list[Any] = self.serde.loads_typed(("msgpack", msgpack_array(parts)))
        return found_list

    def _object(self, state: Namespace, ref: str) -> Any:
        """The message an event id names, read once (a copy of its own, never handed out)."""
        found = state.objects.get(ref)
        if found is None:
            found = state.objects[ref] = self._load(state.natives[ref])
        return found

    def _same(self, state: Namespace, ref: str, message: BaseMessage) -> bool:
        return ref in state.natives and bool(self._object(state, ref) == message)

    def _channel_versions(self, saved: Saved) -> dict[str, str]:
        if saved.versions is None:
            found = self._load(saved.fields["checkpoint"]).get("channel_versions", {})
            saved.versions = channel_versions(found)
        return saved.versions

    def _runs(
        self,
        state: Namespace,
        parent: str | None,
        messages: Sequence[BaseMessage],
        seen: JSONObject,
    ) -> tuple[dict[int, tuple[str | None, str | None]], int]:
        """Which node execution wrote each of `messages`: id(message) -> (run id, node), and
        how many of them no task's writes hold (yet). By the writes recorded for the parent
        checkpoint, or being written by this process, the task's; where they are not known
        yet (LangGraph writes them and the checkpoint on threads of their own), the one node
        that ran in the step (its `versions_seen` moved). Either way the run is named as its
        writes name it (normalize.task_run)."""
        written: builtins.list[tuple[str | None, str | None, Any]] = []
        stored = [(w[3], w[2]) for w in state.writes.get(parent or "", {}).values()]
        for task_path, value in stored + state.announced.get(parent or "", []):
            if value[0] == "empty":
                continue
            run_id = task_run(parent or "", str(task_path))  # None: LangGraph's own write
            loaded = self._load(value)
            node = node_of(str(task_path))
            for m in loaded if isinstance(loaded, builtins.list) else [loaded]:
                if isinstance(m, BaseMessage):
                    written.append((run_id, node, m))
        made: dict[int, tuple[str | None, str | None]] = {}
        for message in messages:
            for n, (task_id, node, m) in enumerate(written):
                if _alike(m, message):
                    made[id(message)] = (task_id, node)
                    del written[n]
                    break
        unplaced = len(messages) - len(made)
        saved = state.checkpoints.get(parent) if parent else None
        if saved is not None and len(made) < len(messages):
            before = self._load(saved.fields["checkpoint"]).get("versions_seen", {})
            ran = [n for n, v in seen.items() if before.get(n) != v and not n.startswith("__")]
            if len(ran) == 1 and parent:
                for message in messages:
                    made.setdefault(id(message), (f"{parent}.{ran[0]}", ran[0]))  # task_run's
        return made, unplaced


def _alike(written: BaseMessage, message: BaseMessage) -> bool:
    """Whether a message a task wrote is this message of the channel (the reducer gives a
    message without an id one, so ids are compared only where both have one)."""
    if type(written) is not type(message):
        return False
    if written.id and message.id:
        return bool(written.id == message.id)
    if isinstance(written, ToolMessage) and isinstance(message, ToolMessage):
        return bool(written.tool_call_id == message.tool_call_id)
    return bool(written.content == message.content)
