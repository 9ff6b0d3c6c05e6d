"""On loopback both HTTP faces answer only requests for a local host, from no other site's page:
a web page the operator visits cannot read the ledger by DNS rebinding (its requests name the
attacker's host) or from its own origin. One check, shared by the web view and the MCP server."""

from __future__ import annotations

from pathlib import Path

import httpx
from starlette.testclient import TestClient

import ledger_bus as lb
from ledger_bus.access.identity import Identity
from ledger_bus.access.tokens import TokenFile, add_token
from ledger_bus.demo.server import free_port
from ledger_bus.store.base import EventStore
from tests.support.events import msg
from tests.support.helpers import ledger_serving
from tests.support.ui import view_app

ATTACKER = "attacker.example"


def test_the_view_on_loopback_answers_only_requests_for_a_local_host(
    redis_url: str, prefix: str, redis_store: EventStore, tmp_path: Path
) -> None:
    # Given the view as it starts by default: on loopback, without tokens
    redis_store.append(lb.StreamId("team-b-1", "main"), 0, "a0", [msg("their secret")])
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with ledger_serving(redis_url, prefix, port, tmp_path / "ui.log", "ui", "--port", str(port)):
        # A request that names this machine is answered
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", "localhost"):
            page = httpx.get(f"{base}/s/team-b-1?format=json", headers={"Host": host}, timeout=5)
            assert page.status_code == 200, (host, page.text)
        same_site = {"Origin": f"http://localhost:{port}"}
        assert httpx.get(f"{base}/", headers=same_site, timeout=5).status_code == 200
        # When a page of another site asks: by DNS rebinding (its host), or from its origin
        for path in ("/", "/s/team-b-1?format=json", "/s/team-b-1/live", "/static/ledger.css"):
            rebound = httpx.get(base + path, headers={"Host": f"{ATTACKER}:{port}"}, timeout=5)
            foreign = httpx.get(base + path, headers={"Origin": f"http://{ATTACKER}"}, timeout=5)
            # Then it is refused as the MCP server refuses it, and sees nothing
            assert (rebound.status_code, foreign.status_code) == (421, 403), path
            assert "secret" not in rebound.text + foreign.text
            assert rebound.text.count("\n") <= 1


def test_the_mcp_server_refuses_the_same_requests(
    tmp_path: Path, redis_url: str, prefix: str
) -> None:
    file = str(tmp_path / "tokens.json")
    token = add_token(file, Identity("alice", "reader"))
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    accept = {"Accept": "application/json, text/event-stream", "Authorization": f"Bearer {token}"}
    command = ("mcp", "--http", "--port", str(port), "--tokens", file)
    with ledger_serving(redis_url, prefix, port, tmp_path / "mcp.log", *command):
        for extra, status in (
            ({"Host": f"{ATTACKER}:{port}"}, 421),
            ({"Origin": f"http://{ATTACKER}"}, 403),
        ):
            refused = httpx.post(url, json=body, headers=accept | extra, timeout=5)
            assert refused.status_code == status, refused.text
        # the metadata a client discovers the server's authorization by, too
        meta = f"http://127.0.0.1:{port}/.well-known/oauth-protected-resource/mcp"
        refused = httpx.get(meta, headers={"Host": f"{ATTACKER}:{port}"}, timeout=5)
        assert refused.status_code == 421


def test_beyond_loopback_the_view_leaves_the_host_to_its_tokens(
    redis_url: str, prefix: str, redis_store: EventStore, tmp_path: Path
) -> None:
    # A view listening beyond loopback is reached by whatever name the network gives it, and
    # holds every request by its token instead (no socket is opened here: the app alone)
    redis_store.append(lb.StreamId("team-a-1", "main"), 0, "a0", [msg("hello")])
    file = str(tmp_path / "tokens.json")
    token = add_token(file, Identity("viewer", "reader", "team-a-*"))
    app = view_app(redis_url, prefix, tokens=TokenFile(file), host="0.0.0.0")
    with TestClient(app, base_url="http://ledger.internal:8765") as client:
        page = client.get("/s/team-a-1", headers={"Authorization": f"Bearer {token}"})
        assert page.status_code == 200
        assert client.get("/s/team-a-1").status_code == 401
    # and an app told it listens on loopback checks the host whatever else it has
    local = view_app(redis_url, prefix, tokens=TokenFile(file), host="127.0.0.1")
    with TestClient(local, base_url="http://ledger.internal:8765") as client:
        headers = {"Authorization": f"Bearer {token}"}
        assert client.get("/s/team-a-1", headers=headers).status_code == 421
