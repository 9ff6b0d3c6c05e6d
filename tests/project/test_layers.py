"""The one-way arrows: faces (cli/, ui/, mcp/) -> features -> store/ -> model/. A module imports
from its own layer and the layers below it, never above, so the store knows nothing of agents or
the command line, and the file format lives below everything that writes or reads it; and no
module is in a circle of imports."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Final

import pytest

from tests.support.helpers import ROOT

PACKAGE: Final = ROOT / "ledger_bus"
# The layers are folders: model/ the ground floor, store/ on it, the features' rooms between, the
# faces (cli/, ui/, mcp/) on top. At the package's top only its public paths: the facade, the
# command's entry, and ledger_bus.aio and ledger_bus.otel, which re-export their rooms' code
# (features).
FOLDERS: Final = {
    "model": "model",
    "store": "store",
    **dict.fromkeys(
        ["access", "agent", "exports", "operations", "board", "demo", "adapters", "testing"],
        "features",
    ),
    "aio": "features",
    "otel": "features",
    "cli": "faces",
    "ui": "faces",
    "mcp": "faces",
}
RANK: Final = {"model": 0, "store": 1, "features": 2, "faces": 3}


def layer(module: str) -> str | None:
    """The layer of `ledger_bus.<module>`, by its folder; None for the package's facade."""
    if module in ("__init__", "__main__"):
        return None
    return FOLDERS[module.split(".", maxsplit=1)[0]]


def test_every_module_is_in_a_room_and_the_top_holds_the_public_paths_alone() -> None:
    homeless = []
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts[0] not in FOLDERS and parts[0] not in ("__init__", "__main__"):
            homeless.append("/".join(parts))
    assert homeless == [], "a module belongs in a room (agent/, exports/, operations/, ...)"


def at_load(tree: ast.Module) -> list[ast.stmt]:
    """The import statements of a module's own body, those under TYPE_CHECKING included (a
    type is a dependency too); not those in a function, imported when it is called, which is
    how a module reaches one that imports it."""
    found: list[ast.stmt] = []
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        elif isinstance(node, ast.If):
            found += [n for n in node.body if isinstance(n, ast.Import | ast.ImportFrom)]
    return found


def imported(path: Path, loading: bool = False) -> set[str]:
    """The ledger_bus modules a file imports, as names below the package; `loading`: only
    those it imports as it loads."""
    found = set()
    tree = ast.parse(path.read_text())
    for node in at_load(tree) if loading else ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "ledger_bus":
                found |= {alias.name for alias in node.names}
            elif node.module.startswith("ledger_bus."):
                # `from ledger_bus.store.sql import statements` names a module; which of the two
                # is one, the graph below decides
                below = node.module.removeprefix("ledger_bus.")
                found |= {f"{below}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {
                a.name.removeprefix("ledger_bus.")
                for a in node.names
                if a.name.startswith("ledger_bus.")
            }
    return found


def modules(loading: bool = True) -> dict[str, set[str]]:
    """Each module of the package (dotted, below it), with the modules of it that it imports as
    it loads (`loading`), or anywhere, inside its functions too."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts[-1] == "__init__" and len(parts) > 1:
            parts = parts[:-1]
        found[".".join(parts)] = imported(path, loading=loading)
    return found


@pytest.mark.parametrize("loading", [True, False], ids=["as modules load", "inside functions too"])
def test_the_ground_floor_imports_nothing_above_it_and_no_module_is_in_a_circle(
    loading: bool,
) -> None:
    # An import inside a function runs later, but it is a dependency all the same: a circle
    # through one is a circle of the code's, which the import's place only hides.
    graph = modules(loading)
    known = set(graph)

    def resolve(target: str) -> str | None:
        while target and target not in known:  # `from ledger_bus.model import errors`
            target = target.rpartition(".")[0]
        return target or None

    edges = {m: {t for t in map(resolve, ts) if t and t != m} for m, ts in graph.items()}
    circles = []
    state: dict[str, int] = {}  # 1: on the path being walked, 2: done

    def walk(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                circles.append(" -> ".join([*path[path.index(nxt) :], nxt]))
            elif nxt not in state:
                walk(nxt, [*path, nxt])
        state[node] = 2

    for node in sorted(edges):
        if node not in state and node not in ("__init__", "__main__"):
            walk(node, [node])
    # The package's own __init__ re-exports the store and the model: importing a submodule
    # runs it first, which is no circle of the code's own.
    assert [c for c in circles if "__init__" not in c.split(" -> ")] == []


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
