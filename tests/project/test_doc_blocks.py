"""Every code block of README.md and docs/*.md runs as written, as its reader runs it: outside
the repository, from a folder of the page's own (PYTHONPATH empty, nothing of the checkout on
PATH), with only what the page says to install.

- Python blocks run in a fresh venv of the release's wheel (`make dist` in a fresh clone of the
  checkout, once a run: tests/support/release.py) with the extras the block's
  `<!-- run: ledger-bus[EXTRA] -->` names, none without; a venv per set of extras, made once a
  run (shared with tests/packaging/test_dist.py and test_wheel.py where the extras agree). A
  page's consecutive Python blocks that say the same are one program (tests/support/doc_blocks.py
  has the rules); `<!-- run: ... pytest -->` runs a block with pytest.
- Shell blocks run with `bash -e -o pipefail`, the venv's `ledger-bus` first on PATH.
- JavaScript and TypeScript blocks run with node in a fresh npm project (`npm init -y`) with the
  release's npm tarball installed, saved as the file their first line names (`// app.mjs`),
  else as `index.js`, what `npm init -y` makes the entry point.
- Go blocks that are whole programs build and run in a module of their own outside the
  repository, the SDK fetched through tests/packaging/test_go_module.py's module proxy; a Go
  block that is a part of a file (a test, the AgentGo adapter's Example) says which in
  `<!-- excerpt of PATH -->`, and is held to it.
- JSON and TOML blocks are parsed.

Each page gets a redis-server the test starts, named by LEDGER_BUS_URL; a literal
`redis://127.0.0.1:6379` in a block is rewritten to it. Each page's programs run in order, then
all of them again (a page is re-runnable), each within a time limit (it ends on its own). A
block that cannot run says why in `<!-- not run: REASON -->` right before it; the inventory test
lists those, and fails on a block that neither runs nor says why.
"""

from __future__ import annotations

import functools
import json
import shutil
import tomllib
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.packaging.test_go_module import (
    SDK,
    VERSION,
    go,
    outside,
    proxy,  # noqa: F401  (the fixture, the module proxy)
)
from tests.support import npm
from tests.support.doc_blocks import Block, Unit, blocks_of, is_excerpt, kind_of, pages
from tests.support.doc_runs import PageResult, PageRunner, Ran
from tests.support.helpers import ROOT
from tests.support.release import Once, release_of

# Blocks another test runs, and which (by page and kind): none now; docs/go.md's AgentGo block
# is an excerpt of the adapter's Example, and tests/packaging/test_go_module.py runs it as written.
ELSEWHERE: dict[tuple[str, str], str] = {}

# What a program must have done besides ending well: code run after it in its namespace
# (Python), by the page and a line the program holds.
AFTERWARDS = {
    ("README.md", "store = ledger_bus.connect("): (
        "assert result.last_version == 1 and retry.deduplicated\n"
        "assert hits == ['the jwt rotation policy'] and 'search' in prompt\n"
    ),
    ("docs/adapters.md", "graph = builder.compile("): (
        "assert graph.get_state(config).values['messages'][-1].content == 'done'\n"
        "tools = saver.store.read_stream(ledger_bus.StreamId('order-7', 'lg.tools'))\n"
        "assert [e.type for e in tools][-2:] == ['tool_call', 'tool_result']\n"
        "assert CAPABILITIES.to_dict()['recovery'] == 'strict'\n"
    ),
    ("docs/adapters.md", "LedgerSession("): (
        "assert CAPABILITIES.to_dict()['recovery'] == 'best_effort'\n"
    ),
}
# ... and what it must have printed.
PRINTED = {
    ("README.md", "store = ledger_bus.connect("): "expected version 0, actual 1",
    ("README.md", "from ledger_bus.testing.contract import"): " passed",
    ("README.md", 'from "ledger-bus"'): "1\n",
    ("README.md", "ledgerbus.Connect("): "1\n",
    (
        "docs/go.md",
        "ledgerbus.WithPrefix(",
    ): "VersionConflict\n1 in the stream, 1 in the tail, 0 since\n1 tool_call ",
    ("docs/go.md", "store.WithFence(fence)"): "error: <nil>\nrefused: LeaseLost",
    ("docs/go.md", "agent.NewRecorder("): "[the jwt rotation policy]\n",
    ("docs/adapters.md", "LedgerSessionService("): "refunded",
    ("docs/adapters.md", "LedgerSession("): "refunded",
}


def elsewhere(block: Block) -> str | None:
    return ELSEWHERE.get((block.page, kind_of(block) or ""))


def _wanted(table: dict[tuple[str, str], str], unit: Unit) -> str:
    source = "".join(b.source for b in unit.blocks)
    return "".join(
        v for (page, text), v in table.items() if unit.first.page == page and text in source
    )


class Checks:
    """AFTERWARDS and PRINTED, for the runner."""

    def afterwards(self, unit: Unit) -> str:
        return _wanted(AFTERWARDS, unit)

    def check(self, unit: Unit, ran: Ran) -> str | None:
        wanted = _wanted(PRINTED, unit)
        if wanted and wanted not in ran.stdout:
            return f"printed {ran.stdout[-400:]!r}, not {wanted!r}"
        return None


