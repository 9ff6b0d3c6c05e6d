"""Write conformance/canonical.json from hand-written inputs, with the RFC 8785 reference.

The expected bytes come from the `rfc8785` package applied to the documented normal form (spec/
ledger-v1.md, "Canonical content"), never from ledger-bus's own fast path, so the vectors can
catch that path going wrong. Run it only to add vectors; the file is committed.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import rfc8785

# The spec's normal form, written out here rather than imported from ledger_bus.model.events:
# vectors made from the code's own table could not catch a mistake in it.
COMMON: dict[str, Any] = {
    "event_id": None,
    "run_id": None,
    "step_id": None,
    "attempt_id": None,
    "parents": [],
}
# `args` and `result` are defaults only where their type defines them; a mutation keeps its own.
DEFAULTS: dict[str, dict[str, Any]] = {
    "message": COMMON,
    "tool_call": {**COMMON, "args": {}},
    "tool_result": {**COMMON, "result": None},
    "mutation": COMMON,
}

INPUTS: list[tuple[str, list[dict[str, Any]]]] = [
    (
        "one message",
        [{"type": "message", "agent": "orchestrator", "body": "Classifying to engineering-lead"}],
    ),
    (
        "defaults are left out",
        [
            {
                "type": "message",
                "agent": "a",
                "body": "x",
                "parents": [],
                "run_id": None,
                "event_id": None,
            }
        ],
    ),
    (
        "keys sort by UTF-16 code units",
        [
            {
                "type": "mutation",
                "agent": "a",
                "kind": "k",
                "\u20ac": 1,
                "\U0001f600": 2,
                "z": 3,
                "\ufb33": 4,
            }
        ],
    ),
    (
        "numbers in ECMAScript form",
        [
            {
                "type": "tool_result",
                "agent": "a",
                "tool": "calc",
                "attempt_id": "t1",
                "status": "ok",
                "result": [0.1, 1e21, 1e-7, -0.0, 100.0, 9007199254740991],
            }
        ],
    ),
    (
        "escapes",
        [
            {
                "type": "message",
                "agent": "a",
                "body": 'quote " backslash \\ nl \n tab \t nul \u0000 del \u007f',
            }
        ],
    ),
    (
        "non-ASCII text stays UTF-8",
        [{"type": "message", "agent": "\u00e9quipe", "body": "\u65e5\u672c \U0001f680"}],
    ),
    (
        "a tool call and its result",
        [
            {
                "type": "tool_call",
                "agent": "orchestrator",
                "tool": "delegate",
                "attempt_id": "att-1",
                "run_id": "run-1",
                "step_id": "step-1",
                "args": {"to": "engineering-lead", "task": "jwt"},
            },
            {
                "type": "tool_result",
                "agent": "orchestrator",
                "tool": "delegate",
                "attempt_id": "att-1",
                "run_id": "run-1",
                "step_id": "step-1",
                "status": "ok",
                "result": {"accepted": True},
            },
        ],
    ),
    (
        "empty args are a default",
        [{"type": "tool_call", "agent": "a", "tool": "t", "attempt_id": "x", "args": {}}],
    ),
    (
        "a mutation's own nulls are kept",
        [
            {
                "type": "mutation",
                "agent": "backend-dev",
                "kind": "tilldone-done",
                "task_id": "jwt",
                "note": None,
            }
        ],
    ),
    (
        "a mutation's own result and args are kept, even when null or empty",
        [
            {
                "type": "mutation",
                "agent": "backend-dev",
                "kind": "cache.stored",
                "result": None,
                "args": {},
            }
        ],
    ),
]


def normal_form(event: dict[str, Any]) -> dict[str, Any]:
    defaults = DEFAULTS[event["type"]]
    return {k: v for k, v in event.items() if not (k in defaults and v == defaults[k])}


def main() -> None:
    vectors = []
    for name, events in INPUTS:
        parts = [rfc8785.dumps(normal_form(e)).decode("utf-8") for e in events]
        whole = rfc8785.dumps([normal_form(e) for e in events])
        vectors.append(
            {
                "name": name,
                "events": events,
                "canonical_events": parts,
                "canonical": whole.decode("utf-8"),
                "sha256": hashlib.sha256(whole).hexdigest(),
            }
        )
    out = Path(__file__).resolve().parent.parent / "conformance" / "canonical.json"
    out.write_text(
        json.dumps({"version": 1, "vectors": vectors}, ensure_ascii=False, indent=2) + "\n"
    )
    print(f"wrote {len(vectors)} vectors to {out}")


if __name__ == "__main__":
    main()
