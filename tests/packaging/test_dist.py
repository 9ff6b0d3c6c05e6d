"""Every artifact a release publishes, as `make dist` builds them in a fresh clone of this
checkout (once a run, shared with the other tests of the release: tests/support/release.py),
each installed and run outside the repository: the wheel in a fresh venv for each extra
pyproject.toml names, the npm tarball in a fresh npm project, the Go modules through a module
proxy that is dist/go itself; and SHA256SUMS over them all."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tarfile
import tomllib
import uuid
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

import ledger_bus
from tests.packaging.test_go_module import (
    ADAPTER,
    AGENTGO_PROGRAM,
    SDK,
    documented_programs,
    documented_wiring,
    go,
    outside,
    proxy,  # noqa: F401  (the fixture: the modules modproxy serves from this checkout)
)
from tests.packaging.test_wheel import assert_the_view_serves
from tests.support.helpers import ROOT
from tests.support.npm import npm_env
from tests.support.release import Release, fresh_clone, release_of, run

# make dist runs once a run, in whichever test asks first: a minute or so, the npm install of
# a fresh clone's development dependencies, the TypeScript build and the wheel's among it.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

VERSION = ledger_bus.__version__
GO_VERSION = f"v{VERSION}"
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]
# The extras a user installs: every one pyproject.toml names but the development tools.
EXTRAS = sorted(set(PROJECT["optional-dependencies"]) - {"dev"})


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Release:
    """The release, and the venvs of its wheel."""
    return release_of(tmp_path_factory)


@pytest.fixture(scope="module")
def release(made: Release) -> Path:
    """The release's dist/."""
    return made.dist()


@pytest.fixture(scope="module")
def venv_with(made: Release) -> Callable[..., Path]:
    """The bin folder of a fresh venv with the release's wheel and the extras named: one venv a
    set of extras, made once a run (shared with the other tests of the release)."""
    return lambda *extras: made.venv(extras)


def sums(release: Path) -> dict[str, str]:
    """SHA256SUMS: each file it names, with its sum; every line in sha256sum's format."""
    summed: dict[str, str] = {}
    for line in (release / "SHA256SUMS").read_text("utf-8").splitlines():
        match = re.fullmatch(r"([0-9a-f]{64})  (\S+)", line)
        assert match, f"not a line of sha256sum: {line!r}"
        assert match[2] not in summed, f"{match[2]} named twice"
        summed[match[2]] = match[1]
    return summed


def test_make_dist_builds_every_artifact_of_the_release_with_their_sums(release: Path) -> None:
    # Given make dist, run in a fresh clone of this checkout
    files = sorted(p.relative_to(release).as_posix() for p in release.rglob("*") if p.is_file())

    # Then dist/ holds the wheel, the sdist, the npm tarball, each Go module as the module proxy
    # serves a tag, all of one version, and their sums
    go_files = [
        f"go/{module}/@v/{name}"
        for module in (SDK, ADAPTER)
        for name in ("list", f"{GO_VERSION}.info", f"{GO_VERSION}.mod", f"{GO_VERSION}.zip")
    ]
    assert files == sorted(
        [
            f"ledger_bus-{VERSION}-py3-none-any.whl",
            f"ledger_bus-{VERSION}.tar.gz",
            f"ledger-bus-{VERSION}.tgz",
            "SHA256SUMS",
            *go_files,
        ]
    )
    # And SHA256SUMS names every other file, each with its sum
    summed = sums(release)
    assert sorted(summed) == [f for f in files if f != "SHA256SUMS"]
    for name, digest in summed.items():
        assert hashlib.sha256((release / name).read_bytes()).hexdigest() == digest, name
    if shutil.which("sha256sum"):
        run("sha256sum", "--check", "--strict", "--quiet", "SHA256SUMS", cwd=release)

    # And the build left the clone as it found it: whatever it wrote there, git ignores
    assert run("git", "status", "--porcelain", cwd=release.parent) == ""


# -- the npm package ---------------------------------------------------------------------------


