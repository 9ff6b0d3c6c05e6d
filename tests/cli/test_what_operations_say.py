"""What the operations say a user needs to know: that a delete leaves its append ids spent (a
script run again after it is refused, or given its old results), and what a Redis without an
AOF loses, with snapshots and without."""

from __future__ import annotations

import json

from ledger_bus.demo.server import LocalServer
from tests.support.events import msg
from tests.support.helpers import ledger_cli, ledger_here

LINE = json.dumps(msg("hello")) + "\n"


def test_delete_says_its_append_ids_stay_spent_and_a_rerun_is_refused(
    redis_url: str, prefix: str
) -> None:
    def run(*args: str, stdin: str = "") -> tuple[int, str, str]:
        done = ledger_here(redis_url, prefix, "-o", "jsonl", *args, stdin=stdin)
        return done.returncode, done.stdout, done.stderr

    # Given a script's append, then the session deleted
    script = ("append", "s1", "main", "--append-id", "step-1")
    assert run(*script, stdin=LINE)[0] == 0
    asked = run("delete", "s1")
    assert "append ids stay spent" in asked[2]
    code, out, said = run("delete", "s1", "--yes")
    assert (code, json.loads(out)["deleted_events"]) == (0, 1)
    # Then the delete says that its append ids stay spent, and what comes of reusing one
    assert "append ids stay spent" in said
    assert "IdempotencyConflict, exit 4" in said
    # As it does: the script run again with other content is refused, exit 4 ...
    assert run(*script, stdin=json.dumps(msg("hello again")) + "\n")[0] == 4
    # ... and with the same content given its old result, writing nothing
    code, out, _ = run(*script, stdin=LINE)
    assert (code, json.loads(out)["deduplicated"]) == (0, True)
    assert run("tail", "s1")[0] == 6
    # And its help says so
    assert "IdempotencyConflict" in " ".join(run("delete", "--help")[1].split())


def test_doctor_says_what_a_redis_without_an_aof_loses() -> None:
    # Without snapshots (save ""): everything, at a restart as at a crash
    with LocalServer(appendonly=False) as server:
        found = ledger_cli(server.url, "lb", "--url", server.url, "doctor")
    findings = {f["topic"]: f for f in map(json.loads, found.stdout.splitlines())}
    assert findings["persistence"] == {
        "level": "fail",
        "topic": "persistence",
        "detail": 'appendonly no and no snapshots (save ""): a restart or a crash loses every'
        " append",
    }
    assert "since the last snapshot" not in found.stdout
    # With snapshots: what came after the last of them
    with LocalServer(appendonly=False, extra=["--save", "3600 1"]) as server:
        found = ledger_cli(server.url, "lb", "--url", server.url, "doctor")
    findings = {f["topic"]: f for f in map(json.loads, found.stdout.splitlines())}
    assert findings["persistence"]["detail"] == (
        "appendonly no: a crash loses every append since the last snapshot (save 3600 1)"
    )
