"""The AgentGo adapter (go/adapters/agentgo) against a real Redis, from outside: a program wired
as docs/go.md shows (AgentGo's agent, the adapter's middlewares, committer and hooks; a scripted
model, three tools, one of them a subagent) SIGKILLed at each point a crash can meet a run
(inside the provider, after the reply is recorded, between the batch's tools, inside a tool),
then resumed through AgentGo's restore hook by another process, with the provider calls and
tool runs counted; the call a kill inside a tool left open flagged by the Python reconciler, the
resumed run halted at it until `ledger-bus resolve` decides it, then finished with the decided
outcome and the tool not run again; the record read by the command line and exported as ATIF
that Harbor's validator accepts. The adapter's own Go tests (`go test ./...` in
go/adapters/agentgo) hold the rest."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from ledger_bus.operations.reconciler import Reconciler, ReconcilerConfig
from ledger_bus.store.base import EventStore
from tests.support.gopeer import GO_MODULE, go_program, need_go
from tests.support.harbor import harbor_errors
from tests.support.helpers import ledger_cli

ADAPTER = GO_MODULE / "adapters" / "agentgo"


def _scripted(redis_url: str, prefix: str, marks: Path, *flags: str) -> list[str]:
    return [
        str(go_program(ADAPTER, "./internal/scripted")),
        "-url",
        redis_url,
        "-prefix",
        prefix,
        "-session",
        "ship",
        "-run",
        "r1",
        "-marks",
        str(marks),
        *flags,
    ]


def _resume(redis_url: str, prefix: str, marks: Path) -> tuple[int, dict[str, Any]]:
    done = subprocess.run(
        _scripted(redis_url, prefix, marks, "-resume"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout.splitlines()[-1])


def _killed_at(redis_url: str, prefix: str, marks: Path, point: str) -> None:
    """The scripted agent run until it reaches point, then SIGKILLed there."""
    crashed = subprocess.Popen(
        _scripted(redis_url, prefix, marks, "-hang", point),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert crashed.stdout is not None
        line = crashed.stdout.readline()
        assert line, crashed.stderr.read() if crashed.stderr else ""
        assert json.loads(line) == {"inside": point}
        crashed.kill()  # SIGKILL, at the point
        crashed.wait()
    finally:
        if crashed.poll() is None:
            crashed.kill()
        for pipe in (crashed.stdout, crashed.stderr):
            if pipe is not None:
                pipe.close()


def _runs(marks: Path) -> dict[str, int]:
    """How many times the provider was called and each tool ran, from the marks they left."""
    return {f.name: len(f.read_text().splitlines()) for f in sorted(marks.iterdir())}


def _flagged(store: EventStore) -> list[str]:
    """The attempts the reconciler flags, once the dead run's lease is gone."""
    actions: list[dict[str, Any]] = []
    reconciler = Reconciler(store, ReconcilerConfig(grace_s=0), on_action=actions.append)
    deadline = time.monotonic() + 10
    flags: list[dict[str, Any]] = []
    while not flags and time.monotonic() < deadline:
        reconciler.run_pass()
        flags = [a for a in actions if a["action"] == "flag"]
        time.sleep(0.1)
    return [a["attempt_id"] for a in flags]


ANSWER = {"answer": "deployed api 1.4.2 to prod", "messages": 7}


@pytest.mark.parametrize(
    ("point", "before", "after"),
    [
        # The provider asked for deploy's turn, its reply never recorded: asked again once.
        ("model", {"lookup": 1, "model": 2, "research": 1}, {"model": 4}),
        # The reply recorded, not yet committed: returned from the ledger, not asked again.
        ("reply", {"lookup": 1, "model": 2, "research": 1}, {"model": 3}),
        # Lookup's outcome recorded, research not begun: AgentGo asks for the turn again, the
        # ledger answers it and lookup, and only research runs.
        ("between", {"lookup": 1, "model": 1}, {"model": 3}),
    ],
)
def test_a_run_killed_anywhere_resumes_through_agentgos_restore_without_buying_twice(
    redis_url: str,
    prefix: str,
    redis_store: EventStore,
    tmp_path: Path,
    point: str,
    before: dict[str, int],
    after: dict[str, int],
) -> None:
    need_go()
    marks = tmp_path / "marks"
    marks.mkdir()
    _killed_at(redis_url, prefix, marks, point)
    assert _runs(marks) == before

    code, said = _resume(redis_url, prefix, marks)
    assert (code, said) == (0, ANSWER)
    assert _runs(marks) == {"deploy": 1, "lookup": 1, "research": 1, **after}
    assert redis_store.open_attempts("ship") == []


