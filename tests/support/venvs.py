"""The package as a user installs it: the wheel, built once from the checkout, and a fresh venv
of it per set of extras, made once and shared by whatever asks for the same extras (from any
thread)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path

from tests.support.helpers import ROOT

# uv as `make install` installs it (a venv of its own inside the one running the tests), versions
# held to the lock by constraints, so what a fresh venv gets is what CI tested.
UV = Path(sys.prefix) / "uv" / "bin" / "uv"
LOCK = ROOT / "requirements" / "dev.txt"


def checked(args: list[str | Path], cwd: Path, timeout: float = 300) -> str:
    """Run `args`; its stdout, or an AssertionError with what it said."""
    env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never", "UV_NO_PROGRESS": "1"}
    done = subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, f"{args}: {done.stderr}{done.stdout}"
    return done.stdout


class Once:
    """Paths made once per key, whichever thread asks first; the others wait for it (and get
    its error, when making failed)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._made: dict[object, Future[Path]] = {}

    def get(self, key: object, make: Callable[[], Path]) -> Path:
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


class Venvs:
    """Venvs under `root`, each the wheel (built from the checkout into `root`, once) with a
    set of extras; `bin(extras)` makes one the first time it is asked for."""

    def __init__(self, root: Path):
        self.root = root
        self._once = Once()

    def wheel(self) -> Path:
        """The wheel `python -m build` makes of the checkout (with the lock's setuptools)."""
        return self._once.get("wheel", self._build)

    def bin(self, extras: tuple[str, ...] = ()) -> Path:
        """The bin folder of a fresh venv with the wheel and `extras` installed."""
        return self._once.get(extras, lambda: self._venv(extras))

    def _build(self) -> Path:
        self.root.mkdir(parents=True, exist_ok=True)
        # From a copy of what the wheel is made of, so that the build leaves nothing in the
        # checkout (build/, the egg-info) for another build running there to trip on.
        source = self.root / "source"
        source.mkdir()
        for name in ("pyproject.toml", "README.md"):
            shutil.copyfile(ROOT / name, source / name)
        ignored = shutil.ignore_patterns("__pycache__", "*.pyc")
        shutil.copytree(ROOT / "ledger_bus", source / "ledger_bus", ignore=ignored)
        out = self.root / "dist"
        checked(
            [sys.executable, "-m", "build", "--no-isolation", "--wheel", "--outdir", out, source],
            cwd=self.root,
        )
        (wheel,) = out.glob("ledger_bus-*.whl")
        return wheel

    def _venv(self, extras: tuple[str, ...]) -> Path:
        wheel = self.wheel()
        where = self.root / ("venv-" + ("-".join(extras) or "plain"))
        checked([UV, "venv", "-q", "--python", sys.executable, where], cwd=self.root)
        spec = f"ledger-bus[{','.join(extras)}]" if extras else "ledger-bus"
        checked(
            [
                UV, "pip", "install", "-q", "--python", where / "bin" / "python",
                f"{spec} @ {wheel.as_uri()}", "--constraint", LOCK, "--build-constraint", LOCK,
            ],
            cwd=self.root,
        )  # fmt: skip
        return where / "bin"