def npm(*args: str | Path, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """npm as a user runs it: not as a script of a package (tests.support.npm.npm_env)."""
    return subprocess.run(
        ["npm", *(str(a) for a in args), "--no-audit", "--no-fund"],
        cwd=cwd,
        env=npm_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_packing_the_npm_package_without_its_development_dependencies_says_what_to_run(
    tmp_path: Path,
) -> None:
    # Given typescript/ as a clone has it, its development dependencies not installed
    clone = fresh_clone(tmp_path, "typescript", "ledger_bus/store/lua")
    assert not (clone / "typescript" / "node_modules").exists()

    # When it is packed, then packing, which builds it, says in one line what it needs first
    packed = npm("pack", cwd=clone / "typescript")
    assert packed.returncode != 0
    assert "run npm ci here first" in packed.stderr, packed.stderr
    assert "not found" not in packed.stderr, packed.stderr


def test_the_npm_tarball_holds_the_build_and_runs_nothing_at_install(release: Path) -> None:
    with tarfile.open(release / f"ledger-bus-{VERSION}.tgz") as tgz:
        names = set(tgz.getnames())
        manifest_file = tgz.extractfile("package/package.json")
        assert manifest_file is not None
        manifest = json.load(manifest_file)
    assert manifest["version"] == VERSION
    # Each entry point's module and declarations, built
    for entry in manifest["exports"].values():
        for path in (entry["import"], entry["types"]):
            assert "package/" + path.removeprefix("./") in names, path
    built = [n for n in names if n.startswith("package/dist/src/")]
    assert [n for n in built if n.endswith(".js")]
    assert [n for n in built if n.endswith(".d.ts")]
    # No script that npm runs when a user installs the package (it is built when packed)
    scripts = manifest.get("scripts", {})
    assert not {"preinstall", "install", "postinstall", "prepare"} & set(scripts), scripts


# An ES module (the .mjs says so, whatever the project's package.json says) that connects,
# appends, reads and closes what it opened, so that it ends on its own.
NODE_PROGRAM = """\
import { connect, streamId } from "ledger-bus";

const store = connect(process.env.LEDGER_BUS_URL, { prefix: process.env.LEDGER_BUS_PREFIX });
const ref = streamId("from-npm", "main");
const done = await store.append(ref, 0, "a1", [{ type: "message", agent: "node", body: "hi" }]);
const read = await store.readStream(ref);
await store.close();
console.log(JSON.stringify({ version: done.lastVersion, bodies: read.map((e) => e.fields.body) }));
"""


def test_the_npm_tarball_installs_in_a_fresh_project_and_runs_against_redis(
    release: Path, redis_url: str, tmp_path: Path
) -> None:
    # Given a fresh project outside the repository, as `npm init -y` makes it
    project = tmp_path / "app"
    project.mkdir()
    assert npm("init", "-y", cwd=project).returncode == 0

    # When the release's tarball is installed there: its dependencies from the registry through
    # npm's cache, where `npm ci` (make dist's in the clone, make test's) put the versions the
    # lock holds, so that it takes what is there and asks the registry only for what is not
    installed = npm(
        "install", "--prefer-offline", release / f"ledger-bus-{VERSION}.tgz", cwd=project
    )

    # Then it installs with no warning of a script it would run
    assert installed.returncode == 0, installed.stderr
    assert "install-scripts" not in installed.stderr, installed.stderr
    assert "prepare" not in installed.stderr, installed.stderr

    # And a program using it appends and reads against a real server, and ends on its own
    (project / "app.mjs").write_text(NODE_PROGRAM)
    prefix = f"npm-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "LEDGER_BUS_URL": redis_url, "LEDGER_BUS_PREFIX": prefix}
    out = run("node", "app.mjs", cwd=project, env=env, timeout=60)
    assert json.loads(out) == {"version": 1, "bodies": ["hi"]}
    # And the Python package reads what it wrote
    store = ledger_bus.connect(redis_url, prefix=prefix)
    try:
        assert [e["body"] for e in store.read_stream(ledger_bus.StreamId("from-npm", "main"))] == [
            "hi"
        ]
    finally:
        store.close()


# -- the wheel, with each extra ----------------------------------------------------------------

# An append and a read on the store at a URL, with the key prefix LEDGER_BUS_PREFIX.
STORE_USE = """
import os
import ledger_bus as lb

def append_and_read(url):
    store = lb.connect(url, prefix=os.environ["LEDGER_BUS_PREFIX"])
    ref = lb.StreamId("extras", "main")
    store.append(ref, lb.ANY, "a1", [{"type": "message", "agent": "a", "body": "hi"}])
    assert [e["body"] for e in store.read_stream(ref)] == ["hi"], store.read_stream(ref)
    store.close()
"""

APPEND_AND_READ = STORE_USE + 'append_and_read(os.environ["LEDGER_BUS_URL"])\n'

# The Valkey server binary the extra brings, started, and used.
SERVER = (
    STORE_USE
    + """
from ledger_bus.demo.server import LocalServer, valkey_binary
binary = valkey_binary()
assert binary, "no Valkey server binary"
with LocalServer(binary=binary, appendonly=False) as server:
    append_and_read(server.url)
"""
)

OTEL = """
import ledger_bus as lb
from ledger_bus.otel import spans_of
store = lb.connect("memory://")
call = {"agent": "a", "tool": "search", "attempt_id": "c1"}
store.append(lb.StreamId("s", "main"), 0, "a1", [
    {"type": "tool_call", "args": {}, **call},
    {"type": "tool_result", "status": "ok", "result": 1, **call},
])
assert [span.name for span in spans_of(store, "s")] == ["execute_tool search"]
"""

LANGGRAPH = """
from ledger_bus.adapters.langgraph import LedgerSaver
with LedgerSaver.from_conn_string("memory://") as saver:
    assert saver.get_tuple({"configurable": {"thread_id": "t"}}) is None
"""

OPENAI_AGENTS = """
import asyncio
from ledger_bus.adapters.openai_agents import LedgerSession
session = LedgerSession.from_url("s", "memory://")
asyncio.run(session.add_items([{"role": "user", "content": "hi"}]))
assert asyncio.run(session.get_items()) == [{"role": "user", "content": "hi"}]
session.close()
"""

ADK = """
import asyncio
import ledger_bus as lb
from ledger_bus.adapters.adk import LedgerSessionService
service = LedgerSessionService(lb.connect("memory://"))
asyncio.run(service.create_session(app_name="app", user_id="u", session_id="s"))
assert asyncio.run(service.get_session(app_name="app", user_id="u", session_id="s")).id == "s"
"""

A2A = """
import asyncio
from a2a.server.context import ServerCallContext
from a2a.types import Task, TaskState, TaskStatus
import ledger_bus as lb
from ledger_bus.adapters.a2a import LedgerTaskStore
tasks = LedgerTaskStore(lb.connect("memory://"))
made = Task(id="t", context_id="c", status=TaskStatus(state=TaskState.TASK_STATE_WORKING))
asyncio.run(tasks.save(made, ServerCallContext()))
assert asyncio.run(tasks.get("t", ServerCallContext())) == made
"""

AG_UI = """
import ledger_bus as lb
from ledger_bus.exports.agui import Mapper, wire
store = lb.connect("memory://")
store.append(lb.StreamId("s", "main"), 0, "a", [{"type": "message", "agent": "a", "body": "hi"}])
(said,) = store.scan_session("s")
assert '"delta":"hi"' in wire(Mapper("s").feed(said)[1])
"""

# The first message of an MCP client over stdio: the server answers it, then ends with stdin.
MCP_HELLO = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"},
        },
    }
)

