"""Probes: how a reconciler finds out whether an open call's effect took place.

A call a crash left open is known to the ledger only as requested; the system its tool acted on
(a payment API, a ticket system, a cloud API) knows whether the effect happened, and can usually
be asked by the call's idempotency key. A probe is a function registered for a tool name that
asks it: `probe(call) -> Probed`.

- `Probed.done(result, evidence)`: it happened; the reconciler records the call's result, with
  `settled_by` (the probe, its evidence, when, which reconciler), and a resumed run gets it
  without running the tool;
- `Probed.not_done(evidence)`: it did not; the reconciler closes the attempt so that the resumed
  run calls the tool again, with the same idempotency key, safe to replay or not;
- `Probed.unknown(reason)`: the probe cannot tell; the call is flagged as it is without a probe,
  the reason beside the flag, and waits for `ledger-bus resolve` (or a later pass's probe).

A probe that raises, runs past its timeout or returns anything else is taken as unknown, with
what it did named as the reason.
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

from ledger_bus.agent.call_events import NOT_DONE
from ledger_bus.model.errors import InvalidInput
from ledger_bus.model.jsontext import JSON, JSONObject, format_time
from ledger_bus.model.records import OpenAttempt, RecordedEvent

State = Literal["done", "not_done", "unknown"]
DEFAULT_TIMEOUT_S: Final = 10.0


@dataclass(frozen=True)
class ProbeCall:
    """An open call as a probe sees it: what was asked, under which key, since when."""

    session_id: str
    run_id: str | None
    step_id: str | None
    attempt_id: str
    tool: str
    args: JSONObject
    idempotency_key: str | None  # None for a call recorded before keys were
    requested_at: str  # ISO 8601 UTC, the request's commit time
    stream: str
    cursor: str

    @classmethod
    def of(cls, attempt: OpenAttempt, request: RecordedEvent) -> ProbeCall:
        args = request.get("args")
        key = request.get("idempotency_key")
        return cls(
            attempt.session_id,
            attempt.run_id,
            request.step_id,
            attempt.attempt_id,
            attempt.tool,
            args if isinstance(args, dict) else {},
            key if isinstance(key, str) else None,
            format_time(attempt.opened_ms),
            attempt.stream,
            attempt.cursor,
        )


@dataclass(frozen=True)
class Probed:
    """What a probe found: make one with done(), not_done() or unknown()."""

    state: State
    result: JSON = None
    evidence: JSON = None
    reason: str = ""

    @classmethod
    def done(cls, result: JSON = None, evidence: JSON = None) -> Probed:
        """The effect took place; `result` is the call's result as the tool would have returned
        it, `evidence` what shows it (JSON: a charge id, a response), kept on the record."""
        return cls("done", result, evidence)

    @classmethod
    def not_done(cls, evidence: JSON = None) -> Probed:
        """The effect did not take place; the call may run again under the same key."""
        return cls("not_done", None, evidence)

    @classmethod
    def unknown(cls, reason: str) -> Probed:
        """The probe cannot tell; `reason` is shown beside the call's flag."""
        return cls("unknown", reason=reason)


Probe = Callable[[ProbeCall], Probed]


@dataclass(frozen=True)
class Settlement:
    """A probe's finding as the terminal event's fields (done or not done)."""

    status: Literal["ok", "error"]
    result: JSON
    settled_by: JSONObject


def settlement(probed: Probed, probe: str, by: str, at_ms: int) -> Settlement:
    """The tool_result fields a done or not-done finding writes."""
    settled_by: JSONObject = {
        "probe": probe,
        "state": probed.state,
        "evidence": probed.evidence,
        "at": format_time(at_ms),
        "by": by,
    }
    if probed.state == "done":
        return Settlement("ok", probed.result, settled_by)
    return Settlement("error", {"outcome": NOT_DONE}, settled_by)


def probe_name(probe: Probe) -> str:
    """How a probe is named on the record: its module and qualified name."""
    module = getattr(probe, "__module__", None) or "?"
    name = getattr(probe, "__qualname__", None) or type(probe).__qualname__
    return f"{module}:{name}"


@dataclass
class _Outcome:
    found: object = None
    raised: BaseException | None = None
    finished: threading.Event = field(default_factory=threading.Event)


def run_probe(probe: Probe, call: ProbeCall, timeout_s: float = DEFAULT_TIMEOUT_S) -> Probed:
    """Ask one probe, never for longer than `timeout_s`: what it raises, a hang, and anything
    but a Probed come back as unknown, saying which. A probe still running at the timeout is
    left to finish on its own (a daemon thread): a thread cannot be stopped from outside."""
    outcome = _Outcome()

    def ask() -> None:
        try:
            outcome.found = probe(call)
        except BaseException as err:
            outcome.raised = err
        finally:
            outcome.finished.set()

    threading.Thread(target=ask, name=f"probe-{call.tool}", daemon=True).start()
    if not outcome.finished.wait(timeout_s):
        return Probed.unknown(f"the probe did not answer within {timeout_s:g} s")
    if outcome.raised is not None:
        err = outcome.raised
        return Probed.unknown(f"the probe raised {type(err).__name__}: {err}")
    found = outcome.found
    if not isinstance(found, Probed) or found.state not in ("done", "not_done", "unknown"):
        return Probed.unknown(f"the probe returned {type(found).__name__}, not a Probed")
    if found.state == "unknown" and not isinstance(found.reason, str):
        return Probed.unknown("the probe said unknown without a reason")
    return found


def load_probes(specs: list[str]) -> dict[str, Probe]:
    """Probes named as `module:attr`, each a mapping of tool name to probe; later ones win.
    InvalidInput, in one line, for a name that does not lead to one. The working directory is
    searched first, as `python -m` would (the `ledger-bus` command's own path is elsewhere)."""
    found: dict[str, Probe] = {}
    if specs and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    for spec in specs:
        module_name, _, attr = spec.partition(":")
        if not module_name or not attr:
            raise InvalidInput(f"--probes {spec!r}: expected module:attr")
        try:
            module = importlib.import_module(module_name)
        except ImportError as err:
            raise InvalidInput(f"--probes {spec!r}: cannot import {module_name}: {err}") from err
        table = getattr(module, attr, None)
        if not isinstance(table, Mapping) or not all(
            isinstance(tool, str) and callable(probe) for tool, probe in table.items()
        ):
            raise InvalidInput(
                f"--probes {spec!r}: not a mapping of tool names to probes ({type(table).__name__})"
            )
        found.update(table)
    return found
