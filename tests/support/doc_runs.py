"""A page's code blocks run as its reader runs them: outside the repository, in a folder of the
page's own, against a redis-server started for the page, each program twice (the second run is
the reader running the page again) and each within a time limit (it must end on its own)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from ledger_bus.demo.server import LocalServer
from tests.support.doc_blocks import Block, Unit, blocks_of, kind_of, units_of
from tests.support.helpers import ROOT
from tests.support.npm import npm_env

# How long one program may take: a block that waits for something that never comes fails here.
LIMIT = 90.0
# The Redis a page names, where the page's own server runs instead.
DEFAULT_REDIS = re.compile(r"redis://(?:127\.0\.0\.1|localhost):6379")
# A JavaScript block says the file it is saved as on its first line (`// app.mjs ...`); without
# that, it is what `npm init -y` makes the entry point: index.js, CommonJS.
NODE_FILE = re.compile(r"^//\s*(?P<name>[\w.-]+\.(?:mjs|cjs|js))\b")
NODE_DEFAULT = "index.js"


@dataclass
class Ran:
    """What one program did."""

    returncode: int
    stdout: str
    stderr: str


@dataclass
class Outcome:
    """One program's run: None as `failure` when it did what it should."""

    unit: Unit
    run: int
    seconds: float
    failure: str | None


@dataclass
class PageResult:
    page: str
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def failures(self) -> list[str]:
        return [f"{o.unit.label} (run {o.run}): {o.failure}" for o in self.outcomes if o.failure]


# Go blocks: given a name for the program, its source and the environment, what the program
# did (the module around it is the test's to make).
GoRunner = Callable[[str, str, dict[str, str]], Ran]


class Checks(Protocol):
    """What a test asks of a program besides ending well."""

    def afterwards(self, unit: Unit) -> str:
        """Python run after the program's, in its namespace (asserts)."""

    def check(self, unit: Unit, ran: Ran) -> str | None:
        """A failure, from what the ended program did; None when it did what it should."""


def runnable(block: Block) -> bool:
    return kind_of(block) not in (None, "data") and not block.not_run and not block.excerpt_of


def user_env(url: str, bin_: Path | None) -> dict[str, str]:
    """A reader's environment: nothing of the test's Python, nothing of the checkout on PATH,
    the venv's commands first, and LEDGER_BUS_URL naming the page's server."""
    env = {
        name: value
        for name, value in npm_env().items()
        if not name.startswith(("PYTHON", "VIRTUAL_ENV", "PYTEST", "LEDGER_BUS_"))
    }
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and not _in_checkout(p)]
    if bin_ is not None:
        path.insert(0, str(bin_))
    env["PATH"] = os.pathsep.join(path)
    env["LEDGER_BUS_URL"] = url
    return env


def _in_checkout(path: str) -> bool:
    return Path(path).resolve().is_relative_to(ROOT)


# Given a block's extras, the bin folder of a venv of the wheel with them installed.
VenvOf = Callable[[tuple[str, ...]], Path]


