"""The README's Python blocks run as written (against a memory store, not a Redis on 6379)."""

from __future__ import annotations

import contextlib
import io
import re
from typing import Any

from tests.support.helpers import ROOT

README = ROOT / "README.md"


def test_the_readme_python_blocks_run_as_written() -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text("utf-8"), re.DOTALL)
    assert len(blocks) == 3
    source = "\n".join(blocks)
    assert 'ledger_bus.connect("redis://127.0.0.1:6379/0")' in source
    source = source.replace('"redis://127.0.0.1:6379/0"', '"memory://"', 1)
    namespace: dict[str, Any] = {"__name__": "readme"}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(source, str(README), "exec"), namespace)
    assert namespace["result"].last_version == 1
    assert namespace["retry"].deduplicated
    assert "expected version 0, actual 1" in printed.getvalue()
    assert namespace["hits"] == ["the jwt rotation policy"]
    assert "search" in namespace["prompt"]
