"""The Go modules as a user gets them: the SDK (github.com/ledger-bus/ledger-bus/go) and the AgentGo
adapter (github.com/ledger-bus/ledger-bus/go/adapters/agentgo) at this version, fetched with `go
get` through a module proxy by a module of the user's own, outside the repository, that runs
docs/go.md's AgentGo block against a redis-server (tests/project/test_doc_blocks.py runs the page's
other programs, in a module that gets the SDK through the same proxy). The proxy is a directory in
the proxy's layout (go/tools/modproxy) made from the repository's files, where proxy.golang.org
serves a release's tags (go/v0.1.0, go/adapters/agentgo/v0.1.0); AgentGo, which proxy.golang.org
does not serve, is its stand-in (go/standins/agentgo) at the version the adapter pins. Offline:
every other module comes from the module cache `make test` filled from the committed go.sum
files."""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import ledger_bus
from ledger_bus.demo.server import LocalServer
from tests.support.gopeer import need_go
from tests.support.helpers import ROOT, ledger_cli
from tests.support.release import once_a_run

VERSION = f"v{ledger_bus.__version__}"
SDK = "github.com/ledger-bus/ledger-bus/go"
ADAPTER = f"{SDK}/adapters/agentgo"
AGENTGO = "github.com/compforge/agentgo"
GO = ROOT / "go"
ADAPTER_DIR = GO / "adapters" / "agentgo"

# A program of the user's own around docs/go.md's AgentGo block (WIRING): a model and a tool of
# its own, the store from LEDGER_BUS_URL.
AGENTGO_PROGRAM = """package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"

	"github.com/compforge/agentgo"

	ledgerbus "github.com/ledger-bus/ledger-bus/go"
	agentledger "github.com/ledger-bus/ledger-bus/go/adapters/agentgo"
)

type replies struct{}

type (
	msg    = agentgo.Message
	spec   = agentgo.ToolSpec
	opt    = agentgo.CallOption
	answer = *agentgo.LLMResponse
	events = <-chan agentgo.StreamEvent
)

func say(text string) answer {
	return &agentgo.LLMResponse{Message: msg{Role: agentgo.RoleAssistant,
		StopReason: agentgo.StopReasonStop,
		Content:    []agentgo.ContentBlock{agentgo.TextBlock(text)}}}
}

func (replies) Generate(_ context.Context, m []msg, _ []spec, _ ...opt) (answer, error) {
	if len(m) > 1 {
		return say("found 2 results"), nil
	}
	call := agentgo.ToolCall{ID: "call-1", Name: "search", Args: json.RawMessage(`{"q":"jwt"}`)}
	asked := say("")
	asked.Message.StopReason = agentgo.StopReasonToolUse
	asked.Message.Content = []agentgo.ContentBlock{agentgo.ToolCallBlock(call)}
	return asked, nil
}

func (replies) GenerateStream(context.Context, []msg, []spec, ...opt) (events, error) {
	return nil, fmt.Errorf("not streamed")
}

func (replies) SupportsTools() bool { return true }

func search(context.Context, json.RawMessage) (json.RawMessage, error) {
	return json.RawMessage(`["a","b"]`), nil
}

func main() {
	ctx := context.Background()
	st, err := ledgerbus.Connect(ctx, "")
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	model := replies{}
	tools := []agentgo.Tool{agentgo.NewFuncTool("search", "searches the code", nil, search)}
WIRING
	msgs := a.Messages()
	fmt.Println(msgs[len(msgs)-1].TextContent())
}
"""


def documented_programs() -> list[str]:
    """docs/go.md's Go blocks that are whole programs."""
    page = (ROOT / "docs" / "go.md").read_text("utf-8")
    blocks: list[str] = re.findall(r"```go\n(.*?)```", page, re.DOTALL)
    return [b for b in blocks if b.startswith("package main\n")]


def documented_wiring() -> str:
    """docs/go.md's Go block that wires the AgentGo adapter."""
    page = (ROOT / "docs" / "go.md").read_text("utf-8")
    blocks: list[str] = re.findall(r"```go\n(.*?)```", page, re.DOTALL)
    (wiring,) = [b for b in blocks if "agentgo.WithBeforeRun(run.Restore)" in b]
    return wiring


def _go_mod(path: Path) -> str:
    """A go.mod's text without its comments."""
    return re.sub(r"//.*", "", path.read_text("utf-8"))