def test_a_killed_agentgo_run_is_flagged_resolved_and_resumed_without_running_the_tool_again(
    redis_url: str, prefix: str, redis_store: EventStore, tmp_path: Path
) -> None:
    need_go()
    marks = tmp_path / "marks"
    marks.mkdir()
    _killed_at(redis_url, prefix, marks, "deploy")
    assert _runs(marks) == {"deploy": 1, "lookup": 1, "model": 2, "research": 1}
    (attempt,) = [a.attempt_id for a in redis_store.open_attempts("ship")]
    assert attempt == "r1/tool/t2/call-1#1"  # AgentGo's turn 2, its call call-1
    assert _flagged(redis_store) == [attempt]

    # Unresolved, the resumed run halts at the call: deploy does not run twice, and the model
    # is not asked again for a reply the ledger holds.
    code, said = _resume(redis_url, prefix, marks)
    assert (code, said.get("error")) == (1, "UnresolvedAttempt"), said
    assert _runs(marks) == {"deploy": 1, "lookup": 1, "model": 2, "research": 1}

    resolved = ledger_cli(
        redis_url, prefix, "resolve", "ship", attempt, "--ok", '{"deployed": true}'
    )
    assert resolved.returncode == 0, resolved.stderr
    code, said = _resume(redis_url, prefix, marks)
    assert (code, said) == (0, ANSWER)
    assert _runs(marks) == {"deploy": 1, "lookup": 1, "model": 3, "research": 1}
    assert redis_store.open_attempts("ship") == []

    _shown_by_tail(redis_url, prefix)
    _exported_as_atif(redis_url, prefix, tmp_path)


def _shown_by_tail(redis_url: str, prefix: str) -> None:
    """The conversation reads in the ledger's terms; AgentGo's own messages only with --native."""
    shown = ledger_cli(redis_url, prefix, "--output", "jsonl", "tail", "ship", "-n", "200")
    assert shown.returncode == 0, shown.stderr
    events = [json.loads(line) for line in shown.stdout.splitlines()]
    bodies = [(e["agent"], e["body"]) for e in events if e["type"] == "message"]
    assert bodies == [
        ("user", "deploy the api"),
        ("user", "is 1.4.2 safe?"),
        ("agentgo", "1.4.2 has no known issues"),
        ("agentgo", "deployed api 1.4.2 to prod"),
    ]
    assert not [e for e in events if str(e.get("kind", "")).startswith("agentgo.")]
    native = ledger_cli(
        redis_url, prefix, "--output", "jsonl", "tail", "ship", "-n", "200", "--native"
    )
    kinds = [json.loads(line).get("kind") for line in native.stdout.splitlines()]
    assert kinds.count("agentgo.message") == 9  # 7 of the run, 2 of the subagent's


def _exported_as_atif(redis_url: str, prefix: str, tmp_path: Path) -> None:
    # As a trajectory Harbor accepts: each model call an agent step with its model, tokens,
    # the calls it asked for and their outcomes (deploy's the one the operator decided), its
    # message the reply; the subagent's run a trajectory embedded in its parent's.
    exported = ledger_cli(redis_url, prefix, "export", "ship", "--format", "atif")
    assert exported.returncode == 0, exported.stderr
    document = json.loads(exported.stdout)
    assert harbor_errors({"agentgo": document}, tmp_path) == {"agentgo": []}
    steps = document["steps"]
    assert [(s["source"], s.get("model_name")) for s in steps] == [
        ("user", None),
        ("agent", "scripted-1"),
        ("agent", "scripted-1"),
        ("agent", "scripted-1"),
    ]
    assert steps[1]["metrics"] == {
        "prompt_tokens": 100,
        "completion_tokens": 20,
        "cached_tokens": 64,
        "cost_usd": 0.0012,
    }
    assert [[c["function_name"] for c in s.get("tool_calls", ())] for s in steps[1:]] == [
        ["lookup", "research"],
        ["deploy"],
        [],
    ]
    (deployed,) = steps[2]["observation"]["results"]
    assert json.loads(deployed["content"]) == {"deployed": True}
    assert steps[3]["message"] == "deployed api 1.4.2 to prod"
    (sub,) = document["subagent_trajectories"]
    assert sub["trajectory_id"] == "r1.t1.call-2"
    assert [s.get("message") for s in sub["steps"]] == [
        "is 1.4.2 safe?",
        "1.4.2 has no known issues",
    ]
