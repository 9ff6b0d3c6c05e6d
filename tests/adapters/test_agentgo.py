"""The AgentGo adapter (go/adapters/agentgo) against a real Redis, from outside: a scripted
AgentGo agent (two tools and a subagent) killed with SIGKILL inside a tool, its open call flagged
by the Python reconciler, the resumed run halted at it until `ledger-bus resolve` decides it,
then finished with the decided outcome and the tool not run again; the record read by the
command line and exported as ATIF that Harbor's validator accepts. The adapter's own Go tests
(`go test ./...` in go/adapters/agentgo) hold the rest."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

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


def _killed_inside_deploy(redis_url: str, prefix: str, marks: Path) -> str:
    """The scripted agent run until deploy runs, then SIGKILLed: deploy's attempt id."""
    crashed = subprocess.Popen(
        _scripted(redis_url, prefix, marks, "-hang"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert crashed.stdout is not None
        line = crashed.stdout.readline()
        assert line, crashed.stderr.read() if crashed.stderr else ""
        crashed.kill()  # SIGKILL, inside deploy
        crashed.wait()
        return str(json.loads(line)["inside"])
    finally:
        if crashed.poll() is None:
            crashed.kill()
        for pipe in (crashed.stdout, crashed.stderr):
            if pipe is not None:
                pipe.close()


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


def test_a_killed_agentgo_run_is_flagged_resolved_and_resumed_without_running_the_tool_again(
    redis_url: str, prefix: str, redis_store: EventStore, tmp_path: Path
) -> None:
    need_go()
    marks = tmp_path / "deploys"
    attempt = _killed_inside_deploy(redis_url, prefix, marks)
    assert len(marks.read_text().splitlines()) == 1
    assert [a.attempt_id for a in redis_store.open_attempts("ship")] == [attempt]
    assert _flagged(redis_store) == [attempt]

    # Unresolved, the resumed run halts at the call: deploy does not run twice.
    code, said = _resume(redis_url, prefix, marks)
    assert (code, said.get("error")) == (1, "UnresolvedAttempt"), said
    assert len(marks.read_text().splitlines()) == 1

    resolved = ledger_cli(
        redis_url, prefix, "resolve", "ship", attempt, "--ok", '{"deployed": true}'
    )
    assert resolved.returncode == 0, resolved.stderr
    code, said = _resume(redis_url, prefix, marks)
    assert (code, said) == (0, {"answer": "deployed api 1.4.2 to prod", "messages": 7})
    assert len(marks.read_text().splitlines()) == 1
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
    assert sub["trajectory_id"] == "r1.call-2"
    assert [s.get("message") for s in sub["steps"]] == [
        "is 1.4.2 safe?",
        "1.4.2 has no known issues",
    ]
