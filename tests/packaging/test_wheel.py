"""The wheel and the sdist a release publishes, built by `make dist` in a fresh clone of this
checkout (once a run, shared with the other tests of the release: tests/support/release.py), and
installed as a user installs them: into fresh venvs outside the checkout, run from a folder that
is not the checkout."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import tomllib
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

import ledger_bus
from ledger_bus.demo.server import LocalServer, free_port
from tests.support.helpers import ROOT
from tests.support.release import Release, fresh_venv, release_of, run

# The release is made once a run, by whichever test asks first: this module's, when it runs
# alone (make dist, then a venv).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

# What pyproject.toml ships beside the modules: each pattern is looked for in the wheel.
PACKAGE_DATA: list[str] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"][
    "setuptools"
]["package-data"]["ledger_bus"]


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Release:
    """The release, and the venvs of its wheel."""
    return release_of(tmp_path_factory)


def installed_package(bin_: Path, cwd: Path) -> Path:
    code = "import ledger_bus, pathlib; print(pathlib.Path(ledger_bus.__file__).parent)"
    return Path(run(bin_ / "python", "-c", code, cwd=cwd).strip())


def assert_package_data(package: Path) -> None:
    source = ROOT / "ledger_bus"
    for pattern in PACKAGE_DATA:
        expected = sorted(p.relative_to(source) for p in source.glob(pattern))
        assert expected, pattern
        assert sorted(p.relative_to(package) for p in package.glob(pattern)) == expected


@pytest.fixture(scope="module")
def server() -> Iterator[LocalServer]:
    with LocalServer(appendonly=False) as running:
        yield running


def test_the_wheel_installs_and_runs_outside_the_checkout(
    made: Release, server: LocalServer, tmp_path: Path
) -> None:
    # Given the wheel, installed with the extras for the view, the MCP server and the contract
    # suite into a fresh venv, used from a folder that is not the checkout
    home = tmp_path / "user"
    home.mkdir()
    bin_ = made.venv(("mcp", "testing", "ui"))
    package = installed_package(bin_, home)
    assert ROOT not in package.parents, package

    # Then its Lua scripts, templates and static files are there, and it says its version
    assert_package_data(package)
    assert run(bin_ / "ledger-bus", "--version", cwd=home).split()[-1] == ledger_bus.__version__

    # And an append and a read through the command work against a real server
    env = {**os.environ, "LEDGER_BUS_URL": server.url, "LEDGER_BUS_PREFIX": "wheel"}
    line = json.dumps({"type": "message", "agent": "user", "body": "from the wheel"})
    appended = run(
        bin_ / "ledger-bus", "append", "w1", "main", "--append-id", "a1",
        "--expected-version", "0", cwd=home, env=env, input=line,
    )  # fmt: skip
    assert json.loads(appended)["last_version"] == 1
    tailed = run(bin_ / "ledger-bus", "tail", "w1", "-o", "jsonl", cwd=home, env=env)
    assert json.loads(tailed)["body"] == "from the wheel"

    # And the demo runs to its end, its workers the installed package's
    demo = run(
        bin_ / "ledger-bus", "demo", "--no-live", "--tasks", "4", "--workers", "2",
        cwd=home, env=env, timeout=240,
    )  # fmt: skip
    assert "4/4 tasks done" in demo

    # And the web view serves its pages and its static files
    assert_the_view_serves(bin_, home, env, showing="w1")

    # And the MCP server answers a client over stdio, and the skill it ships is printed
    assert_the_mcp_server_serves(bin_, home, env)
    assert run(bin_ / "ledger-bus", "skill", cwd=home).startswith("---\nname: ledger-bus\n")

    # And the contract suite runs from the installed package against a store of the user's
    suite = home / "test_my_store.py"
    suite.write_text(
        "import pytest\n"
        "import ledger_bus\n"
        "from ledger_bus.testing.contract import *  # noqa: F403\n\n\n"
        "@pytest.fixture\n"
        "def store():\n"
        "    return ledger_bus.connect('memory://')\n"
    )
    out = run(bin_ / "python", "-m", "pytest", "-q", "-p", "no:cacheprovider", suite, cwd=home)
    assert " passed" in out, out
    assert "failed" not in out, out


def assert_the_view_serves(bin_: Path, home: Path, env: dict[str, str], showing: str) -> None:
    """The installed `ledger-bus ui` serves its page of sessions, `showing` among them, and its
    static files."""
    port = free_port()
    log = home / "ui.log"
    with log.open("wb") as stderr:
        view = subprocess.Popen(
            [bin_ / "ledger-bus", "ui", "--port", str(port)],
            cwd=home,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        page = fetch(f"http://127.0.0.1:{port}/", view, log)
        assert showing in page
        static = next((ROOT / "ledger_bus" / "ui" / "static").iterdir()).name
        assert fetch(f"http://127.0.0.1:{port}/static/{static}", view, log)
    finally:
        view.terminate()
        view.wait(timeout=30)


def assert_the_mcp_server_serves(bin_: Path, home: Path, env: dict[str, str]) -> None:
    """The installed `ledger-bus mcp`, started by the installed MCP SDK's own client, posts
    as its agent and tails what it posted."""
    client = (
        "import asyncio, json, os, sys\n"
        "from mcp import Client, StdioServerParameters\n"
        "async def main():\n"
        "    server = StdioServerParameters(\n"
        "        command=sys.argv[1], args=['mcp', '--agent', 'w'], env=dict(os.environ)\n"
        "    )\n"
        "    async with Client(server) as c:\n"
        "        await c.call_tool('post', {'session': 'w2', 'body': 'over mcp'})\n"
        "        tail = await c.call_tool('tail', {'session': 'w2'})\n"
        "        print(json.dumps(tail.structured_content))\n"
        "asyncio.run(main())\n"
    )
    out = run(bin_ / "python", "-c", client, bin_ / "ledger-bus", cwd=home, env=env)
    (event,) = json.loads(out)["events"]
    assert (event["agent"], event["body"]) == ("w", "over mcp")


def fetch(url: str, process: subprocess.Popen[bytes], log: Path, wait: float = 60) -> str:
    """The body at `url`, once the process serving it answers."""
    deadline = time.monotonic() + wait
    while True:
        try:
            with urllib.request.urlopen(url, timeout=10) as reply:
                return str(reply.read().decode("utf-8"))
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"{url} never answered: {log.read_text()}") from None
            time.sleep(0.1)


def test_the_sdist_holds_what_the_wheel_does_and_installs_outside_the_checkout(
    made: Release, tmp_path: Path
) -> None:
    # Given the sdist, built into a wheel of the user's own by the installer
    sdist = made.sdist()
    home = tmp_path / "user"
    home.mkdir()
    bin_ = fresh_venv(tmp_path / "venv", str(sdist))
    package = installed_package(bin_, home)

    # Then the package data came through the sdist, and the package appends and reads
    assert_package_data(package)
    code = (
        "import ledger_bus as lb\n"
        "store = lb.connect('memory://')\n"
        "ref = lb.StreamId('s', 'main')\n"
        "store.append(ref, 0, 'a1', [{'type': 'message', 'agent': 'a', 'body': 'hi'}])\n"
        "print(store.read_stream(ref)[0]['body'], lb.__version__)\n"
    )
    assert run(bin_ / "python", "-c", code, cwd=home).split() == ["hi", ledger_bus.__version__]
    assert shutil.which("ledger-bus", path=str(bin_))
