"""A part of ledger-bus whose extra is not installed says which extra to install: one line,
exit 2, on the command line; a ModuleNotFoundError naming it from an adapter's import."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ledger_bus.model.extras import EXTRA_OF
from tests.support.helpers import ROOT

# Run as a program: hide one module (an import of it fails as if it were not installed), then
# run `ledger-bus ARGS`, or import a module when the first argument is "import".
HIDING = """
import sys
sys.modules[sys.argv[1]] = None
if sys.argv[2] == "import":
    import importlib
    importlib.import_module(sys.argv[3])
else:
    sys.argv = ["ledger-bus", *sys.argv[2:]]
    from ledger_bus.cli import main
    main()
"""


def hiding(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", HIDING, module, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("module", "url", "extra"),
    [
        ("sqlalchemy", "sqlite:///{dir}/x.db", "sql"),
        ("psycopg", "postgresql://u@127.0.0.1:9/db", "postgres"),
    ],
)
def test_a_store_whose_extra_is_missing_names_it_in_one_line(
    module: str, url: str, extra: str, tmp_path: Path
) -> None:
    # Given the SQL store's driver not installed, when a command is run on its URL
    done = hiding(module, "--url", url.format(dir=tmp_path), "sessions")
    # Then one line names the extra, and the exit is 2
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1
    assert f"pip install 'ledger-bus[{extra}]'" in done.stderr


def test_a_redis_user_without_the_sql_extra_lists_sessions(redis_url: str) -> None:
    done = hiding("sqlalchemy", "--url", redis_url, "sessions")
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    ("module", "adapter", "extra"),
    [
        ("langgraph", "ledger_bus.adapters.langgraph", "langgraph"),
        ("langchain_core", "ledger_bus.adapters.langgraph", "langgraph"),
        ("agents", "ledger_bus.adapters.openai_agents", "openai-agents"),
        ("google.adk", "ledger_bus.adapters.adk", "adk"),
    ],
)
def test_an_adapter_whose_framework_is_missing_names_its_extra(
    module: str, adapter: str, extra: str
) -> None:
    done = hiding(module, "import", adapter)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ModuleNotFoundError: ")
    assert f"pip install 'ledger-bus[{extra}]'" in last


def test_every_extra_named_is_one_the_package_offers() -> None:
    text = (ROOT / "pyproject.toml").read_text()
    for extra in set(EXTRA_OF.values()):
        assert f"\n{extra} = [" in text, extra
    readme = (ROOT / "README.md").read_text()
    for extra in ("server", "sql", "postgres", "langgraph", "openai-agents", "ui"):
        assert f"[{extra}]" in readme, extra
