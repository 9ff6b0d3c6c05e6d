"""What several test modules do alike: run the command, start a recorded run to crash, name the
backend a test asked for, wait for something to hold, record a run that delegates, reconcile."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster

import ledger_bus as lb
from ledger_bus.agent.recorder import Recorder
from ledger_bus.operations.reconciler import FLAG_KIND, Reconciler, ReconcilerConfig
from ledger_bus.store.base import EventStore
from ledger_bus.store.redis import RedisStore

ROOT = Path(__file__).resolve().parent.parent.parent
# The keys every JSONL event line starts with, in this order (spec/ledger-v1.md).
LEDGER_KEYS = ["session", "stream", "version", "cursor", "type", "agent", "event_id", "recorded_at"]


def url_for(request: pytest.FixtureRequest, db: Path) -> str:
    """The URL of the backend `request.param` names ("redis", "valkey", "cluster", "sqlite",
    "postgresql" or "memory"), its server started for the tests alone; a SQLite one at `db`."""
    servers = {"redis": "redis_server", "valkey": "valkey_url", "cluster": "redis_cluster"}
    kind: str = request.param
    if kind == "sqlite":
        return f"sqlite:///{db}"
    if kind == "memory":
        return "memory://"
    server = request.getfixturevalue(servers.get(kind, "postgres_server"))
    return server if isinstance(server, str) else str(server.url)


def cli_env(url: str, prefix: str) -> dict[str, str]:
    return {**os.environ, "LEDGER_BUS_URL": url, "LEDGER_BUS_PREFIX": prefix}


def ledger_cli(
    url: str, prefix: str, *args: str, stdin: str = "", timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """`ledger-bus ARGS` as a user runs it, against `url` with key prefix `prefix`."""
    return subprocess.run(
        [sys.executable, "-m", "ledger_bus", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=cli_env(url, prefix),
        timeout=timeout,
        check=False,
    )


@contextmanager
def ledger_serving(
    url: str, prefix: str, port: int, log: Path, *args: str
) -> Iterator[subprocess.Popen[bytes]]:
    """`ledger-bus ARGS`, a server listening on 127.0.0.1:port, running while the block does
    (its process); its stderr goes to `log`, read back when it does not come up."""
    command = [sys.executable, "-m", "ledger_bus", *args]
    with listening(command, cli_env(url, prefix), port, log) as server:
        yield server


@contextmanager
def listening(
    command: list[str], env: dict[str, str], port: int, log: Path
) -> Iterator[subprocess.Popen[bytes]]:
    """`command`, a server listening on 127.0.0.1:port, running while the block does (its
    process); its stderr goes to `log`, read back when it does not come up."""
    with log.open("w") as err:
        server = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=err)
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            assert server.poll() is None, log.read_text()
            assert time.monotonic() < deadline, f"{' '.join(command[:4])} did not listen"
            time.sleep(0.1)
    try:
        yield server
    finally:
        server.terminate()
        server.wait(timeout=10)


def ledger_keys(url: str, prefix: str) -> dict[bytes, bytes | None]:
    """Every Redis key of the ledger and its value, to compare before and after."""
    client = redis.Redis.from_url(url)
    try:
        return {k: client.dump(k) for k in sorted(client.scan_iter(match=f"{prefix}*"))}
    finally:
        client.close()


def ledger_here(
    url: str, prefix: str, *args: str, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    """`ledger-bus ARGS` run in this process, through the same entry point and error boundary
    (`ledger_bus.cli.main`), its streams and environment those a user's process would have:
    for tests of what the command prints and exits with, without a second a start."""
    from click.testing import CliRunner

    from ledger_bus.cli import main

    argv = sys.argv
    env = {"LEDGER_BUS_URL": url, "LEDGER_BUS_PREFIX": prefix}
    with CliRunner().isolation(input=stdin, env=env) as (out, err, _):
        sys.argv = ["ledger-bus", *args]
        try:
            main()
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else 0
        finally:
            sys.argv = argv
            sys.stdout.flush()  # as a process's streams are, when it exits
            sys.stderr.flush()
        stdout, stderr = out.getvalue().decode(), err.getvalue().decode()
    return subprocess.CompletedProcess(["ledger-bus", *args], code, stdout, stderr)


def kill_when_ready(args: list[str], ready: Callable[[], bool], what: str) -> None:
    """Run `python -m ARGS` from the repository's root and SIGKILL it once `ready()` holds."""
    child = subprocess.Popen(
        [sys.executable, "-m", *args], cwd=Path(__file__).resolve().parent.parent.parent
    )
    try:
        deadline = time.monotonic() + 60
        while not ready():
            assert child.poll() is None, f"{what} ended before the kill"
            assert time.monotonic() < deadline, f"{what} never got where it is killed"
            time.sleep(0.05)
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    finally:
        if child.poll() is None:
            child.kill()


def runs_of(where: Path, *tools: str) -> dict[str, int]:
    """How often each tool ran, by the lines it appends to `where/<tool>`."""
    return {
        name: len((where / name).read_text().splitlines())
        for name in tools
        if (where / name).exists()
    }


def start_recorded(
    url: str, prefix: str, folder: Path, safe: str
) -> tuple[subprocess.Popen[str], Path]:
    """A recorded run (session "crash", run "r1") stopped inside its second call, unresolved;
    returns the process and the file where its tools note their side effects."""
    marker = folder / "effects.txt"
    args = ["recorded", url, prefix, "crash", "r1", str(marker), safe]
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.workers", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "calling the slow tool"
    deadline = time.monotonic() + 30
    while "deploy prod started" not in (marker.read_text() if marker.exists() else ""):
        assert time.monotonic() < deadline, "the slow call never started"
        time.sleep(0.05)
    return proc, marker


