"""The locks in requirements/ and the ranges in pyproject.toml say the same things, and the
package works across those ranges where it leans on a dependency's insides."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from tests.support.helpers import ROOT

LOCKS = ROOT / "requirements"
# The dependencies whose oldest allowed versions `make test-oldest` runs the core suite on.
HELD = ["redis", "pydantic", "click", "sqlalchemy"]


def floors() -> dict[str, str]:
    """The lowest version pyproject.toml allows of each dependency, by name."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]
    found: dict[str, str] = {}
    for line in [*project["dependencies"], *project["optional-dependencies"]["sql"]]:
        requirement = Requirement(line)
        for spec in requirement.specifier:
            if spec.operator == ">=":
                found[requirement.name.lower()] = spec.version
    return found


def pins(path: Path) -> dict[str, str]:
    """name -> version of each `name==version` line of a requirements file."""
    text = path.read_text("utf-8")
    return {m[1].lower(): m[2] for m in re.finditer(r"^([A-Za-z0-9_.\-]+)==(\S+)", text, re.M)}


def test_the_oldest_lock_holds_each_dependency_at_the_floor_pyproject_gives() -> None:
    allowed, oldest = floors(), pins(LOCKS / "oldest.in")
    for name in HELD:
        assert Version(oldest[name]) == Version(allowed[name]), name  # "6.4" is "6.4.0"


@pytest.mark.parametrize("lock", sorted(p.name for p in LOCKS.glob("*.txt")))
def test_every_locked_version_carries_its_hashes(lock: str) -> None:
    # Each pin is a line `name==version [; marker] \` followed by its `--hash=` lines.
    lines = (LOCKS / lock).read_text("utf-8").splitlines()
    pinned = [n for n, line in enumerate(lines) if re.match(r"[A-Za-z0-9_.\-]+==", line)]
    assert pinned
    for n in pinned:
        assert lines[n + 1].strip().startswith("--hash=sha256:"), lines[n]


def test_the_venv_runs_the_versions_its_lock_names() -> None:
    # The development venv holds the lock's versions; `make test-oldest`'s the floors.
    venv = Path(sys.prefix).name
    if venv not in (".venv", ".venv-oldest"):
        pytest.skip(f"{venv} installs without a lock")
    wanted = pins(LOCKS / ("oldest.in" if venv == ".venv-oldest" else "dev.txt"))
    for name in HELD:
        assert version(name) == wanted[name], name


def test_asyncio_commands_are_packed_in_c_as_redis_py_packs_them() -> None:
    # Given the asyncio connection class the store uses, when a command is packed, then its
    # bytes are redis-py's own, packed by hiredis's C packer: redis-py 8.2 does that itself
    # (the class is its own), before it the store adds it (the class is a subclass).
    from redis.asyncio.connection import Connection

    from ledger_bus.store.redis.aio import packing_in_c

    kind = packing_in_c(Connection)
    command = ("XADD", "k", "*", "f", b"\x00v", 7, 1.5)
    ours = b"".join(kind().pack_command(*command))
    if hasattr(Connection, "_pack_command_python"):
        assert kind is Connection
        assert type(Connection()._command_packer).__name__ == "HiredisRespSerializer"
        assert ours == b"".join(Connection()._pack_command_python(*command))
    else:
        assert kind is not Connection
        assert ours == b"".join(Connection().pack_command(*command))
    assert ours.startswith(b"*7\r\n$4\r\nXADD\r\n")


# An extra's modules import none of the SQL extras' drivers (a wheel installed with [langgraph]
# alone has no SQLAlchemy): the adapters whose frameworks do not bring one, with the framework
# each needs (the oldest suite's venv has none of them, and an adapter without its framework is a
# clear ModuleNotFoundError of its own, held elsewhere).
WITHOUT_SQL = {
    "ledger_bus.adapters.langgraph": "langchain_core",
    "ledger_bus.adapters.openai_agents": "agents",
}


@pytest.mark.parametrize("module", WITHOUT_SQL)
def test_an_adapter_imports_no_sql_driver(module: str) -> None:
    if importlib.util.find_spec(WITHOUT_SQL[module]) is None:
        pytest.skip(f"{WITHOUT_SQL[module]} is not installed in {Path(sys.prefix).name}")
    # A fresh interpreter, SQLAlchemy and psycopg made unimportable.
    code = f"""
import importlib, sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("sqlalchemy", "psycopg"):
            raise ModuleNotFoundError(f"No module named {{name!r}} (the [sql] extra's)")
sys.meta_path.insert(0, Block())
importlib.import_module({module!r})
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr.splitlines()[-1:]
