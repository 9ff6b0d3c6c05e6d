"""MCP set up in one line: `ledger-bus mcp config` prints what each client reads, naming this
command by its absolute path, so that a client whose PATH lacks the venv starts it; and
`ledger-bus skill --install DIR` / `--client NAME` writes the skill where a client loads it."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

import ledger_bus as lb
from tests.support.events import msg
from tests.support.helpers import ledger_here

# What a client started from a desktop or an IDE has on its PATH: no venv.
BARE_PATH = "/usr/bin:/bin"
CONSOLE_SCRIPT = Path(sys.executable).parent / "ledger-bus"


def printed(command: list[str], url: str, prefix: str, cwd: Path | None = None) -> str:
    """What `command` (a way to run ledger-bus) prints for `mcp config ...`, run with PATH bare."""
    env = {**os.environ, "PATH": BARE_PATH, "LEDGER_BUS_URL": url, "LEDGER_BUS_PREFIX": prefix}
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=cwd, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


async def _tail_through(server: dict[str, Any], session: str) -> list[str]:
    """Start the server as the client would, from what its configuration says, and tail."""
    params = StdioServerParameters(
        command=server["command"],
        args=server["args"],
        env={**server["env"], "PATH": BARE_PATH},
        cwd="/",
    )
    async with Client(params) as client:
        found = await client.call_tool("tail", {"session": session})
        assert not found.is_error, found.content
        assert found.structured_content is not None
        return [e["body"] for e in found.structured_content["events"]]


@pytest.fixture
def written(redis_url: str, prefix: str) -> str:
    with lb.connect(redis_url, prefix=prefix) as store:
        store.append(lb.StreamId("task-1", "main"), 0, "a", [msg("for the client")])
    return redis_url


def test_the_console_script_is_named_by_its_path_and_a_client_without_the_venv_starts_it(
    written: str, prefix: str
) -> None:
    if not CONSOLE_SCRIPT.exists():
        pytest.skip(f"no console script at {CONSOLE_SCRIPT} (the package is not installed)")
    # Given the command as a venv installs it, run by its path
    out = printed([str(CONSOLE_SCRIPT), "mcp", "config", "--client", "claude"], written, prefix)
    # Then Claude Code's .mcp.json names it by that path, with the store's URL
    (name, server), *_ = json.loads(out)["mcpServers"].items()
    assert name == "ledger"
    assert server["command"] == str(CONSOLE_SCRIPT)
    assert server["args"] == ["mcp", "--agent", "claude"]
    assert server["env"] == {"LEDGER_BUS_URL": written, "LEDGER_BUS_PREFIX": prefix}
    # And a client whose PATH lacks the venv starts it, elsewhere, and reads the ledger
    assert asyncio.run(_tail_through(server, "task-1")) == ["for the client"]


def test_run_as_a_module_it_is_named_by_its_python(written: str, prefix: str) -> None:
    command = [sys.executable, "-m", "ledger_bus", "mcp", "config", "--client", "codex"]
    out = printed([*command, "--agent", "cx", "--role", "reader"], written, prefix)
    server = tomllib.loads(out)["mcp_servers"]["ledger"]
    assert server == {
        "command": os.path.abspath(sys.executable),
        "args": ["-m", "ledger_bus", "mcp", "--agent", "cx", "--role", "reader"],
        "env": {"LEDGER_BUS_URL": written, "LEDGER_BUS_PREFIX": prefix},
    }
    assert asyncio.run(_tail_through(server, "task-1")) == ["for the client"]


def test_cursors_configuration_and_a_relative_sqlite_path_made_absolute(tmp_path: Path) -> None:
    relative = ["--url", "sqlite:///data/ledger.db"]
    asked = ["--client", "cursor", "--sessions", "team-a-*", "--name", "lb"]
    command = [sys.executable, "-m", "ledger_bus", *relative, "mcp", "config", *asked]
    out = printed(command, "redis://unused", "lb", cwd=tmp_path)
    server = json.loads(out)["mcpServers"]["lb"]
    assert server["args"][-4:] == ["--agent", "cursor", "--sessions", "team-a-*"]
    assert server["env"] == {"LEDGER_BUS_URL": f"sqlite:///{tmp_path}/data/ledger.db"}


@pytest.mark.parametrize(
    ("client", "expected"),
    [
        (
            "claude",
            {
                "type": "http",
                "url": "http://ledger-host:8787/mcp",
                "headers": {"Authorization": "Bearer ${LEDGER_BUS_TOKEN}"},
            },
        ),
        (
            "cursor",
            {
                "url": "http://ledger-host:8787/mcp",
                "headers": {"Authorization": "Bearer ${env:LEDGER_BUS_TOKEN}"},
            },
        ),
    ],
)
def test_over_http_the_client_reads_its_token_from_its_environment(
    client: str, expected: dict[str, Any]
) -> None:
    done = ledger_here(
        "redis://unused", "lb", "mcp", "config", "--client", client,
        "--http", "http://ledger-host:8787/mcp",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"mcpServers": {"ledger": expected}}
    assert "LEDGER_BUS_TOKEN" in done.stderr
    assert "ledger-bus token" in done.stderr


def test_codex_over_http_names_the_tokens_variable() -> None:
    done = ledger_here(
        "redis://unused", "lb", "mcp", "config", "--client", "codex",
        "--http", "https://ledger.example/mcp", "--token-env", "TEAM_A_TOKEN",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert tomllib.loads(done.stdout) == {
        "mcp_servers": {
            "ledger": {"url": "https://ledger.example/mcp", "bearer_token_env_var": "TEAM_A_TOKEN"}
        }
    }


@pytest.mark.parametrize(
    "args",
    [
        ["--client", "vim"],
        ["--client", "claude", "--http", "ledger-host:8787"],
        ["--client", "claude", "--http", "http://h/mcp", "--agent", "a"],
        ["--client", "codex", "--http", "http://h/mcp", "--token-env", "A B"],
        ["--client", "claude", "--agent", "has space"],
    ],
)
def test_what_cannot_be_configured_is_bad_usage(args: list[str]) -> None:
    done = ledger_here("redis://unused", "lb", "mcp", "config", *args)
    assert (done.returncode, done.stdout, done.stderr.count("\n")) == (2, "", 1), done.stderr


def test_a_memory_store_is_refused_and_the_servers_options_stay_the_servers() -> None:
    memory = ledger_here("memory://", "lb", "mcp", "config", "--client", "claude")
    assert memory.returncode == 2
    assert "memory://" in memory.stderr
    mixed = ledger_here(
        "redis://unused", "lb", "mcp", "--agent", "a", "config", "--client", "claude"
    )
    assert mixed.returncode == 2
    assert "--agent is the server's" in mixed.stderr


def test_the_skill_is_installed_in_a_folder_made_for_it(tmp_path: Path) -> None:
    printed_skill = ledger_here("redis://unused", "lb", "skill").stdout
    # Given a folder that does not exist yet
    target = tmp_path / "not" / "yet"
    # When the skill is installed there, twice (a rerun changes nothing)
    for _ in range(2):
        done = ledger_here("redis://unused", "lb", "skill", "--install", str(target))
        assert done.returncode == 0, done.stderr
    # Then it is DIR/ledger-bus/SKILL.md, what `skill` prints
    assert (target / "ledger-bus" / "SKILL.md").read_text() == printed_skill
    assert str(target / "ledger-bus" / "SKILL.md") in done.stderr


@pytest.mark.parametrize(
    ("client", "where"),
    [
        ("claude", ".claude/skills"),
        ("cursor", ".cursor/skills"),
        ("codex", ".agents/skills"),
        ("pi", ".pi/skills"),
    ],
)
def test_the_skill_is_installed_where_each_client_loads_a_projects_skills(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, client: str, where: str
) -> None:
    monkeypatch.chdir(tmp_path)
    done = ledger_here("redis://unused", "lb", "skill", "--client", client)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / where / "ledger-bus" / "SKILL.md").read_text().startswith("---\nname:")


def test_the_users_own_skills_folder_is_in_the_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    done = ledger_here("redis://unused", "lb", "skill", "--client", "pi", "--user")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / ".pi" / "agent" / "skills" / "ledger-bus" / "SKILL.md").exists()
    both = ledger_here("redis://unused", "lb", "skill", "--install", "x", "--client", "pi")
    assert both.returncode == 2
