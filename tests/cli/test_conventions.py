"""The command line's conventions, where a new user stumbled: one duration syntax everywhere,
-o after the command, reconcile --once's results on stdout, doctor's own exit code, a dry run
for `groups delete`, unknown streams and types named with the closest, suggestions whatever
the case, the demo's lines; and a start that imports only what a command needs."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import redis

import ledger_bus as lb
from ledger_bus.agent.filters import parse_bound
from ledger_bus.cli.params import Duration, DurationMs
from ledger_bus.demo.server import LocalServer
from ledger_bus.model.durations import duration_seconds
from ledger_bus.model.errors import InvalidInput
from ledger_bus.model.ids import cursor_ms
from ledger_bus.model.records import summary
from tests.support.events import call, msg, result
from tests.support.helpers import ledger_here


@pytest.fixture
def written(redis_url: str, prefix: str) -> str:
    """Session `s1`: a message in `main`, a call and its result in `run-a`."""
    with lb.connect(redis_url, prefix=prefix) as store:
        store.append(lb.StreamId("s1", "main"), 0, "a", [msg("hello")])
        store.append(lb.StreamId("s1", "run-a"), 0, "b", [call("c1"), result("c1")])
    return redis_url


def lines(done: subprocess.CompletedProcess[str]) -> list[dict[str, object]]:
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30s", 30), ("5m", 300), ("1h", 3600), ("7d", 604800), ("2.5", 2.5), ("90", 90), ("0", 0)],
)
def test_one_duration_syntax(text: str, seconds: float) -> None:
    assert duration_seconds(text) == seconds
    assert Duration().convert(text, None, None) == seconds
    assert DurationMs().convert(text, None, None) == (
        int(text) if text.isdigit() else seconds * 1000
    )


@pytest.mark.parametrize("text", ["", "5 minutes", "1w", "-3s", "1e3", "h"])
def test_what_is_no_duration_is_refused(text: str) -> None:
    assert duration_seconds(text) is None


def test_since_and_until_take_a_duration_ago() -> None:
    now = 1_800_000_000_000
    assert cursor_ms(parse_bound("1h", now_ms=now)) == now - 3_600_000
    assert cursor_ms(parse_bound("90", end=True, now_ms=now)) == now - 90_000
    with pytest.raises(InvalidInput, match="duration ago"):
        parse_bound("yesterday")


def test_durations_on_the_command_line(written: str, prefix: str) -> None:
    # sessions --active, --since/--until relative, reconcile --grace, follow's -ms options.
    assert [
        s["session"]
        for s in lines(ledger_here(written, prefix, "sessions", "--active", "1h", "-o", "jsonl"))
    ] == ["s1"]
    assert (
        len(lines(ledger_here(written, prefix, "scan", "s1", "--since", "10m", "-o", "jsonl"))) == 3
    )
    assert lines(ledger_here(written, prefix, "scan", "s1", "--until", "1h", "-o", "jsonl")) == []
    done = ledger_here(written, prefix, "reconcile", "--once", "--grace", "0s", "--session", "s1")
    assert done.returncode == 0, done.stderr
    follow = ledger_here(written, prefix, "follow", "s1", "--group", "g", "--consumer", "c",
                         "--once", "--block-ms", "0.2s", "--claim-idle-ms", "1m")  # fmt: skip
    assert follow.returncode == 0, follow.stderr
    bad = ledger_here(written, prefix, "sessions", "--active", "soon")
    assert bad.returncode == 2
    assert "not a duration such as 90s" in bad.stderr


def test_the_output_format_goes_after_the_command_too(written: str, prefix: str) -> None:
    after = ledger_here(written, prefix, "tail", "s1", "-o", "jsonl")
    before = ledger_here(written, prefix, "--output", "jsonl", "tail", "s1")
    assert lines(after) == lines(before)
    table = ledger_here(written, prefix, "--output", "jsonl", "tail", "s1", "--output", "table")
    assert table.stdout.lstrip()[:1] != "{"  # the one after the command wins
    assert lines(ledger_here(written, prefix, "groups", "s1", "-o", "jsonl")) == []


def test_reconcile_once_prints_its_results_on_stdout(redis_url: str, prefix: str) -> None:
    with lb.connect(redis_url, prefix=prefix) as store:
        store.append(lb.StreamId("r1", "main"), 0, "a", [call("c9")])  # never finished
    done = ledger_here(redis_url, prefix, "reconcile", "--once", "--grace", "0", "--session", "r1",
                       "-o", "jsonl")  # fmt: skip
    actions = lines(done)
    assert [a["action"] for a in actions] == ["flag", "pass"]
    assert actions[0]["attempt_id"] == "c9"
    assert '"action":"flag"' in done.stderr  # the log stays on stderr


def test_doctors_failure_has_an_exit_code_of_its_own() -> None:
    from ledger_bus.demo.server import LocalServer

    with LocalServer(appendonly=False, extra=["--maxmemory-policy", "allkeys-lru"]) as server:
        done = ledger_here(server.url, "lb", "doctor")
    assert done.returncode == 9
    help_text = ledger_here("redis://127.0.0.1:1/0", "lb", "--help").stdout
    assert "9 doctor found that data can be lost" in " ".join(help_text.split())


@pytest.mark.parametrize(
    ("args", "code", "said"),
    [
        (["scan", "s1", "--stream", "run-b"], 6, "no stream 'run-b' in session 's1'; did you"
         " mean run-a?"),
        (["tail", "s1", "--stream", "MAIN"], 6, "did you mean main?"),
        (["tail", "s1", "--type", "mesage"], 2, "--type 'mesage' is no event type; did you mean"
         " message?"),
        (["tail", "s1", "--type", "Tool_Call"], 2, "did you mean tool_call,"),
        (["tail", "S1"], 6, "no such session 'S1'; did you mean s1?"),
        (["read", "s1", "Main"], 6, "did you mean main?"),
    ],
)  # fmt: skip
def test_unknown_names_say_the_closest_whatever_the_case(
    written: str, prefix: str, args: list[str], code: int, said: str
) -> None:
    done = ledger_here(written, prefix, *args)
    assert done.returncode == code
    assert said in done.stderr
    assert done.stdout == ""


def test_a_runs_start_is_summed_up_without_its_capabilities() -> None:
    capabilities = {"profile": "plain-python-loop", "recovery": "strict"}
    started = {"type": "mutation", "agent": "w", "kind": "run.started", "task": "t1"}
    line = summary({**started, "capabilities": capabilities})
    assert line == 'run.started {"task":"t1"}'


def test_the_command_line_imports_only_what_a_command_needs() -> None:
    code = (
        "import sys, subprocess\n"
        "from ledger_bus.cli import cli\n"
        "heavy = {'pydantic', 'redis', 'sqlalchemy', 'rich', 'ledger_bus.exports.conversation'}\n"
        "print(sorted(heavy & set(sys.modules)))\n"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert loaded.stdout.strip() == "[]"
    # How long it takes is measured by scripts/bench_startup.py, not here.


# The demo starts a Redis and asks it whether it answers: redis-py is its first act.
LOADS_REDIS_AT_ONCE = {"ledger_bus.cli.demo"}


def test_a_command_module_loads_redis_only_when_its_command_runs() -> None:
    """A command's module is loaded to run it, or to show its --help: it must not import
    redis-py itself (80 ms of a start; 50-60 ms more where OpenTelemetry's SDK is installed,
    which redis-py imports with itself), only the store that the command opens does."""
    from ledger_bus.cli import cli

    modules = sorted(set(cli.lazy.values()) - LOADS_REDIS_AT_ONCE)
    code = (
        "import importlib, sys\n"
        "import ledger_bus.cli\n"
        "importlib.import_module(sys.argv[1])\n"
        "print('redis' in sys.modules, 'opentelemetry.sdk.metrics' in sys.modules)\n"
    )
    loaded = {
        module: subprocess.run(
            [sys.executable, "-c", code, module], capture_output=True, text=True, check=True
        ).stdout.strip()
        for module in modules
    }
    assert loaded == dict.fromkeys(modules, "False False")


def test_every_public_name_of_the_package_loads_when_used() -> None:
    code = (
        "import sys, ledger_bus as lb\n"
        "assert 'ledger_bus.store' not in sys.modules\n"
        "assert sorted(lb.__all__) == sorted(lb._WHERE) == sorted(set(dir(lb)) & set(lb._WHERE))\n"
        "print(all(getattr(lb, name) is not None for name in lb.__all__))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "True"


def test_a_one_shot_command_opens_one_connection(redis_server: LocalServer, prefix: str) -> None:
    # Given a server that counts the connections it is given
    with redis.Redis.from_url(redis_server.url) as admin:
        admin.ping()

        def connections() -> int:
            return int(admin.info("stats")["total_connections_received"])

        ids = {"run_id": "r", "step_id": "s"}
        commands: list[tuple[tuple[str, ...], dict[str, object] | None]] = [
            (("append", "one", "main", "--append-id", "1"), {"type": "message", "body": "hi"}),
            (
                ("append", "one", "main", "--append-id", "2"),
                {"type": "tool_call", "tool": "t", "args": {}, "attempt_id": "c1", **ids},
            ),
            (("tail", "one"), None),
            (("read", "one", "main"), None),
            (("sessions",), None),
        ]
        for args, line in commands:
            before = connections()
            # When a command runs, from its first contact with the server to its answer
            stdin = "" if line is None else json.dumps({"agent": "a", **line}) + "\n"
            done = ledger_here(redis_server.url, prefix, *args, stdin=stdin)
            # Then it made one connection, the contact's, on which it did its work
            assert done.returncode == 0, done.stderr
            assert connections() - before == 1, args
