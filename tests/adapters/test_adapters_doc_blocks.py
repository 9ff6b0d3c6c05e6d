"""docs/adapters.md's Python blocks run as written (on memory:// instead of the Redis URL)."""

from __future__ import annotations

import contextlib
import io
import re
from typing import Any

import pytest

from tests.support.helpers import ROOT

pytest.importorskip("langgraph")
pytest.importorskip("agents")
pytest.importorskip("google.adk")

DOC = ROOT / "docs" / "adapters.md"


def blocks() -> list[str]:
    found = re.findall(r"```python\n(.*?)```", DOC.read_text("utf-8"), re.DOTALL)
    return [b.replace('"redis://127.0.0.1:6379/0"', '"memory://"') for b in found]


def run(source: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": "doc"}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(source, str(DOC), "exec"), namespace)
    return namespace


def test_the_adapter_docs_python_blocks_run_as_written() -> None:
    asyncio_block, graph, lg_caps, agents_block, oa_caps, adk_block = blocks()

    found = run(asyncio_block)
    assert "main" in found

    found = run(graph)
    config = found["config"]
    state = found["graph"].get_state(config)
    assert state.values["messages"][-1].content == "done"
    store = found["saver"].store
    tools = store.read_stream(found["ledger_bus"].StreamId("order-7", "lg.tools"))
    assert [e.type for e in tools] == ["tool_call", "tool_result"]

    assert run(lg_caps)["CAPABILITIES"].to_dict()["recovery"] == "strict"
    assert run(agents_block)["main"] is not None
    assert run(oa_caps)["CAPABILITIES"].to_dict()["recovery"] == "best_effort"
    assert run(adk_block)["main"] is not None
