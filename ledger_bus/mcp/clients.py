"""How the common MCP clients are told of the server, and where they load skills from:
`ledger-bus mcp config` and `ledger-bus skill --client`.

Each client's own format, as its documentation gives it:

- Claude Code: `.mcp.json` at the project's root, `{"mcpServers": {NAME: {...}}}`; a server
  over stdio is `command`, `args`, `env`; over HTTP `"type": "http"`, `url`, `headers`, in
  which `${VAR}` is read from the environment Claude Code runs in.
- Cursor: `.cursor/mcp.json` (or `~/.cursor/mcp.json`), the same shape; over HTTP `url` and
  `headers`, in which `${env:VAR}` is read from the environment.
- Codex: `~/.codex/config.toml`, a table `[mcp_servers.NAME]`: `command`, `args`, `env`; over
  HTTP `url`, and `bearer_token_env_var` naming the variable that holds the token.

No configuration holds a token: each names the variable it is read from.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

Client = Literal["claude", "cursor", "codex"]
CLIENTS: Final[tuple[Client, ...]] = ("claude", "cursor", "codex")
# Where each client reads its servers from: what a user is told to do with what is printed.
WHERE: Final[dict[Client, str]] = {
    "claude": "save it as .mcp.json at the project's root (or add its server to the one there)",
    "cursor": "save it as .cursor/mcp.json in the project, or ~/.cursor/mcp.json for every"
    " project (or add its server to the one there)",
    "codex": "add it to ~/.codex/config.toml (a project's trusted .codex/config.toml also works)",
}
# Where each client (and Pi) loads skills from: in a project, and for a user's every project.
SKILLS: Final[dict[str, tuple[str, str]]] = {
    "claude": (".claude/skills", "~/.claude/skills"),
    "cursor": (".cursor/skills", "~/.cursor/skills"),
    "codex": (".agents/skills", "~/.agents/skills"),
    "pi": (".pi/skills", "~/.pi/agent/skills"),
}
TOKEN_ENV: Final = "LEDGER_BUS_TOKEN"
_BARE_KEY: Final = re.compile(r"[A-Za-z0-9_-]+")


@dataclass(frozen=True)
class Stdio:
    """A server the client starts: the command and its arguments, and its environment."""

    command: str
    args: list[str]
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Http:
    """A server the client reaches over streamable HTTP, its bearer token in `token_env`."""

    url: str
    token_env: str = TOKEN_ENV


def client_config(client: Client, name: str, server: Stdio | Http) -> str:
    """The configuration `client` reads, telling it of `server` as `name`: the whole file
    (JSON, or for Codex its TOML table), ending with a line break."""
    if client == "codex":
        return _codex(name, server)
    entry: dict[str, object]
    if isinstance(server, Stdio):
        entry = {"command": server.command, "args": server.args, "env": dict(server.env)}
    else:
        # Each client reads the token from its environment, in its own spelling.
        variable = (
            f"${{env:{server.token_env}}}" if client == "cursor" else f"${{{server.token_env}}}"
        )
        entry = {"url": server.url, "headers": {"Authorization": f"Bearer {variable}"}}
        if client == "claude":
            entry = {"type": "http", **entry}
    return json.dumps({"mcpServers": {name: entry}}, indent=2, ensure_ascii=False) + "\n"


def _codex(name: str, server: Stdio | Http) -> str:
    lines = [f"[mcp_servers.{_key(name)}]"]
    if isinstance(server, Stdio):
        lines.append(f"command = {_string(server.command)}")
        lines.append(f"args = [{', '.join(_string(a) for a in server.args)}]")
        if server.env:
            pairs = ", ".join(f"{_key(k)} = {_string(v)}" for k, v in server.env.items())
            lines.append(f"env = {{ {pairs} }}")
    else:
        lines.append(f"url = {_string(server.url)}")
        lines.append(f"bearer_token_env_var = {_string(server.token_env)}")
    return "\n".join(lines) + "\n"


def _string(value: str) -> str:
    """A TOML basic string: JSON's escapes are TOML's, but for a character TOML forbids raw
    (DEL), written as an escape too."""
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")


def _key(value: str) -> str:
    return value if _BARE_KEY.fullmatch(value) else _string(value)


def skills_dir(client: str, user: bool) -> Path:
    """The folder `client` loads skills from: the project's (relative to the current
    directory), or with `user` the one in the user's home, for every project."""
    project, home = SKILLS[client]
    return Path(home).expanduser() if user else Path(project)
