"""Harbor's own ATIF validator (`harbor.utils.trajectory_validator`), run in the venv `make
test` builds for it inside the venv running the tests (.venv/harbor: Harbor needs Python 3.12 or
newer)."""

from __future__ import annotations

import glob
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

# Inside the venv the tests run in (.venv, or `make test-latest`'s .venv-latest), as make puts it.
HARBOR_PYTHON = Path(sys.prefix) / "harbor" / "bin" / "python"
# Validates each file named, printing one JSON line: file -> its errors (none: valid).
CHECK = """
import json, sys
from harbor.utils.trajectory_validator import TrajectoryValidator
found = {}
for path in sys.argv[1:]:
    validator = TrajectoryValidator()
    validator.validate(path, validate_images=False)
    found[path] = validator.errors
print(json.dumps(found))
"""


def harbor_python() -> Path:
    if HARBOR_PYTHON.exists():
        return HARBOR_PYTHON
    if glob.glob(str(Path.home() / ".pyenv/versions/3.1[2-9]*/bin/python3.1[2-9]")) or any(
        shutil.which(p) for p in ("python3.12", "python3.13")
    ):
        pytest.fail(f"Harbor's validator is not at {HARBOR_PYTHON}: `make test` builds it")
    pytest.skip("NO PYTHON 3.12 OR NEWER HERE: Harbor's ATIF validator cannot run")


def harbor_errors(documents: dict[str, Any], folder: Path) -> dict[str, list[str]]:
    """Each document written to `folder` and checked by Harbor: name -> its errors."""
    paths = {}
    for name, document in documents.items():
        path = folder / f"{name}.json"
        path.write_text(json.dumps(document, ensure_ascii=False))
        paths[str(path)] = name
    done = subprocess.run(
        [str(harbor_python()), "-c", CHECK, *paths],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return {paths[p]: errors for p, errors in json.loads(done.stdout).items()}