# The pages whose programs the test runs, and the inventory of every block.
PAGES = pages()


def test_every_block_runs_or_says_why(capsys: pytest.CaptureFixture[str]) -> None:
    listed: dict[str, list[str]] = {"not run": [], "run elsewhere": [], "checked": []}
    unexplained: list[str] = []
    for page in PAGES:
        for block in blocks_of(page):
            kind = kind_of(block)
            if block.not_run:
                listed["not run"].append(
                    f"{block.label} ({block.lang or 'no language'}): {block.not_run}"
                )
            elif block.excerpt_of:
                assert is_excerpt(block, block.excerpt_of), (
                    f"{block.label} is not in {block.excerpt_of}"
                )
                where = block.excerpt_of.relative_to(ROOT)
                listed["checked"].append(f"{block.label}: an excerpt of {where}")
            elif elsewhere(block):
                listed["run elsewhere"].append(f"{block.label}: {elsewhere(block)}")
            elif kind == "data":
                _parse(block)
                listed["checked"].append(f"{block.label}: {block.lang}, parsed")
            elif kind is None:
                unexplained.append(f"{block.label} ({block.lang or 'no language'})")
    with capsys.disabled():
        for what, lines in listed.items():
            print(f"\n{what}:", *lines, sep="\n  ")
    assert unexplained == [], f"neither run nor say why (<!-- not run: REASON -->): {unexplained}"


def _parse(block: Block) -> None:
    try:
        json.loads(block.source) if block.lang == "json" else tomllib.loads(block.source)
    except ValueError as e:
        raise AssertionError(f"{block.label}: {e}") from e


class GoModule:
    """A module of the user's own, outside the repository, the SDK got into it through the
    module proxy `proxy_dir` (into a module cache of its own); each Go block a program in a
    folder of it."""

    def __init__(self, proxy_dir: Path, where: Path):
        self.where = where
        self.env = outside(proxy_dir, where.parent)
        self._once: Once[Path] = Once()

    def ready(self) -> Path:
        """The module, made the first time (its packages built once, to be ready sooner)."""
        return self._once.get("module", self._make)

    def _make(self) -> Path:
        self.where.mkdir(parents=True)
        for args in (("mod", "init", "example.com/user"), ("get", f"{SDK}@{VERSION}")):
            done = go(*args, cwd=self.where, env=self.env)
            assert done.returncode == 0, done.stderr
        built = go("build", f"{SDK}/...", cwd=self.where, env=self.env)
        assert built.returncode == 0, built.stderr
        return self.where

    def __call__(self, name: str, source: str, env: dict[str, str]) -> Ran:
        folder = self.ready() / name
        folder.mkdir(exist_ok=True)
        (folder / "main.go").write_text(source)
        module_env = {**self.env, "LEDGER_BUS_URL": env["LEDGER_BUS_URL"]}
        done = go("run", f"./{name}", cwd=self.where, env=module_env)
        return Ran(done.returncode, done.stdout, done.stderr)


@pytest.fixture(scope="module")
def page_runs(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Future[PageResult]]]:
    """The pages the run selected, each run in a thread of a small pool (their programs wait on
    processes far more than they compute), what they need made meanwhile in others."""
    made = release_of(tmp_path_factory)
    selected = [
        item.callspec.params["page"]
        for item in request.session.items
        if getattr(item, "originalname", "") == "test_the_page_runs_as_written"
        and hasattr(item, "callspec")
    ]
    root = tmp_path_factory.mktemp("doc-blocks")
    once: Once[Path] = Once()

    def node_project() -> Path:
        return once.get("npm", lambda: npm.project(root / "npm" / "project", made.npm_tarball()))

    runner = PageRunner(root / "homes", made.venv, node_project, None, Checks(), elsewhere)
    units = [unit for page in selected for unit in runner.units(page)]
    needed: list[Callable[[], Path]] = [
        functools.partial(made.venv, extras)
        for extras in sorted({u.extras for u in units if u.kind in ("python", "pytest", "shell")})
    ]
    if any(u.kind == "node" for u in units):
        needed.insert(0, node_project)
    if shutil.which("go") and any(u.kind == "go" for u in units):
        runner.go = GoModule(request.getfixturevalue("proxy"), root / "go" / "user")
        needed.insert(0, runner.go.ready)
    # Made ahead, in the order the slowest first; a page that needs one meanwhile waits for it.
    with ThreadPoolExecutor(max_workers=2) as making, ThreadPoolExecutor(max_workers=3) as pool:
        for make in needed:
            making.submit(make)
        yield {page: pool.submit(runner.run_page, page) for page in selected}


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("page", PAGES)
def test_the_page_runs_as_written(page: str, page_runs: dict[str, Future[PageResult]]) -> None:
    result = page_runs[page].result()
    timings = ", ".join(f"{o.unit.label} run {o.run}: {o.seconds:.1f}s" for o in result.outcomes)
    print(f"{page}: {timings}")
    if result.failures:
        pytest.fail("\n".join(result.failures), pytrace=False)
