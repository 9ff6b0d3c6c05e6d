"""A LangGraph thread's node executions as the ledger's runs (normalize.py names them).

A task's `run.started` and `run.finished` go in the append of its writes: LangGraph gives the
saver a task's writes once it has run, so the two say that it ran, from which checkpoint, and
how it ended. The run's parent (`parent_run`) is the delegation that made it:

- a subgraph's task: the run of the node that ran the subgraph, named from the task's own
  config (LangGraph passes a subgraph the parent task's path and the checkpoint it ran from);
- a Send's task: the run that sent it, found among the writes of the step before, in the order
  LangGraph gives sends their places (by the sending task's path, then by write).
"""

from __future__ import annotations

import abc
import builtins
from collections.abc import Mapping, Sequence
from typing import Any

from ledger_bus.adapters.langgraph.layout import AGENT, Namespace, Typed
from ledger_bus.adapters.langgraph.normalize import (
    TASKS,
    node_of,
    send_of,
    task_run,
    task_status,
)
from ledger_bus.adapters.view import Views
from ledger_bus.model.ids import StreamId
from ledger_bus.model.jsontext import JSONObject
from ledger_bus.store.base import EventStore
from ledger_bus.store.steps import Op, Sleep

NS_SEP = "|"  # LangGraph's separator of a checkpoint namespace's parts
SENDER_WAIT = 2.0  # seconds a Send's run waits for the checkpoint that names its sender


class TaskRuns(abc.ABC):
    """The runs of a saver's tasks (LedgerSaver's), on its views and serde."""

    store: EventStore
    _views: Views[Namespace]

    @abc.abstractmethod
    def _load(self, typed: Typed) -> Any: ...

    def _task_events_op(
        self,
        config: Mapping[str, Any],
        stream: StreamId,
        task_id: str,
        task_path: str,
        writes: Sequence[tuple[str, Any]],
    ) -> Op[builtins.list[JSONObject]]:
        """The run events of one task's writes: none for LangGraph's own (the input, a resume,
        a task path not given)."""
        configurable = config["configurable"]
        checkpoint_id = str(configurable["checkpoint_id"])
        run_id = task_run(checkpoint_id, task_path)
        if run_id is None:
            return []
        node = node_of(task_path)
        parent: str | None = _subgraph_parent(config)
        sent = send_of(task_path)
        if sent is not None:
            sender = yield from self._sender_op(stream, checkpoint_id, sent)
            if sender is not None:
                parent, node = sender
        view = self._views.of(stream)
        again = any(key[0] == task_id for key in view.state.writes.get(checkpoint_id, {}))
        started = {
            "type": "mutation",
            "agent": node or AGENT,
            "kind": "run.resumed" if again else "run.started",
            "run_id": run_id,
            "task_id": task_id,
            "checkpoint_id": checkpoint_id,
            "node": node,
            "parent_run": parent,
        }
        finished = {
            "type": "mutation",
            "agent": node or AGENT,
            "kind": "run.finished",
            "run_id": run_id,
            "status": task_status(writes),
        }
        return [{k: v for k, v in e.items() if v is not None} for e in (started, finished)]

    def _sender_op(
        self, stream: StreamId, checkpoint_id: str, place: int
    ) -> Op[tuple[str, str | None] | None]:
        """(the run that sent it, the node it sent to) of the Send at `place` among those the
        step before `checkpoint_id` wrote; None where the thread does not hold them."""
        view = self._views.of(stream)
        known, found = _sender(view.state, checkpoint_id, place, self._load)
        pause, waited = 0.002, 0.0
        while not known:
            # LangGraph writes the checkpoint a Send's task ran from on a thread of its own,
            # while the task runs: a fast task's writes can come first. Wait for it a while.
            state = yield from view.refresh_op(self.store)
            known, found = _sender(state, checkpoint_id, place, self._load)
            if known or waited >= SENDER_WAIT:
                break
            yield Sleep(pause)
            waited += pause
            pause = min(pause * 2, 0.05)
        return found


def _sender(
    state: Namespace, checkpoint_id: str, place: int, load: Any
) -> tuple[bool, tuple[str, str | None] | None]:
    """(whether the thread holds what names the sender: the checkpoint and the writes of the
    step before it; the sender's run and the node it sent to, if it names one)."""
    saved = state.checkpoints.get(checkpoint_id)
    if saved is None:
        return False, None
    before = saved.fields.get("parent_checkpoint_id")
    if not before:  # sent by the input (a Command's goto): no run sent it
        return True, None
    if before not in state.writes:
        return False, None
    sends = sorted(
        (w for w in state.writes[before].values() if w[1] == TASKS),
        key=lambda w: (str(w[3]), w[4]),
    )
    if place >= len(sends):
        return True, None
    _, _, value, task_path, _ = sends[place]
    run_id = task_run(before, str(task_path))
    if run_id is None:
        return True, None
    node = getattr(load(value), "node", None)
    return True, (run_id, str(node) if node is not None else None)


def _subgraph_parent(config: Mapping[str, Any]) -> str | None:
    """The run of the node that ran this subgraph: its path is in the subgraph's config, and
    the checkpoint it ran from in the map of the parent namespaces' checkpoints."""
    ns = str(config["configurable"].get("checkpoint_ns", ""))
    if not ns:
        return None
    parent_ns = ns.rpartition(NS_SEP)[0]
    ran_from = config["configurable"].get("checkpoint_map", {}).get(parent_ns)
    path = config.get("metadata", {}).get("langgraph_path")
    if not ran_from or not path:
        return None
    return task_run(str(ran_from), path)
