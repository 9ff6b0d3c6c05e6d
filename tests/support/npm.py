"""npm as a user runs it, and a fresh project made by `npm init -y` outside the repository with
the npm package installed: the release's tarball (tests/support/release.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def npm_env() -> dict[str, str]:
    """A user's environment for npm and node: not that of a script of this package."""
    return {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("npm_package_", "npm_lifecycle_", "npm_config_local_prefix"))
        and name != "INIT_CWD"
    }


def npm(*args: str | Path, cwd: Path, timeout: float = 300) -> str:
    done = subprocess.run(
        ["npm", *(str(a) for a in args), "--no-audit", "--no-fund", "--prefer-offline"],
        cwd=cwd,
        env=npm_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, f"npm {args}: {done.stderr}{done.stdout}"
    return done.stdout


def project(where: Path, package: Path) -> Path:
    """A fresh npm project at `where` (`npm init -y`) with the tarball `package` installed."""
    where.mkdir(parents=True)
    npm("init", "-y", cwd=where)
    npm("install", package, cwd=where)
    return where
