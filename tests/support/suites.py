"""A framework's own test suite run in a pytest of its own, and what became of each test: the
Agents SDK's and Google ADK's session tests, pointed at the ledger."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def run_suite(
    cwd: Path, args: list[str], env: dict[str, str], home: Path
) -> tuple[dict[str, str], str]:
    """`pytest -q ARGS` in `cwd`, with `env` (beside a bare PATH and HOME=`home`): each test's
    outcome by name ("passed", "failed" or "skipped", from its JUnit report), and its output."""
    report = home / "report.xml"
    bare = {"PATH": "/usr/bin:/bin", "HOME": str(home), "PYTEST_ADDOPTS": f"--junitxml={report}"}
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**bare, **env},
    )
    outcome = {
        case.get("name", ""): (
            "failed"
            if case.find("failure") is not None or case.find("error") is not None
            else "skipped"
            if case.find("skipped") is not None
            else "passed"
        )
        for case in ET.parse(report).getroot().iter("testcase")
    }
    return outcome, ran.stdout
