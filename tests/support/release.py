"""The release as a user gets it, made once a test run: `make dist` in a fresh clone of this
checkout (never the repository's own dist/), and what is made of it: the wheel, the sdist, the
npm tarball, the Go modules in the module proxy's layout (dist/go), and a fresh venv of the wheel
for each set of extras asked for. Whatever asks first makes it, from any thread; the others wait
for it (and get its error, when making failed). Used by tests/packaging/test_dist.py,
test_wheel.py, test_go_module.py and tests/project/test_doc_blocks.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from pathlib import Path
from typing import Generic, TypeVar

import pytest

from tests.support.helpers import ROOT

# uv as `make install` installs it (a venv of its own inside the one running the tests), versions
# held to the lock by constraints, so that what a fresh venv gets is what CI tested.
UV = Path(sys.prefix) / "uv" / "bin" / "uv"
LOCK = ROOT / "requirements" / "dev.txt"
# The venv running the tests, which `make dist` uses as installed.
VENV = Path(sys.prefix)

T = TypeVar("T")


class Once(Generic[T]):
    """What is made once per key, whichever thread asks first; the others wait for it (and get
    its error, when making failed)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._made: dict[object, Future[T]] = {}

    def get(self, key: object, make: Callable[[], T]) -> T:
        with self._lock:
            future = self._made.get(key)
            mine = future is None
            if future is None:
                future = self._made[key] = Future()
        if mine:
            try:
                future.set_result(make())
            except BaseException as e:
                future.set_exception(e)
        return future.result()


# What a run makes once, by the run's temporary folder (one a session) and what it is.
_RUN: Once[Path] = Once()


def once_a_run(factory: pytest.TempPathFactory, what: str, make: Callable[[], Path]) -> Path:
    """What `make` makes, made once a test run whichever test (or thread) asks first."""
    return _RUN.get((factory.getbasetemp(), what), make)


def run(*args: str | Path, cwd: Path, timeout: float = 300, **kw: object) -> str:
    """Run `args`; its stdout, or an AssertionError with what it said."""
    done = subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        **kw,  # type: ignore[call-overload]
    )
    assert done.returncode == 0, f"{args}: {done.stderr}{done.stdout}"
    return str(done.stdout)


def fresh_clone(into: Path, *paths: str) -> Path:
    """This checkout as a clone of it would be, in `into` (only `paths`, when given): the files
    git lists (tracked or new, none that it ignores, none of what a build or an install left
    here), committed, so that a build there starts from what a release starts from and sees the
    changes made here."""
    into.mkdir(parents=True, exist_ok=True)
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", *paths],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    for name in listed.stdout.split("\0"):
        if name and (ROOT / name).is_file():  # (a tracked file deleted here is not copied)
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, into / name)
    # A repository of its own, with no configuration of the user's (hooks, signing).
    git = {
        **os.environ,
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
        **dict.fromkeys(["GIT_AUTHOR_NAME", "GIT_COMMITTER_NAME"], "release"),
        **dict.fromkeys(["GIT_AUTHOR_EMAIL", "GIT_COMMITTER_EMAIL"], "release@example.com"),
    }
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "release"]):
        run("git", *args, cwd=into, env=git)
    return into


def make_dist(clone: Path) -> Path:
    """`make dist` in `clone`, with the venv running the tests as the one it uses (as installed:
    -o, so that make neither installs into it nor downloads the Go modules again); its dist/."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    as_installed = ["-o", f"{VENV}/.installed", "-o", f"{VENV}/.go-downloaded"]
    done = subprocess.run(
        ["make", "--no-print-directory", "dist", f"VENV={VENV}", *as_installed],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, f"make dist: {done.stderr[-4000:]}{done.stdout[-4000:]}"
    return clone / "dist"


def fresh_venv(where: Path, requirement: str) -> Path:
    """A new venv at `where` with `requirement` installed in it (versions held to the lock); its
    bin folder."""
    env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never", "UV_NO_PROGRESS": "1"}
    where.parent.mkdir(parents=True, exist_ok=True)
    run(UV, "venv", "-q", "--python", sys.executable, where, cwd=where.parent, env=env)
    run(
        UV, "pip", "install", "-q", "--python", where / "bin" / "python", requirement,
        "--constraint", LOCK, "--build-constraint", LOCK,
        cwd=where.parent, env=env,
    )  # fmt: skip
    return where / "bin"


class Release:
    """The release `make dist` makes in a fresh clone under `root`, made the first time anything
    of it is asked for; and the venvs of its wheel, each made the first time it is asked for."""

    def __init__(self, root: Path):
        self.root = root
        self._once: Once[Path] = Once()

    def dist(self) -> Path:
        """The clone's dist/ (the clone is its parent)."""
        return self._once.get("dist", lambda: make_dist(fresh_clone(self.root / "clone")))

    def _one(self, pattern: str) -> Path:
        (found,) = self.dist().glob(pattern)
        return found

    def wheel(self) -> Path:
        return self._one("ledger_bus-*.whl")

    def sdist(self) -> Path:
        return self._one("ledger_bus-*.tar.gz")

    def npm_tarball(self) -> Path:
        return self._one("ledger-bus-*.tgz")

    def go_proxy(self) -> Path:
        """dist/go: the Go modules as the module proxy serves a tag (GOPROXY=file://...)."""
        return self.dist() / "go"

    def venv(self, extras: Iterable[str] = ()) -> Path:
        """The bin folder of a fresh venv with the wheel and `extras` installed: one venv a set
        of extras, in whatever order they are named."""
        key = tuple(sorted(set(extras)))

        def make() -> Path:
            spec = f"ledger-bus[{','.join(key)}]" if key else "ledger-bus"
            where = self.root / ("venv-" + ("-".join(key) or "plain")) / "venv"
            return fresh_venv(where, f"{spec} @ {self.wheel().as_uri()}")

        return self._once.get(("venv", key), make)


_RELEASES: Once[Release] = Once()


def release_of(factory: pytest.TempPathFactory) -> Release:
    """This test run's release (nothing is made until something of it is asked for)."""
    if not UV.exists():
        pytest.skip(f"no {UV}: run make install")
    return _RELEASES.get(factory.getbasetemp(), lambda: Release(factory.mktemp("release")))