def kill(proc: subprocess.Popen[str]) -> None:
    """SIGKILL, as a crash: no handler runs, nothing is flushed."""
    proc.kill()
    proc.wait()
    if proc.stdout:
        proc.stdout.close()


class Writers:
    """Threads that each append to a stream of their own in one session until stopped, keeping
    what was acknowledged. An append not confirmed (or not answered) is tried again with its
    append_id; a writer told its history was rewound says so and stops."""

    def __init__(self, url: str, session: str, names: tuple[str, ...] = ("w0", "w1")):
        self.url, self.session = url, session
        self.acknowledged: dict[str, list[str]] = {name: [] for name in names}
        self.unconfirmed = 0
        self.said: list[str] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._write, args=(n,)) for n in names]

    def _write(self, name: str) -> None:
        store = lb.connect(self.url, timeout=30)
        ref = lb.StreamId(self.session, name)
        n = 0
        while not self._stop.is_set():
            body = f"{name}-{n}"
            try:
                store.append(ref, lb.ANY, body, [{"type": "message", "agent": name, "body": body}])
            except lb.HistoryRewound as err:
                self.said.append(f"{name}: {err}")
                break
            except (lb.DurabilityNotConfirmed, lb.BackendUnavailable):
                self.unconfirmed += 1
                time.sleep(0.02)
                continue
            self.acknowledged[name].append(body)
            n += 1
        store.close()

    def __enter__(self) -> Writers:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)

    def counts(self) -> dict[str, int]:
        return {name: len(done) for name, done in self.acknowledged.items()}

    def wait_for(self, more: int, than: dict[str, int] | None = None, timeout: float = 60) -> None:
        """Until every writer has `more` acknowledged appends than `than` (none by default)."""
        base = than or dict.fromkeys(self.acknowledged, 0)
        deadline = time.monotonic() + timeout
        while not all(len(done) >= base[n] + more for n, done in self.acknowledged.items()):
            assert time.monotonic() < deadline, f"the writers did not reach {more} more appends"
            time.sleep(0.05)

    def lost_in(self, store: lb.EventStore) -> int:
        """How many acknowledged appends `store` lacks."""
        lost = 0
        for name, done in self.acknowledged.items():
            have = {e["body"] for e in store.read_stream(lb.StreamId(self.session, name))}
            lost += sum(1 for body in done if body not in have)
        return lost

    def assert_kept_in(self, store: lb.EventStore) -> None:
        """Every acknowledged append is in `store`, once, in order (and at most the one in
        flight when they stopped besides)."""
        for name, done in self.acknowledged.items():
            bodies = [e["body"] for e in store.read_stream(lb.StreamId(self.session, name))]
            assert bodies[: len(done)] == done, name
            assert len(bodies) <= len(done) + 1, name


def wait_for(condition: Callable[[], object], what: str, timeout: float = 60) -> None:
    """Until `condition()` holds; fails naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def delegated(store: EventStore, session: str) -> dict[str, str]:
    """A planner delegates to a writer, which makes a call, delegates to an editor still going,
    and leaves a call open; the planner's model call with its tokens."""
    with Recorder(store, session, "planner").run("plan") as run:
        run.message("plan it")
        writing = run.delegate("writer", "Draft it")
        with Recorder(store, session, "writer", lease_ttl_ms=200).run(
            writing.child_run_id, parents=[writing.call_event_id]
        ) as writer:
            writer.message("drafting")
            writer.call("search", {"q": "jwt"}, lambda q: {"hits": 3})
            editing = writer.delegate("editor", "Edit it")
            editor = Recorder(store, session, "editor").run(editing.child_run_id)
            editor.__enter__()
            editor.message("editing")
        run.finish_delegation(writing, "ok", "drafted")
    return {"writer": writing.child_run_id, "editor": editing.child_run_id}


def reconciler_flags(store: EventStore, session: str) -> Counter[str]:
    """How many times the reconciler flagged each attempt of `session`."""
    events = store.read_stream(lb.StreamId(session, "reconciler"))
    return Counter(e["attempt_id"] for e in events if e.get("kind") == FLAG_KIND)


def reconciler_now(store: EventStore, grace: float = 0) -> Reconciler:
    """A reconciler that flags calls open longer than `grace` seconds, telling no one."""
    return Reconciler(store, ReconcilerConfig(grace_s=grace), on_action=lambda record: None)


def redis_client(store: RedisStore) -> redis.Redis:
    """The store's client as redis-py types it (the store types it by what it calls of it), for
    a test that looks at redis-py's own parts: the pool, a TTL, the server's stats."""
    client = store.client
    assert isinstance(client, redis.Redis), f"a single-node store, not {type(client).__name__}"
    return client


def cluster_client(store: RedisStore) -> Any:
    """The store's client as redis-py's cluster client, for a test that asks it for nodes and
    slots (methods redis-py leaves untyped: so is what this gives)."""
    client = store.client
    assert isinstance(client, RedisCluster), f"a cluster store, not {type(client).__name__}"
    return client


def pytest_elsewhere(folder: Path, module: str) -> tuple[int, str]:
    """Run pytest on `module` in `folder`, as a project of its own runs it (no conftest of this
    repository's): its exit code, and its output's last lines."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", module],
        cwd=folder,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    return done.returncode, done.stdout[-3000:]


def passed_in(output: str) -> int:
    """How many tests pytest's last line says passed."""
    found = re.search(r"(\d+) passed", output.strip().splitlines()[-1])
    assert found, output
    return int(found.group(1))
