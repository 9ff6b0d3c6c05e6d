"""The public Python surface: what docs/api (made from the code by `make docs`) lists, each
name importable where it is listed, and the docs and examples importing nothing else."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path

import pytest

from ledger_bus.testing.contract import PARTS
from tests.support.helpers import ROOT

API = ROOT / "docs" / "api"


def public_modules() -> dict[str, Path]:
    """Each module docs/api has a page for, and the page."""
    pages = sorted(p for p in API.rglob("*.html") if p.name != "index.html")
    return {".".join(p.relative_to(API).with_suffix("").parts): p for p in pages}


def documented(page: Path) -> set[str]:
    """The names a pdoc page documents at the top level of its module."""
    return set(re.findall(r'<section id="([A-Za-z_]\w*)">', page.read_text("utf-8")))


MODULES = public_modules()


def test_the_public_modules_are_the_ones_the_docs_promise() -> None:
    assert set(MODULES) == {
        "ledger_bus",
        "ledger_bus.aio",
        "ledger_bus.otel",
        "ledger_bus.adapters.langgraph",
        "ledger_bus.adapters.openai_agents",
        "ledger_bus.adapters.adk",
        "ledger_bus.adapters.a2a",
        "ledger_bus.testing",
        "ledger_bus.testing.contract",
        *(part.__name__ for part in PARTS.values()),
        "ledger_bus.testing.events",
    }


@pytest.mark.parametrize("name", sorted(MODULES))
def test_each_page_lists_exactly_what_its_module_exports(name: str) -> None:
    # Given a public module, when its page and its __all__ are read, then they name the same
    # things both ways: nothing documented that the code lacks, nothing exported undocumented.
    module = importlib.import_module(name)
    exported = getattr(module, "__all__", None)
    assert exported is not None, f"{name} says what it exports in __all__"
    assert documented(MODULES[name]) == set(exported), "docs/api is stale: run make docs"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_every_exported_name_is_there_and_says_what_it_is(name: str) -> None:
    module = importlib.import_module(name)
    for exported in module.__all__:
        value = getattr(module, exported)  # an AttributeError here is a broken promise
        # (the contract's tests say what they check in their names)
        if (inspect.isfunction(value) or inspect.isclass(value)) and not exported.startswith(
            "test_"
        ):
            assert (value.__doc__ or "").strip(), f"{name}.{exported} has no docstring"


IMPORT = re.compile(
    r"^\s*(?:from\s+(ledger_bus[\w.]*)\s+import\s+([\w, ]+)|import\s+(ledger_bus[\w.]*))"
)


def imports_in(path: Path) -> list[tuple[str, str | None, int]]:
    """(module, name or None, line) of each ledger_bus import in a Python file, or in the code
    blocks of a Markdown file (read line by line: a block may elide parts with `...`)."""
    text = path.read_text("utf-8")
    found: list[tuple[str, str | None, int]] = []
    if path.suffix == ".py":
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ledger_bus"):
                found += [(node.module or "", alias.name, node.lineno) for alias in node.names]
            elif isinstance(node, ast.Import):
                found += [
                    (a.name, None, node.lineno)
                    for a in node.names
                    if a.name.startswith("ledger_bus")
                ]
        return found
    for number, line in enumerate(text.splitlines(), 1):
        matched = IMPORT.match(line)
        if matched and matched[1]:
            names = [n.strip() for n in matched[2].split(",") if n.strip()]
            found += [(matched[1], name.split()[0], number) for name in names]
        elif matched:
            found.append((matched[3], None, number))
    return found


def user_facing_files() -> list[Path]:
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return files + sorted((ROOT / "examples").glob("*.py"))


@pytest.mark.parametrize("path", user_facing_files(), ids=lambda p: p.name)
def test_what_users_are_shown_imports_only_the_public_surface(path: Path) -> None:
    # Given the README, the docs and the examples, when their imports are read, then each names
    # a public module, and a name that module exports: what moves inside the package breaks
    # none of them.
    for module, name, line in imports_in(path):
        assert module in MODULES, f"{path.name}:{line} imports the private module {module}"
        if name is not None and name != "*":
            exported = importlib.import_module(module).__all__
            assert name in exported or f"{module}.{name}" in MODULES, (
                f"{path.name}:{line} imports {name} from {module}, which does not export it"
            )


def test_the_top_s_names_are_typed_where_they_are_loaded_from() -> None:
    # Each public name at the top is imported for type checkers (else a user's checker sees
    # Any through the module's __getattr__) from the module it is loaded from at run time.
    import ledger_bus

    tree = ast.parse((ROOT / "ledger_bus" / "__init__.py").read_text("utf-8"))
    typed: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for imported in node.body:
                assert isinstance(imported, ast.ImportFrom)
                typed |= {alias.name: imported.module or "" for alias in imported.names}
    assert typed == ledger_bus._WHERE
    assert sorted(ledger_bus.__all__) == sorted(ledger_bus._WHERE)


def test_another_language_replays_the_vectors_with_the_public_names_alone() -> None:
    # Given the conformance vectors, when an implementer in another language checks its bytes,
    # digests and event ids against this package, then the package's top names are enough.
    import json

    import ledger_bus

    vectors = json.loads((ROOT / "conformance" / "canonical.json").read_text("utf-8"))["vectors"]
    for vector in vectors:
        assert ledger_bus.append_digest(vector["events"]) == vector["sha256"], vector["name"]
    assert (
        ledger_bus.canonical_bytes({"b": 1, "a": [1.0, "\u00e9"]}) == b'{"a":[1,"\xc3\xa9"],"b":1}'
    )
    # the first scenario's second and third events: stream run-a, appends a1 (index 1), a2 (0)
    assert ledger_bus.derive_event_id("conf-1", "run-a", "a1", 1) == (
        "0a0b1f51-ca79-50c3-b50b-1929cf5a824d"
    )
    assert ledger_bus.derive_event_id("conf-1", "run-a", "a2", 0) == (
        "ad4819aa-a936-5afc-9c17-312bd9a0f148"
    )


def test_the_errors_code_imported_before_the_move_are_at_the_top() -> None:
    # Code written against ledger_bus.errors (moved to the package's inside) finds them here,
    # each a LedgerError.
    import ledger_bus

    for name in ["VersionConflict", "IdempotencyConflict", "InvalidEvent", "BackendUnavailable"]:
        assert issubclass(getattr(ledger_bus, name), ledger_bus.LedgerError)