def requirements(go_mod: Path) -> dict[str, str]:
    """The modules a go.mod requires, with their versions."""
    found: dict[str, str] = {}
    in_block = False
    for line in _go_mod(go_mod).splitlines():
        words = line.split()
        if in_block and words == [")"]:
            in_block = False
        elif in_block and len(words) == 2:
            found[words[0]] = words[1]
        elif words[:1] == ["require"]:
            in_block = words[1:] == ["("]
            if len(words) == 3:
                found[words[1]] = words[2]
    return found


def pinned_agentgo() -> str:
    return requirements(ADAPTER_DIR / "go.mod")[AGENTGO]


def go(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["go", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False, timeout=600
    )


@functools.cache
def module_cache() -> Path:
    return Path(subprocess.check_output(["go", "env", "GOMODCACHE"], text=True).strip())


def outside(proxy: Path, tmp_path: Path) -> dict[str, str]:
    """The environment of a user's go command, outside the repository, that fetches through
    `proxy` into a module cache of its own in `tmp_path`."""
    # -trimpath: without it a package's directory is part of its key in the build cache, and
    # each test's module cache is a directory of its own, so every test (and every run) would
    # compile the SDK and all it imports again; with it, what is compiled is reused whatever the
    # cache's path. It changes only the file paths the binaries record.
    flags = f"{os.environ.get('GOFLAGS', '')} -mod=mod -modcacherw -trimpath".strip()
    return {
        **os.environ,
        # go/go.work is the repository's: a user's module has none (and here none is found
        # above tmp_path either way).
        "GOWORK": "off",
        "GOFLAGS": flags,
        # The modules made here first, then the module cache `make test` filled, read as a
        # proxy of its own: nothing fetched from the network, and a module neither has is a
        # failure. What is fetched goes into a cache of the test's own, so that neither this
        # checkout's modules nor the stand-in (at AgentGo's own version) ever sit in the shared
        # cache, where the next run would find them instead of its own.
        "GOPROXY": f"{proxy.as_uri()},{(module_cache() / 'cache' / 'download').as_uri()}",
        "GOMODCACHE": str(tmp_path / "modcache"),
        "GOPRIVATE": "",
        "GONOPROXY": "",
        # No checksum database: it cannot vouch for modules made from this checkout (the
        # ledger-bus modules are not published, and the stand-in is not AgentGo's own content
        # at the version it stands at, which sum.golang.org would rightly refuse), and it is
        # not reachable offline. The other modules are the cache's, which `go mod download`
        # filled checking each against the committed go.sum files.
        "GOSUMDB": "off",
        "GONOSUMDB": "",
    }


def _copy_of_go(into: Path) -> Path:
    """go/ as a commit of this checkout holds it: its files tracked or new, none that git
    ignores (what a build left there), copied into `into`."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "go"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    for name in listed.stdout.split("\0"):
        if name and (ROOT / name).is_file():
            target = into / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(ROOT / name, target)
    return into / "go"


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A module proxy's directory serving the SDK and the adapter at this version, and the
    AgentGo stand-in at the version the adapter pins: made once a run, for the tests here,
    test_dist.py's and tests/project/test_doc_blocks.py's."""
    need_go()
    return once_a_run(tmp_path_factory, "go-proxy", lambda: _proxy(tmp_path_factory))


def _proxy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("go-proxy")
    source = _copy_of_go(tmp / "checkout")
    tool = tmp / "modproxy"
    # The tools module is no part of go/go.work; its modules are in the cache already.
    env = {**os.environ, "GOWORK": "off", "GOPROXY": "off"}
    built = go("build", "-o", str(tool), "./modproxy", cwd=GO / "tools", env=env)
    assert built.returncode == 0, built.stderr
    served = tmp / "proxy"
    made = subprocess.run(
        [
            str(tool),
            "-o",
            str(served),
            f"{SDK}@{VERSION}={source}",
            f"{ADAPTER}@{VERSION}={source / 'adapters' / 'agentgo'}",
            f"{AGENTGO}@{pinned_agentgo()}={source / 'standins' / 'agentgo'}",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    return served


def _user_module(tmp_path: Path, proxy: Path) -> tuple[Path, dict[str, str]]:
    user = tmp_path / "user"
    user.mkdir()
    env = outside(proxy, tmp_path)
    made = go("mod", "init", "example.com/user", cwd=user, env=env)
    assert made.returncode == 0, made.stderr
    return user, env


def test_a_user_gets_the_agentgo_adapter_of_this_version_with_the_agentgo_it_pins(
    proxy: Path, tmp_path: Path
) -> None:
    user, env = _user_module(tmp_path, proxy)
    for module in (SDK, ADAPTER):
        got = go("get", f"{module}@{VERSION}", cwd=user, env=env)
        assert got.returncode == 0, got.stderr
    listed = go("list", "-m", "all", cwd=user, env=env)
    assert listed.returncode == 0, listed.stderr
    versions = dict(line.split()[:2] for line in listed.stdout.splitlines() if " " in line)
    assert (versions[SDK], versions[ADAPTER], versions[AGENTGO]) == (
        VERSION,
        VERSION,
        pinned_agentgo(),
    )
    # The lines docs/go.md shows, and nothing else of the adapter's, record an AgentGo run.
    (user / "agentgo").mkdir()
    (user / "agentgo" / "main.go").write_text(
        AGENTGO_PROGRAM.replace("WIRING", documented_wiring())
    )
    with LocalServer(appendonly=False) as server:
        ran = go("run", "./agentgo", cwd=user, env={**env, "LEDGER_BUS_URL": server.url})
        assert ran.returncode == 0, ran.stdout + ran.stderr
        assert ran.stdout == "found 2 results\n"
        told = ledger_cli(server.url, "", "--output", "jsonl", "tail", "task-42")
    assert told.returncode == 0, told.stderr
    recorded = [json.loads(line) for line in told.stdout.splitlines()]
    assert [(e["type"], e.get("tool")) for e in recorded if e["type"].startswith("tool_")] == [
        ("tool_call", "model"),
        ("tool_result", "model"),
        ("tool_call", "search"),
        ("tool_result", "search"),
        ("tool_call", "model"),
        ("tool_result", "model"),
    ]


def test_the_adapters_go_mod_is_what_go_mod_tidy_makes_of_it(proxy: Path, tmp_path: Path) -> None:
    # Given the adapter's module outside the workspace, the SDK and AgentGo fetched as a user's
    # build fetches them, when go mod tidy runs, then its requirements (the SDK's own indirect
    # ones among them) are the committed go.mod's, and go.sum gains only the lines of the two
    # modules served from this checkout: their sums are a release's (make go-tidy mends both).
    module = tmp_path / "agentgo"
    shutil.copytree(ADAPTER_DIR, module)
    tidied = go("mod", "tidy", cwd=module, env=outside(proxy, tmp_path))
    assert tidied.returncode == 0, tidied.stderr
    assert (module / "go.mod").read_text("utf-8") == (ADAPTER_DIR / "go.mod").read_text("utf-8")
    sums = (module / "go.sum").read_text("utf-8").splitlines()
    assert [line for line in sums if line.split()[0] not in (SDK, AGENTGO)] == (
        ADAPTER_DIR / "go.sum"
    ).read_text("utf-8").splitlines()


def _go_mods() -> list[Path]:
    """Every go.mod under go/ but test data's (which Go never builds as a module of ours)."""
    return [p for p in GO.rglob("go.mod") if "testdata" not in p.relative_to(GO).parts]


def test_no_go_mod_replaces_a_module() -> None:
    # A replace directive holds only in the module it is written in, never in a user's build:
    # the modules must resolve as released. go/go.work, which no user reads, does the rest.
    found = _go_mods()
    assert ADAPTER_DIR / "go.mod" in found
    assert [p for p in found if re.search(r"^\s*replace\b", _go_mod(p), re.MULTILINE)] == []


def test_the_adapter_requires_the_sdk_of_this_version_and_the_workspace_serves_both() -> None:
    required = requirements(ADAPTER_DIR / "go.mod")
    assert required[SDK] == VERSION == f"v{ledger_bus.__version__}"
    # go/go.work stands the repository's directories for exactly the versions the adapter
    # requires of the SDK and of AgentGo.
    work = _go_mod(GO / "go.work")
    served = re.findall(r"^\s*(?:replace\s+)?(\S+)\s+(\S+)\s+=>\s+(\S+)", work, re.MULTILINE)
    assert sorted(served) == [
        (AGENTGO, required[AGENTGO], "./standins/agentgo"),
        (SDK, VERSION, "./"),
    ]
