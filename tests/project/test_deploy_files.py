"""The deployment files: parsed, and checked for the settings a ledger depends on."""

from __future__ import annotations

import shlex
from typing import Any

import click
import yaml

from ledger_bus.cli import cli
from ledger_bus.store.redis.acl import acl_file
from tests.support.helpers import ROOT

DEPLOY = ROOT / "deploy"


def conf(text: str) -> dict[str, str]:
    pairs = (
        line.split(None, 1)
        for line in text.splitlines()
        if line.strip() and not line.startswith("#")
    )
    return {key: value.strip() for key, value in pairs}


LEDGER_SETTINGS = {
    "appendonly": "yes",
    "appendfsync": "always",
    "maxmemory-policy": "noeviction",
    "stream-node-max-bytes": "16384",  # fewer bytes an event (docs/performance.md)
}


def test_the_shipped_redis_conf_keeps_every_acknowledged_append() -> None:
    settings = conf((DEPLOY / "redis.conf").read_text())
    for key, value in LEDGER_SETTINGS.items():
        assert settings[key] == value
    assert "dir" not in settings, "the service sets the data directory"


def test_compose_runs_redis_with_the_conf_on_a_volume_and_a_probed_reconciler() -> None:
    compose: dict[str, Any] = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    redis, reconciler, demo = (compose["services"][n] for n in ("redis", "reconciler", "demo"))
    assert "./redis.conf:/usr/local/etc/redis/redis.conf:ro" in redis["volumes"]
    assert "./users.acl:/usr/local/etc/redis/users.acl:ro" in redis["volumes"]
    assert redis["command"][-2:] == ["--aclfile", "/usr/local/etc/redis/users.acl"]
    assert redis["command"][:2] == ["redis-server", "/usr/local/etc/redis/redis.conf"]
    assert any(v.startswith("redis-data:/data") for v in redis["volumes"])
    assert "redis-data" in compose["volumes"]
    assert reconciler["healthcheck"]["test"] == ["CMD", "ledger-bus", "reconcile", "--check"]
    assert reconciler["command"][0] == "reconcile"
    assert reconciler["stop_signal"] == "SIGTERM"
    assert reconciler["environment"]["LEDGER_BUS_URL"] == "redis://redis:6379/0"
    assert demo["command"][0] == "demo"
    for service in (redis, reconciler):
        assert all(p.startswith("127.0.0.1:") for p in service.get("ports", []))


def test_kubernetes_keeps_data_on_a_volume_and_probes_the_reconciler() -> None:
    redis_docs = list(yaml.safe_load_all((DEPLOY / "k8s" / "redis.yaml").read_text()))
    kinds = {d["kind"]: d for d in redis_docs}
    settings = conf(kinds["ConfigMap"]["data"]["redis.conf"])
    for key, value in LEDGER_SETTINGS.items():
        assert settings[key] == value
    assert settings["aclfile"] == "/etc/redis/users.acl"
    assert kinds["ConfigMap"]["data"]["users.acl"] == acl_file("lb")
    statefulset = kinds["StatefulSet"]
    assert statefulset["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "data"
    container = statefulset["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "data", "mountPath": "/data"} in container["volumeMounts"]
    assert container["args"][1:] == ["--dir", "/data"]

    (deployment,) = yaml.safe_load_all((DEPLOY / "k8s" / "reconciler.yaml").read_text())
    reconciler = deployment["spec"]["template"]["spec"]["containers"][0]
    assert reconciler["livenessProbe"]["exec"]["command"][:3] == [
        "ledger-bus",
        "reconcile",
        "--check",
    ]
    assert reconciler["args"][0] == "reconcile"
    assert deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] >= 30


def test_the_image_and_the_units_run_the_reconciler_with_a_health_check() -> None:
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert 'CMD ["ledger-bus", "reconcile", "--check"]' in dockerfile
    assert 'ENTRYPOINT ["ledger-bus"]' in dockerfile
    unit = (DEPLOY / "systemd" / "ledger-bus-reconciler.service").read_text()
    assert "ExecStart=/opt/ledger-bus/bin/ledger-bus reconcile" in unit
    assert "KillSignal=SIGTERM" in unit
    redis_unit = (DEPLOY / "systemd" / "ledger-bus-redis.service").read_text()
    assert "/etc/ledger-bus/redis.conf --dir /var/lib/ledger-bus" in redis_unit


def test_the_archive_timer_runs_a_command_the_cli_takes() -> None:
    unit = (DEPLOY / "systemd" / "ledger-bus-archive.service").read_text()
    timer = (DEPLOY / "systemd" / "ledger-bus-archive.timer").read_text()
    assert "OnUnitActiveSec=1h" in timer
    line = next(x for x in unit.splitlines() if x.startswith("ExecStart="))
    program, command, *args = shlex.split(line.removeprefix("ExecStart="))
    assert (program, command) == ("/opt/ledger-bus/bin/ledger-bus", "archive")
    archive = cli.get_command(click.Context(cli), "archive")  # loaded as the command line loads it
    assert archive is not None
    parsed = archive.make_context("archive", list(args)).params
    assert parsed["idle_after"] == 7 * 86400
    assert "LEDGER_BUS_ARCHIVE=postgresql://" in unit
