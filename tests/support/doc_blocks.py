"""The fenced code blocks of the README and docs/*.md, what each says about how it runs (the HTML
comment right before it), and the programs they make: what tests/project/test_doc_blocks.py runs.

A comment right before a block (its last line before the fence, blank lines between allowed)
says how it runs:

- `<!-- not run: REASON -->`: the block is not run, and why (a registry install before a
  release, a server of the user's, an output listing, a command that runs until stopped);
- `<!-- run: ledger-bus[EXTRA,...] -->`: a Python block runs in a venv of the wheel with those
  extras (none without); a shell block with that venv's commands first on its PATH;
- `<!-- run: ledger-bus[testing] pytest -->`: a Python block that is a test module, run by
  pytest;
- `<!-- excerpt of PATH -->`: the block is lines of the file PATH of the repository, in order
  (PATH is the program that runs).

The consecutive Python blocks of a page that run with the same words are one program, run in
order in one interpreter (a page's later block uses what an earlier one made); every other
block is a program of its own. JSON and TOML blocks are parsed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.helpers import ROOT

PYTHON = frozenset({"python", "py"})
SHELL = frozenset({"sh", "bash", "shell"})
NODE = frozenset({"js", "javascript", "mjs", "ts", "typescript"})
GO = frozenset({"go"})
DATA = frozenset({"json", "toml"})

_FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[\w+-]*)[ \t]*$")
_EXTRAS = re.compile(r"^ledger-bus(?:\[(?P<extras>[\w,-]*)\])?$")


@dataclass(frozen=True)
class Block:
    """One fenced block: its page (relative to the repository), the line of its opening fence,
    its language (as the fence names it, lowercased), its text (indentation removed) and the
    comment right before it (None without one)."""

    page: str
    line: int
    lang: str
    source: str
    comment: str | None

    @property
    def label(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def not_run(self) -> str | None:
        """Why the block is not run, when its comment says so."""
        found = re.fullmatch(r"not run:\s*(.*)", self.comment or "", re.DOTALL)
        return " ".join(found.group(1).split()) if found else None

    @property
    def excerpt_of(self) -> Path | None:
        found = re.fullmatch(r"excerpt of\s+(\S+)", self.comment or "")
        return ROOT / found.group(1) if found else None

    @property
    def run_words(self) -> tuple[str, ...]:
        found = re.fullmatch(r"run:\s*(.*)", self.comment or "", re.DOTALL)
        return tuple(found.group(1).split()) if found else ()

    @property
    def extras(self) -> tuple[str, ...]:
        """The extras of the wheel it runs with, sorted."""
        for word in self.run_words:
            found = _EXTRAS.match(word)
            if found:
                return tuple(sorted(e for e in (found.group("extras") or "").split(",") if e))
        return ()

    @property
    def pytest(self) -> bool:
        return "pytest" in self.run_words


@dataclass
class Unit:
    """What runs as one program: one block, or consecutive Python blocks of a page."""

    kind: str  # python, pytest, shell, node, go
    blocks: list[Block] = field(default_factory=list)

    @property
    def first(self) -> Block:
        return self.blocks[0]

    @property
    def extras(self) -> tuple[str, ...]:
        return self.first.extras

    @property
    def label(self) -> str:
        return " + ".join(b.label for b in self.blocks)


def pages() -> list[str]:
    """README.md and every docs/*.md, relative to the repository."""
    found = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return [str(p.relative_to(ROOT)) for p in found]


def blocks_of(page: str) -> list[Block]:
    """The fenced blocks of `page`, in order."""
    lines = (ROOT / page).read_text("utf-8").splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent = opening.group("indent")
        end = i + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        body = [line.removeprefix(indent) for line in lines[i + 1 : end]]
        source = "\n".join(body) + "\n"
        found.append(
            Block(page, i + 1, opening.group("lang").lower(), source, _comment_before(lines, i))
        )
        i = end + 1
    return found


def _comment_before(lines: list[str], fence: int) -> str | None:
    """The HTML comment that ends on the last non-blank line before line `fence`."""
    j = fence - 1
    while j >= 0 and not lines[j].strip():
        j -= 1
    if j < 0 or not lines[j].rstrip().endswith("-->"):
        return None
    start = j
    while start >= 0 and "<!--" not in lines[start]:
        start -= 1
    if start < 0:
        return None
    text = " ".join(line.strip() for line in lines[start : j + 1])
    found = re.search(r"<!--(.*)-->", text, re.DOTALL)
    return " ".join(found.group(1).split()) if found else None


def kind_of(block: Block) -> str | None:
    """How a block runs (python, pytest, shell, node, go, data), or None for a language the
    test does not run."""
    if block.lang in PYTHON:
        return "pytest" if block.pytest else "python"
    kinds = {"shell": SHELL, "node": NODE, "go": GO, "data": DATA}
    return next((kind for kind, langs in kinds.items() if block.lang in langs), None)


def units_of(blocks: list[Block]) -> list[Unit]:
    """The programs `blocks` (one page's, to run) make, in the order of their first blocks."""
    units: list[Unit] = []
    last_python: Unit | None = None
    for block in blocks:
        kind = kind_of(block)
        if kind is None or kind == "data":
            continue
        if (
            kind == "python"
            and last_python is not None
            and last_python.first.run_words == block.run_words
        ):
            last_python.blocks.append(block)
            continue
        unit = Unit(kind, [block])
        units.append(unit)
        if kind in ("python", "pytest"):
            last_python = unit if kind == "python" else None
    return units


def is_excerpt(block: Block, of: Path) -> bool:
    """Whether the block's lines are lines of `of`, in order (indentation and trailing comments
    aside)."""

    def bare(line: str) -> str:
        return re.sub(r"\s+#.*$", "", line).strip()

    wanted = [bare(line) for line in block.source.splitlines() if bare(line)]
    have = iter(bare(line) for line in of.read_text("utf-8").splitlines())
    return all(any(line == got for got in have) for line in wanted)
