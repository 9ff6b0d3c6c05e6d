"""The npm package as a user gets it: the tarball a release publishes (`make dist`'s, when there;
else packed here from a copy of typescript/), installed into a fresh project made by
`npm init -y` outside the repository."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from tests.support.helpers import ROOT
from tests.support.node import TYPESCRIPT, node_ready

VERSION = json.loads((TYPESCRIPT / "package.json").read_text("utf-8"))["version"]
DIST_TARBALL = ROOT / "dist" / f"ledger-bus-{VERSION}.tgz"


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


def tarball(into: Path) -> Path:
    """`make dist`'s tarball when it made one; else the package built from a copy of
    typescript/ (its node_modules linked, the Lua scripts beside it as in the checkout), packed
    with no scripts run, so that nothing is written into the checkout."""
    if DIST_TARBALL.is_file():
        return DIST_TARBALL
    why = node_ready()
    assert why is None, f"the npm package cannot be built here: {why}"
    source = into / "source"
    (source / "ledger_bus" / "store").mkdir(parents=True)
    shutil.copytree(ROOT / "ledger_bus" / "store" / "lua", source / "ledger_bus/store/lua")
    package = source / "typescript"
    package.mkdir()
    for name in ("package.json", "tsconfig.json", "tsconfig.build.json", "README.md"):
        shutil.copyfile(TYPESCRIPT / name, package / name)
    for name in ("src", "scripts"):
        shutil.copytree(TYPESCRIPT / name, package / name)
    (package / "node_modules").symlink_to(TYPESCRIPT / "node_modules")
    npm("run", "build", cwd=package)
    out = into / "packed"
    out.mkdir()
    npm("pack", "--ignore-scripts", "--pack-destination", out, cwd=package)
    (packed,) = out.glob("ledger-bus-*.tgz")
    return packed


def project(where: Path, package: Path) -> Path:
    """A fresh npm project at `where` (`npm init -y`) with the tarball `package` installed."""
    where.mkdir(parents=True)
    npm("init", "-y", cwd=where)
    npm("install", package, cwd=where)
    return where