class PageRunner:
    """Runs pages' blocks: Python and shell in the venvs `venv` gives, JavaScript in the npm
    project `node_project()` gives, Go through `go` (None: no Go here); `checks` says what else
    a program must have done; blocks `elsewhere` names another test for are left to it."""

    def __init__(
        self,
        homes: Path,
        venv: VenvOf,
        node_project: Callable[[], Path],
        go: GoRunner | None,
        checks: Checks,
        elsewhere: Callable[[Block], str | None],
    ):
        self.homes = homes
        self.venv = venv
        self.node_project = node_project
        self.go = go
        self.checks = checks
        self.elsewhere = elsewhere

    def units(self, page: str) -> list[Unit]:
        """The programs of `page` this runner runs."""
        return units_of([b for b in blocks_of(page) if runnable(b) and not self.elsewhere(b)])

    def run_page(self, page: str, runs: int = 2) -> PageResult:
        units = self.units(page)
        result = PageResult(page)
        home = self.homes / re.sub(r"\W", "_", page)
        (home / ".programs").mkdir(parents=True)
        # A server as a production one is set up (every append in the AOF, fsynced), so that
        # what `doctor` says of it is what it says of a server set up well.
        server = LocalServer(appendonly=True, extra=["--appendfsync", "always"])
        with server:
            for run in range(1, runs + 1):
                for unit in units:
                    outcome = self._run_unit(unit, run, home, server.url)
                    result.outcomes.append(outcome)
                    if outcome.failure:  # what follows may need what this made
                        return result
        return result

    def _run_unit(self, unit: Unit, run: int, home: Path, url: str) -> Outcome:
        started = time.monotonic()
        try:
            ran = self._ran(unit, home, url)
        except subprocess.TimeoutExpired as e:
            said = _text(e.stderr) + _text(e.stdout)
            late = f"did not end within {e.timeout:g} s{_tail(said)}"
            return Outcome(unit, run, time.monotonic() - started, late)
        except AssertionError as e:  # what the program needed could not be made
            return Outcome(unit, run, time.monotonic() - started, f"not run: {e}")
        seconds = time.monotonic() - started
        failure: str | None = None
        if ran.returncode != 0:
            failure = f"exit {ran.returncode}{_tail(ran.stderr + ran.stdout)}"
        else:
            failure = self.checks.check(unit, ran)
        return Outcome(unit, run, seconds, failure)

    def _ran(self, unit: Unit, home: Path, url: str) -> Ran:
        source = "".join(_rewritten(b.source, url) for b in unit.blocks)
        if unit.kind == "go":
            assert self.go is not None, "no Go here"
            name = re.sub(r"\W", "_", unit.first.label)
            return self.go(name, source, user_env(url, None))
        if unit.kind == "node":
            return self._node(unit, source, url)
        bin_ = self.venv(unit.extras)
        env = user_env(url, bin_)
        name = f"{unit.first.line}"
        if unit.kind == "shell":
            script = home / ".programs" / f"block_{name}.sh"
            script.write_text(source)
            return _run(["bash", "-e", "-o", "pipefail", str(script)], home, env)
        program = home / ".programs" / f"{'test_' if unit.kind == 'pytest' else 'block_'}{name}.py"
        program.write_text(_program(unit, url) + self.checks.afterwards(unit))
        if unit.kind == "pytest":
            args = ["-m", "pytest", "-q", "-p", "no:cacheprovider", str(program)]
            return _run([str(bin_ / "python"), *args], home, env)
        return _run([str(bin_ / "python"), str(program)], home, env)

    def _node(self, unit: Unit, source: str, url: str) -> Ran:
        named = NODE_FILE.match(source)
        name = named.group("name") if named else NODE_DEFAULT
        folder = self.node_project() / re.sub(r"\W", "_", unit.first.label)
        folder.mkdir(exist_ok=True)
        (folder / name).write_text(source)
        return _run(["node", name], folder, user_env(url, None))


def _program(unit: Unit, url: str) -> str:
    """The blocks of a Python program, each headed by where it comes from."""
    return "".join(f"# {b.label}\n{_rewritten(b.source, url)}\n" for b in unit.blocks)


def _rewritten(source: str, url: str) -> str:
    """`source` with the default Redis the page names replaced by the page's own server."""
    return DEFAULT_REDIS.sub(url.removesuffix("/0"), source)


def _run(args: list[str], cwd: Path, env: dict[str, str]) -> Ran:
    """`args` in a process group of its own, killed whole at the time limit (a shell's children
    with it) and once the program ended (what it left running in the background)."""
    with subprocess.Popen(
        args,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as process:
        try:
            out, err = process.communicate(timeout=LIMIT)
        except subprocess.TimeoutExpired:
            _kill_group(process.pid)
            out, err = process.communicate()
            raise subprocess.TimeoutExpired(args, LIMIT, out, err) from None
        finally:
            _kill_group(process.pid)
    return Ran(process.returncode, out, err)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _text(said: str | bytes | None) -> str:
    if isinstance(said, bytes):
        return said.decode("utf-8", "replace")
    return said or ""


def _tail(said: str, lines: int = 12) -> str:
    kept = [line for line in said.splitlines() if line.strip()][-lines:]
    return "".join(f"\n    {line}" for line in kept)
