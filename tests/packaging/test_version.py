"""The version is said once, in ledger_bus.__version__; everything that names it agrees."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from importlib.metadata import version

import ledger_bus
from tests.support.helpers import ROOT


def released_versions() -> list[str]:
    """The versions the CHANGELOG names in its headings, newest first (not [Unreleased])."""
    text = (ROOT / "CHANGELOG.md").read_text("utf-8")
    return re.findall(r"^## \[(\d+\.\d+\.\d+[^\]]*)\]", text, flags=re.MULTILINE)


def test_the_installed_package_says_the_version_of_the_code() -> None:
    # Given the version in the code, when the installed distribution is asked, then they agree
    # (pyproject.toml takes it from the code, not a copy of its own).
    assert version("ledger-bus") == ledger_bus.__version__
    assert 'dynamic = ["version"]' in (ROOT / "pyproject.toml").read_text("utf-8")


def test_the_command_says_the_version_of_the_code() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ledger_bus", "--version"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert done.stdout.split()[-1] == ledger_bus.__version__


def test_the_npm_package_says_the_same_version() -> None:
    package = json.loads((ROOT / "typescript" / "package.json").read_text("utf-8"))
    lock = json.loads((ROOT / "typescript" / "package-lock.json").read_text("utf-8"))
    assert package["version"] == ledger_bus.__version__
    assert lock["version"] == lock["packages"][""]["version"] == ledger_bus.__version__


def test_the_changelog_names_the_version_as_its_newest_release() -> None:
    released = released_versions()
    assert released, "the CHANGELOG names no released version"
    assert released[0] == ledger_bus.__version__
