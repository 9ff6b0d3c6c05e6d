"""rediss://: the ledger over TLS, checked the way docs/deploy.md says to set it up."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import ledger_bus as lb
from ledger_bus.model.errors import BackendUnavailable
from tests.support.helpers import ledger_cli
from tests.support.tls import tls_server

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")
REF = lb.StreamId("tls", "main")


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
