"""LangGraph on the ledger: a checkpointer, and tool calls recorded before they run.

    from ledger_bus.adapters.langgraph import LedgerSaver, record_tools

    saver = LedgerSaver(ledger_bus.connect(url))            # or await aio.connect(url)
    tools = ToolNode([search], **record_tools(saver))      # wrap_tool_call / awrap_tool_call
    graph = builder.compile(checkpointer=saver)

A thread is a session (its id, or `lg~<sha256>` for an id that is not a session id), so on a
Redis Cluster all of a thread lives in one slot. Each checkpoint namespace is a stream of the
session (`lg.ckpt`, `lg.ckpt.<ns>`): a `langgraph.checkpoint` mutation per checkpoint, with the
channel values that changed at it, and a `langgraph.writes` mutation per task's pending writes.
Values are the saver's serde bytes, base64, a field each; a large one is kept as an artifact
(spec 3.11), stored once however many checkpoints hold it. Reads fold the stream into a view
that is brought up to date by reading what was appended since (adapters/view.py): a get_tuple
is one read.

Deleting and pruning, in an append-only log: delete_thread deletes the session (its tool calls
too); prune("delete") deletes the namespace streams; prune("keep_latest") and delete_for_runs
append what stays as self-contained checkpoints and trim everything before them in that append
(a bounded stream, spec 3.12).

Tool calls: `record_tools(saver)` gives ToolNode's wrappers, which record each call of a tool as
a `tool_call` (requested) in the thread's `lg.tools` stream before the tool runs and its
`tool_result` after, holding a lease while it runs. A process killed inside a tool leaves an
open attempt the reconciler flags; resuming the thread returns a recorded result instead of
running the tool again, and stops (UnresolvedAttempt) at a call that was requested and never
finished, unless the tool is declared safe to replay.
"""

from __future__ import annotations

from ledger_bus.model.extras import needs

try:
    import langchain_core.messages  # noqa: F401  (the extra is there, or say which to install)
    import langgraph.checkpoint.base  # noqa: F401
except ImportError as err:
    raise needs(err, "ledger_bus.adapters.langgraph") from None

from ledger_bus.adapters.langgraph.layout import CAPABILITIES, namespace_stream, thread_session
from ledger_bus.adapters.langgraph.saver import LedgerSaver, record_tools

__all__ = [
    "CAPABILITIES",
    "LedgerSaver",
    "namespace_stream",
    "record_tools",
    "thread_session",
]
