"""Golden vectors of the Python package, for the Go model's tests (payload_test.go).

    python golden.py generate        writes golden.json: appends prepared by the Python package
                                     (digests, event ids, notes, artifacts, msgpack payloads) and
                                     invalid appends with the error Python names, and the
                                     JSONL lines of the appends' events
    python golden.py verify FILE     checks the Go payloads in FILE (go_payloads.json, or "-" for
                                     stdin) decode in Python to exactly what Python's own
                                     payloads of the same appends decode to

Run it with the repository's Python (`make install`, then .venv/bin/python), from anywhere.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

from ledger_bus.model.artifacts import ArtifactRef, unpack
from ledger_bus.model.attempts import Closes, DeclaresSafe, Flags, Opens
from ledger_bus.model.batch import Limits, prepare_append
from ledger_bus.model.errors import InvalidEvent
from ledger_bus.model.ids import StreamId
from ledger_bus.model.jsonl import event_line
from ledger_bus.model.records import RecordedEvent

HERE = Path(__file__).resolve().parent

SMALL = {"artifact_threshold": 1024, "max_artifact_bytes": 4096}

BIG_TEXT = "lorem ipsum dolor sit amet, " * 60  # 1680 bytes: kept apart above 1 KiB
BIG_ARGS = {"rows": [{"id": n, "name": f"row {n}", "score": n / 8} for n in range(40)]}

APPENDS: list[dict[str, Any]] = [
    {
        "name": "one message",
        "session": "s1",
        "stream": "run-a",
        "append_id": "a1",
        "events": [{"type": "message", "agent": "orchestrator", "body": "hello"}],
    },
    {
        "name": "every type, defaults, given ids",
        "session": "sess-2",
        "stream": "agent/planner",
        "append_id": "turn-7",
        "events": [
            {"type": "message", "agent": "a", "body": "x", "parents": [], "run_id": None},
            {
                "type": "message",
                "agent": "a",
                "body": "y",
                "event_id": "given-1",
                "parents": ["given-0", "p2"],
                "run_id": "r1",
                "step_id": "s1",
            },
            {
                "type": "tool_call",
                "agent": "a",
                "tool": "search",
                "attempt_id": "c1",
                "run_id": "r1",
                "args": {},
            },
            {
                "type": "tool_call",
                "agent": "a",
                "tool": "fetch",
                "attempt_id": "c2",
                "args": {
                    "url": "https://example.com/?q=<x>&y",
                    "depth": 3,
                    "opts": {"a": [1, 2.5]},
                },
            },
            {
                "type": "tool_result",
                "agent": "a",
                "tool": "search",
                "attempt_id": "c1",
                "status": "ok",
                "result": None,
            },
            {
                "type": "tool_result",
                "agent": "a",
                "tool": "other",
                "attempt_id": "c9",
                "status": "error",
                "result": {"outcome": "unknown"},
            },
            {
                "type": "mutation",
                "agent": "a",
                "kind": "state.set",
                "result": None,
                "args": {},
                "parents": [],
                "value": None,
            },
        ],
    },
    {
        "name": "numbers of every width and form",
        "session": "s3",
        "stream": "n",
        "append_id": "nums",
        "events": [
            {
                "type": "mutation",
                "agent": "a",
                "kind": "nums",
                "ints": [
                    0,
                    1,
                    -1,
                    127,
                    128,
                    -32,
                    -33,
                    255,
                    256,
                    -128,
                    -129,
                    65535,
                    65536,
                    -32768,
                    -32769,
                    4294967295,
                    4294967296,
                    -2147483648,
                    -2147483649,
                    9007199254740991,
                    -9007199254740991,
                ],
                "floats": [
                    0.0,
                    -0.0,
                    1.0,
                    100.0,
                    0.1,
                    1e21,
                    1e-7,
                    -2.5,
                    1.7976931348623157e308,
                    5e-324,
                    9007199254740993.0,
                ],
                "one": 1,
                "one_float": 1.0,
                "t": True,
                "f": False,
                "nothing": None,
            },
        ],
    },
    {
        "name": "text of every kind",
        "session": "s4",
        "stream": "t",
        "append_id": "text",
        "events": [
            {
                "type": "message",
                "agent": "\u00e9quipe",
                "body": "\u65e5\u672c \U0001f600 "
                'quote " backslash \\ nl \n tab \t nul \u0000 del \u007f ls \u2028 bom \ufeff',
            },
            {
                "type": "mutation",
                "agent": "a",
                "kind": "keys",
                "\u20ac": 1,
                "\U0001f600": 2,
                "z": 3,
                "\ufb33": 4,
                "": "empty key",
                "nested": {"b": {}, "a": []},
            },
            {"type": "message", "agent": "a", "body": "x" * 300},
        ],
    },
    {
        "name": "attempt notes",
        "session": "s5",
        "stream": "run",
        "append_id": "notes",
        "events": [
            {"type": "tool_call", "agent": "a", "tool": "t", "attempt_id": "c1"},
            {"type": "tool_result", "agent": "a", "tool": "t", "attempt_id": "c1", "status": "ok"},
            {"type": "tool_call", "agent": "a", "tool": "t", "attempt_id": "c2", "run_id": "r"},
            {
                "type": "mutation",
                "agent": "rec",
                "kind": "reconcile.unresolved",
                "attempt_id": "c0",
                "call_cursor": "0001795993625879-000001",
            },
            {
                "type": "mutation",
                "agent": "rec",
                "kind": "reconcile.unresolved",
                "attempt_id": "c0",
                "call_cursor": "1795993625879-000001",
            },
            {
                "type": "mutation",
                "agent": "rec",
                "kind": "reconcile.unresolved",
                "attempt_id": "c0",
            },
            {
                "type": "mutation",
                "agent": "rec",
                "kind": "reconcile.unresolved",
                "attempt_id": "c0",
                "call_cursor": "not a cursor",
            },
            {
                "type": "mutation",
                "agent": "a",
                "kind": "tool.declared",
                "run_id": "r",
                "tool": "t",
                "safe_to_replay": True,
            },
            {
                "type": "mutation",
                "agent": "a",
                "kind": "tool.declared",
                "run_id": "r",
                "tool": "t",
                "safe_to_replay": 1,
            },
        ],
    },
    {
        "name": "artifacts",
        "session": "s6",
        "stream": "big",
        "append_id": "art",
        "limits": SMALL,
        "events": [
            {"type": "message", "agent": "a", "body": BIG_TEXT},
            {"type": "tool_call", "agent": "a", "tool": "t", "attempt_id": "c1", "args": BIG_ARGS},
            {
                "type": "tool_result",
                "agent": "a",
                "tool": "t",
                "attempt_id": "c1",
                "status": "ok",
                "result": BIG_TEXT,
            },
            {
                "type": "mutation",
                "agent": "a",
                "kind": "big",
                "small": "stays",
                "medium": "m" * 700,
                "large": "l" * 900,
                "obj": {"k": "v" * 600},
            },
            {"type": "message", "agent": "a", "body": "small"},
        ],
    },
]

INVALID: list[dict[str, Any]] = [
    {"name": "unknown type", "events": [{"type": "thought", "agent": "a"}]},
    {"name": "no type", "events": [{"agent": "a", "body": "x"}]},
    {"name": "null type", "events": [{"type": None, "agent": "a"}]},
    {"name": "missing body", "events": [{"type": "message", "agent": "a"}]},
    {"name": "missing agent", "events": [{"type": "message", "body": "x"}]},
    {"name": "null agent", "events": [{"type": "message", "agent": None, "body": "x"}]},
    {"name": "missing attempt id", "events": [{"type": "tool_call", "agent": "a", "tool": "t"}]},
    {
        "name": "null attempt id on a call",
        "events": [{"type": "tool_call", "agent": "a", "tool": "t", "attempt_id": None}],
    },
    {
        "name": "bad status",
        "events": [
            {"type": "tool_result", "agent": "a", "tool": "t", "attempt_id": "x", "status": "maybe"}
        ],
    },
    {"name": "body not a string", "events": [{"type": "message", "agent": "a", "body": 7}]},
    {
        "name": "unknown field",
        "events": [{"type": "message", "agent": "a", "body": "x", "mood": "ok"}],
    },
    {"name": "empty agent", "events": [{"type": "message", "agent": "", "body": "x"}]},
    {
        "name": "control character in agent",
        "events": [{"type": "message", "agent": "a\nb", "body": "x"}],
    },
    {
        "name": "C1 control character in tool",
        "events": [{"type": "tool_call", "agent": "a", "tool": "t\u0085", "attempt_id": "c"}],
    },
    {"name": "empty kind", "events": [{"type": "mutation", "agent": "a", "kind": ""}]},
    {"name": "kind not a string", "events": [{"type": "mutation", "agent": "a", "kind": 3}]},
    {
        "name": "args not an object",
        "events": [
            {"type": "tool_call", "agent": "a", "tool": "t", "attempt_id": "c", "args": [1]}
        ],
    },
    {
        "name": "parents not a list",
        "events": [{"type": "message", "agent": "a", "body": "x", "parents": "p"}],
    },
    {
        "name": "null parents",
        "events": [{"type": "message", "agent": "a", "body": "x", "parents": None}],
    },
    {
        "name": "a parent not a string",
        "events": [{"type": "message", "agent": "a", "body": "x", "parents": ["p", 2]}],
    },
    {
        "name": "an empty parent",
        "events": [{"type": "message", "agent": "a", "body": "x", "parents": ["p", "q", ""]}],
    },
    {
        "name": "run_id not a string",
        "events": [{"type": "message", "agent": "a", "body": "x", "run_id": 5}],
    },
    {
        "name": "reserved mutation field",
        "events": [{"type": "mutation", "agent": "a", "kind": "k", "version": 3, "cursor": "c"}],
    },
    {
        "name": "reserved field before a missing kind",
        "events": [{"type": "mutation", "agent": "a", "session": "s"}],
    },
    {
        "name": "integer JSON cannot carry",
        "events": [{"type": "mutation", "agent": "a", "kind": "k", "n": 2**53}],
    },
    {
        "name": "negative integer JSON cannot carry",
        "events": [
            {
                "type": "tool_call",
                "agent": "a",
                "tool": "t",
                "attempt_id": "c",
                "args": {"nested": {"deep": [0, -(2**53)]}},
            }
        ],
    },
    {
        "name": "one bad event among good ones",
        "events": [
            {"type": "message", "agent": "a", "body": "fine"},
            {"type": "message", "agent": "a", "body": "fine too"},
            {"type": "message", "agent": "a", "body": None},
        ],
    },
    {
        "name": "a bad event after an oversized one",
        "limits": {"max_event_bytes": 100, "artifact_threshold": None},
        "events": [
            {"type": "message", "agent": "a", "body": "x" * 200},
            {"type": "message", "agent": "a"},
        ],
    },
    {
        "name": "an oversized event",
        "limits": {"max_event_bytes": 100, "artifact_threshold": None},
        "events": [
            {"type": "message", "agent": "a", "body": "x"},
            {"type": "message", "agent": "a", "body": "x" * 200},
        ],
    },
    {
        "name": "too large an append",
        "limits": {"max_append_bytes": 150, "artifact_threshold": None},
        "events": [{"type": "message", "agent": "a", "body": "x" * 60} for _ in range(3)],
    },
    {
        "name": "too many events",
        "limits": {"max_events_per_append": 2},
        "events": [{"type": "message", "agent": "a", "body": "x"} for _ in range(3)],
    },
    {"name": "no events", "events": []},
    {
        "name": "an artifact too large",
        "limits": {"artifact_threshold": 100, "max_artifact_bytes": 150},
        "events": [{"type": "mutation", "agent": "a", "kind": "k", "a": "x" * 120, "b": "y" * 200}],
    },
    {
        "name": "too large outside its artifacts",
        "limits": {"artifact_threshold": 100, "max_event_bytes": 300},
        "events": [{"type": "message", "agent": "a", "body": "b", "parents": ["p" * 50] * 8}],
    },
    {
        "name": "nested too deeply",
        "events": [
            {"type": "mutation", "agent": "a", "kind": "k", "v": json.loads("[" * 128 + "]" * 128)}
        ],
    },
]


def limits_of(case: dict[str, Any]) -> Limits:
    return Limits(**case.get("limits", {}))


def note_text(note: Any) -> str:
    """A note as the Redis store passes it to append.lua (typescript/src/model/attempts.ts)."""
    if note is None:
        return ""
    if isinstance(note, Opens):
        return f"o\x1f{note.attempt_id}\x1f{note.run_id}\x1f{note.tool}"
    if isinstance(note, Closes):
        return f"c\x1f{note.attempt_id}"
    if isinstance(note, Flags):
        return f"f\x1f{note.attempt_id}\x1f{note.call or ''}"
    if isinstance(note, DeclaresSafe):
        return f"s\x1f{note.run_id}\x1f{note.tool}"
    raise TypeError(note)


def prepared(case: dict[str, Any]) -> Any:
    return prepare_append(
        case["session"], case["stream"], case["append_id"], case["events"], limits_of(case)
    )


def generate() -> None:
    appends = []
    for case in APPENDS:
        p = prepared(case)
        decoded = [unpack(payload) for payload in p.payloads]
        appends.append(
            {
                "name": case["name"],
                "session": case["session"],
                "stream": case["stream"],
                "append_id": case["append_id"],
                "limits": case.get("limits", {}),
                "events": case["events"],
                "digest": p.digest,
                "event_ids": [fields["event_id"] for fields in decoded],
                "notes": [note_text(note) for note in p.notes],
                "artifacts": [
                    {
                        "sha256": a.ref.sha256,
                        "size": a.ref.size,
                        "media_type": a.ref.media_type,
                        "data": a.data.decode(),
                    }
                    for a in p.artifacts
                ],
                "uses": [[sha, count] for sha, count in p.uses],
                "payloads": [payload.hex() for payload in p.payloads],
            }
        )
    invalid = []
    for case in INVALID:
        try:
            prepare_append("s", "x", "a", case["events"], limits_of(case))
        except InvalidEvent as err:
            invalid.append(
                {
                    "name": case["name"],
                    "limits": case.get("limits", {}),
                    "events": case["events"],
                    "index": err.index,
                    "field": err.field,
                    "reason": err.reason,
                }
            )
        else:
            raise SystemExit(f"{case['name']}: Python accepts it")
    # The lines `ledger-bus read -o jsonl` writes of the first golden appends' events, as if
    # committed at versions from 1 and cursors from 1795993625879-000000, references left in.
    lines = []
    for case in APPENDS:
        p = prepared(case)
        for n, payload in enumerate(p.payloads):
            cursor = f"{1795993625879 + n:013d}-{n:06d}"
            record = RecordedEvent(
                StreamId(case["session"], case["stream"]), n + 1, cursor, unpack(payload)
            )
            lines.append(
                {
                    "append": case["name"],
                    "index": n,
                    "version": n + 1,
                    "cursor": cursor,
                    "line": event_line(record),
                }
            )
    doc = {
        "about": "Made by go/model/testdata/golden.py generate with the repository's Python "
        "package; see payload_test.go.",
        "appends": appends,
        "invalid": invalid,
        "lines": lines,
    }
    text = json.dumps(doc, indent=1, ensure_ascii=False, allow_nan=False) + "\n"
    (HERE / "golden.json").write_text(text, encoding="utf-8")


def strict(a: Any, b: Any, where: str) -> None:
    """a == b with types: 1 and 1.0 and True differ, -0.0 and 0.0 differ."""
    if type(a) is not type(b):
        raise AssertionError(f"{where}: {type(a).__name__} {a!r} against {type(b).__name__} {b!r}")
    if isinstance(a, dict):
        if set(a) != set(b):
            raise AssertionError(f"{where}: keys {sorted(a)} against {sorted(b)}")
        for key in a:
            strict(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, list):
        if len(a) != len(b):
            raise AssertionError(f"{where}: {len(a)} items against {len(b)}")
        for n, (x, y) in enumerate(zip(a, b, strict=True)):
            strict(x, y, f"{where}[{n}]")
    elif isinstance(a, float):
        if a != b or math.copysign(1, a) != math.copysign(1, b):
            raise AssertionError(f"{where}: {a!r} against {b!r}")
    elif a != b:
        raise AssertionError(f"{where}: {a!r} against {b!r}")


def verify(path: str) -> None:
    text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    go = json.loads(text)
    checked = refs = 0
    for case in APPENDS:
        p = prepared(case)
        theirs = go[case["name"]]
        if len(theirs) != len(p.payloads):
            raise AssertionError(f"{case['name']}: {len(theirs)} payloads")
        for n, (mine, hexed) in enumerate(zip(p.payloads, theirs, strict=True)):
            decoded = unpack(bytes.fromhex(hexed))
            strict(decoded, unpack(mine), f"{case['name']} event {n}")
            checked += 1
            refs += sum(type(v) is ArtifactRef for v in decoded.values())
    print(f"{checked} Go payloads ({refs} artifact references) decode in Python as its own do")


if __name__ == "__main__":
    if sys.argv[1:2] == ["generate"]:
        generate()
    elif sys.argv[1:2] == ["verify"] and len(sys.argv) == 3:
        verify(sys.argv[2])
    else:
        raise SystemExit(__doc__)