Check = Callable[[Path, Path, dict[str, str]], None]


def python(code: str) -> Check:
    def check(bin_: Path, home: Path, env: dict[str, str]) -> None:
        run(bin_ / "python", "-c", code, cwd=home, env=env, timeout=120)

    return check


def mcp_server(bin_: Path, home: Path, env: dict[str, str]) -> None:
    said = run(bin_ / "ledger-bus", "mcp", "--agent", "a", cwd=home, env=env, input=MCP_HELLO)
    assert json.loads(said)["result"]["serverInfo"]["name"] == "ledger-bus"


def web_view(bin_: Path, home: Path, env: dict[str, str]) -> None:
    line = json.dumps({"type": "message", "agent": "a", "body": "hi"})
    run(
        bin_ / "ledger-bus",
        "append",
        "shown",
        "main",
        "--append-id",
        "a1",
        cwd=home,
        env=env,
        input=line,
    )
    assert_the_view_serves(bin_, home, env, showing="shown")


def contract_suite(bin_: Path, home: Path, env: dict[str, str]) -> None:
    (home / "test_my_store.py").write_text("from ledger_bus.testing.contract import *  # noqa\n")
    listed = run(
        bin_ / "python", "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", cwd=home
    )
    assert re.search(r"^\d+ tests? collected", listed, re.MULTILINE), listed


# What each extra is for, tried in a venv of the wheel with that extra alone: the command or the
# module a page names, used once (each fails without its extra:
# test_without_its_extra_each_check_fails). Beside each, the store it needs, when it needs one.
CHECKS: dict[str, tuple[Check, str]] = {
    "adk": (python(ADK), ""),
    "a2a": (python(A2A), ""),
    "ag-ui": (python(AG_UI), ""),
    "langgraph": (python(LANGGRAPH), ""),
    "mcp": (mcp_server, "redis"),
    "openai-agents": (python(OPENAI_AGENTS), ""),
    "otel": (python(OTEL), ""),
    "postgres": (python(APPEND_AND_READ), "postgres"),
    "server": (python(SERVER), ""),
    "sql": (python(APPEND_AND_READ), "sqlite"),
    "testing": (contract_suite, ""),
    "ui": (web_view, "redis"),
}


