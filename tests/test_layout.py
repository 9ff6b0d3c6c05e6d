"""The one-way arrows: cli -> features -> store -> model. A module imports from its own layer
and the layers below it, never above, so the store knows nothing of agents or the command line,
and the file format lives below everything that writes or reads it."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Final

PACKAGE: Final = Path(__file__).resolve().parent.parent / "ledger_bus"
MODEL: Final = {
    "acl",
    "artifacts",
    "batch",
    "canonical",
    "durability",
    "errors",
    "events",
    "extras",
    "files",
    "ids",
    "jsonl",
    "jsontext",
    "pgserver",
    "records",
    "server",
}
FEATURES: Final = {
    "adapters",
    "aio",
    "archive",
    "conversation",
    "demo",
    "dispatch",
    "doctor",
    "filters",
    "mirror",
    "reconciler",
    "recorder",
    "rewind",
    "tailer",
}
RANK: Final = {"model": 0, "store": 1, "features": 2, "cli": 3}


def layer(module: str) -> str | None:
    """The layer of `ledger_bus.<module>`; None for the package's facade."""
    parts = module.split(".")
    if parts[0] in ("store", "cli"):
        return parts[0]
    if parts[0] == "ui":  # a front end, as the command line is
        return "cli"
    if parts[0] in MODEL:
        return "model"
    if parts[0] in FEATURES:
        return "features"
    return None


def imported(path: Path) -> set[str]:
    """The ledger_bus modules a file imports, as names below the package."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "ledger_bus":
                found |= {alias.name for alias in node.names}
            elif node.module.startswith("ledger_bus."):
                found.add(node.module.removeprefix("ledger_bus."))
        elif isinstance(node, ast.Import):
            found |= {
                a.name.removeprefix("ledger_bus.")
                for a in node.names
                if a.name.startswith("ledger_bus.")
            }
    return found


def test_every_module_has_a_layer() -> None:
    for path in PACKAGE.rglob("*.py"):
        module = ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
        if module in ("__init__", "__main__"):
            continue
        assert layer(module) is not None, f"ledger_bus.{module} belongs to no layer"


def test_imports_point_down_only() -> None:
    upward = []
    for path in PACKAGE.rglob("*.py"):
        module = ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
        own = layer(module)
        if own is None:
            continue
        for target in imported(path):
            theirs = layer(target)
            if theirs is not None and RANK[theirs] > RANK[own]:
                upward.append(f"ledger_bus.{module} ({own}) imports ledger_bus.{target} ({theirs})")
    assert upward == []


def test_the_core_imports_without_the_frameworks_the_adapters_need() -> None:
    """The adapters' frameworks are extras: with them missing, ledger_bus, its asyncio API and
    its command line import; only an adapter's own module asks for its extra."""
    import subprocess
    import sys

    program = """
import importlib.abc, sys

class Missing(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in ("langgraph", "langchain_core", "agents", "openai"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Missing())
import ledger_bus, ledger_bus.aio, ledger_bus.cli.app, ledger_bus.adapters
for adapter in ("langgraph", "openai_agents"):
    try:
        __import__(f"ledger_bus.adapters.{adapter}")
    except ModuleNotFoundError:
        print(adapter, "needs its extra")
"""
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "langgraph needs its extra",
        "openai_agents needs its extra",
    ]
