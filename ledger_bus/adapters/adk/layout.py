"""Where a Google ADK app's sessions live in the ledger: the ledger sessions, streams and kinds.

An ADK session (app, user, session id) is a ledger session of its own, `adk~<app>~<user>~<id>`
(a part that is not plain, `~` and its SHA-256, so that no two sessions meet), whose stream
`adk.events` holds, in order:

- an `adk.session` mutation: the session made, its ids, its session-scoped state and its time;
- for each ADK event, one append: an `adk.event` mutation holding the event as ADK dumps it
  (`model_dump(mode="json", exclude_none=True)`, what its database service stores), then what it
  says as the ledger's own events (adapters/adk/normalize.py), and every CHECKPOINT_EVERY events
  an `adk.state` mutation with the session-scoped state in full, so that the state at the head
  is read from the tail, however long the session;
- what an operator writes into it (`ledger-bus resolve`): a call's outcome;
- rarely, an `adk.abort` mutation: the version an event was to take, taken by another writer
  after the event's writer left its shared-state change pending too long (shared.py).

What an app's sessions share is the app's ledger session, `adk.app~<app>`: its `adk.app` stream
(the `app:` state: each change, with the state after it, so that a read takes the last record),
an `adk.user.<user>` stream per user (the `user:` state, alike) and `adk.sessions`, the sessions
made and deleted, which `list_sessions` reads. An event's change of that state is an intent that
its event's append commits (shared.py).
"""

from __future__ import annotations

from typing import Final

from ledger_bus.adapters.parts import part

AGENT: Final = "adk"
EVENTS: Final = "adk.events"
APP_STATE: Final = "adk.app"
USER_STATE: Final = "adk.user."
DIRECTORY: Final = "adk.sessions"

HEADER: Final = "adk.session"
EVENT: Final = "adk.event"
CHECKPOINT: Final = "adk.state"
DELTA: Final = "adk.delta"  # an app: or user: state change (shared.py)
ABORT: Final = "adk.abort"  # an event's version taken by another writer: its intents aborted
CREATED: Final = "adk.created"
DELETED: Final = "adk.deleted"

# A checkpoint of the session-scoped state every this many ADK events: a read of the head's
# state reads at most this many events back, and a checkpoint costs one state's bytes.
CHECKPOINT_EVERY: Final = 50


def session_of(app_name: str, user_id: str, session_id: str) -> str:
    """The ledger session of an ADK session."""
    return f"adk~{part(app_name)}~{part(user_id)}~{part(session_id)}"


def app_of(app_name: str) -> str:
    """The ledger session of what an app's sessions share."""
    return f"adk.app~{part(app_name)}"


def user_stream(user_id: str) -> str:
    return USER_STATE + part(user_id)


def run_of(invocation_id: str, author: str) -> str:
    """The run of one agent in one invocation: its calls are that run's attempts."""
    return f"adk/{part(invocation_id)}/{part(author)}"