def store_env(needs: str, home: Path, urls: dict[str, Callable[[], str]]) -> dict[str, str]:
    prefix = f"x{uuid.uuid4().hex[:8]}"
    url = f"sqlite:///{home / 'ledger.db'}" if needs == "sqlite" else urls[needs]() if needs else ""
    return {**os.environ, "LEDGER_BUS_URL": url, "LEDGER_BUS_PREFIX": prefix}


@pytest.mark.parametrize("extra", EXTRAS)
def test_the_wheel_with_each_extra_does_what_the_extra_is_for(
    extra: str, venv_with: Callable[..., Path], request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    assert extra in CHECKS, f"pyproject.toml's extra [{extra}]: say here what it is for"
    check, needs = CHECKS[extra]
    # Given the wheel installed with the extra into a fresh venv, used outside the checkout
    bin_ = venv_with(extra)
    urls = {
        "redis": lambda: str(request.getfixturevalue("redis_url")),
        "postgres": lambda: str(request.getfixturevalue("postgres_server").url),
    }
    # Then what the extra is for works
    check(bin_, tmp_path, store_env(needs, tmp_path, urls))


def test_without_its_extra_each_check_fails(
    venv_with: Callable[..., Path], redis_url: str, tmp_path: Path
) -> None:
    # Given the wheel alone in a fresh venv
    bin_ = venv_with()
    assert run(bin_ / "ledger-bus", "--version", cwd=tmp_path).split()[-1] == VERSION
    unreachable = {"redis": lambda: redis_url, "postgres": lambda: "postgresql://u@127.0.0.1:9/db"}
    # Then each extra's check fails there: each tries what only its extra brings
    held: list[str] = []
    for extra in EXTRAS:
        check, needs = CHECKS[extra]
        home = tmp_path / extra
        home.mkdir()
        try:
            check(bin_, home, store_env(needs, home, unreachable))
        except AssertionError:
            continue
        held.append(extra)
    assert held == [], "these checks hold without their extra"


# -- the Go modules ----------------------------------------------------------------------------


def zip_files(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as z:
        return {name: z.read(name) for name in z.namelist()}


def test_the_go_modules_in_dist_are_what_modproxy_serves_and_go_gets_them_from_there(
    release: Path, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    # Given dist/go, and modproxy's proxy of the modules of this checkout (and the stand-in
    # for AgentGo at the version the adapter pins, which no release publishes)
    served: Path = request.getfixturevalue("proxy")
    dist_go = release / "go"

    # Then each module's zip holds what modproxy makes of this checkout, and its go.mod is the
    # checkout's, with no replace
    for module in (SDK, ADAPTER):
        at = Path(module, "@v", GO_VERSION)
        assert zip_files(dist_go / f"{at}.zip") == zip_files(served / f"{at}.zip"), module
        released_mod = (dist_go / f"{at}.mod").read_text("utf-8")
        assert released_mod == (served / f"{at}.mod").read_text("utf-8"), module
        assert not re.search(r"^\s*replace\b", released_mod, re.MULTILINE), module
        assert (dist_go / module / "@v" / "list").read_text("utf-8") == f"{GO_VERSION}\n"

    # When a user's module outside the repository gets both through GOPROXY=file://dist/go
    user = tmp_path / "user"
    user.mkdir()
    env = outside(served, tmp_path)
    env["GOPROXY"] = f"{dist_go.as_uri()},{env['GOPROXY']}"
    for args in (
        ["mod", "init", "example.com/user"],
        ["get", f"{SDK}@{GO_VERSION}", f"{ADAPTER}@{GO_VERSION}"],
    ):
        done = go(*args, cwd=user, env=env)
        assert done.returncode == 0, done.stderr

    # Then what the go command fetched is dist's, byte for byte
    summed = sums(release)
    for module in (SDK, ADAPTER):
        fetched = tmp_path / "modcache" / "cache" / "download" / module / "@v" / f"{GO_VERSION}.zip"
        digest = hashlib.sha256(fetched.read_bytes()).hexdigest()
        assert digest == summed[f"go/{module}/@v/{GO_VERSION}.zip"], module

    # And the documented programs on the SDK and on the adapter find every package they import
    # there (test_go_module builds and runs them on modproxy's modules, which dist's are)
    (user / "main.go").write_text(documented_programs()[0])
    (user / "agentgo").mkdir()
    (user / "agentgo" / "main.go").write_text(
        AGENTGO_PROGRAM.replace("WIRING", documented_wiring())
    )
    listed = go("list", "-deps", "-f", "{{.ImportPath}} {{.Module}}", "./...", cwd=user, env=env)
    assert listed.returncode == 0, listed.stderr
    used = {line.split()[1] for line in listed.stdout.splitlines() if len(line.split()) > 2}
    assert {SDK, ADAPTER} <= used, listed.stdout
