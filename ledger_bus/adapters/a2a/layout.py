"""Where an A2A server's tasks live in the ledger.

Each task is a ledger session of its own, `a2a~<task id>` (the id itself when plain, else `~` and
its SHA-256: ledger_bus/adapters/parts.py), whose stream `a2a.task` holds one append per save:
the ledger's own events for what changed (normalize.py), then an `a2a.task` mutation holding the
task as saved (`task`, protobuf's JSON mapping), the A2A event that made it (`event`, a
StreamResponse's JSON, when the save came from one) and its owner. The record is last in its
append, so the stream's version after a save is the record's version: the task's version, which
a versioned save gives back as its expected version. A deletion is an `a2a.deleted` record; the
task may be made again after it, at the next version.

The tasks an owner has made are listed in `a2a.tasks~<owner>`, stream `a2a.tasks`: one
`a2a.made` entry per task id (a listing reads each task's head, so a deleted task is skipped
there, not here).
"""

from __future__ import annotations

from typing import Final

from ledger_bus.adapters.parts import part
from ledger_bus.model.ids import StreamId

AGENT: Final = "a2a"
STREAM: Final = "a2a.task"
DIRECTORY: Final = "a2a.tasks"

TASK: Final = "a2a.task"
DELETED: Final = "a2a.deleted"
MADE: Final = "a2a.made"


def session_of(task_id: str) -> str:
    """The ledger session of an A2A task."""
    return f"a2a~{part(task_id)}"


def stream_of(task_id: str) -> StreamId:
    return StreamId(session_of(task_id), STREAM)


def directory_of(owner: str) -> StreamId:
    """Where the tasks an owner made are listed."""
    return StreamId(f"a2a.tasks~{part(owner or '-')}", DIRECTORY)


def run_of(task_id: str) -> str:
    """The run of the agent working on a task: the task's calls and messages are that run's."""
    return f"a2a/{part(task_id)}"
