"""What a Redis server risks for a ledger, line by line: `ledger-bus doctor`."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

import redis

from ledger_bus.model.durability import LOCAL, Durability
from ledger_bus.model.jsontext import JSONObject
from ledger_bus.store.redis import fullest

Level = Literal["ok", "warn", "fail"]
Fsync = Literal["strict", "everysec"]


@dataclass(frozen=True)
class Finding:
    level: Level
    topic: str
    detail: str

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".")[:3] if part.isdigit())


def _config(client: redis.Redis, name: str) -> str | None:
    try:
        found: dict[Any, Any] = client.config_get(name)
    except redis.exceptions.ResponseError:
        return None  # CONFIG is often renamed or refused on managed services
    for raw, value in found.items():
        key = raw.decode() if isinstance(raw, bytes) else raw
        if key == name:
            return value.decode() if isinstance(value, bytes) else str(value)
    return None


def _command(client: redis.Redis, *args: Any) -> object:
    return client.execute_command(*args)  # type: ignore[no-untyped-call]


def _has_xautoclaim(client: redis.Redis, prefix: str) -> bool:
    """Feature, not version string: servers that speak the protocol report versions loosely.
    The probe key is under the ledger's prefix, where an ACL for the ledger reaches."""
    probe = f"{prefix}:doctor:probe"
    try:
        _command(client, "XAUTOCLAIM", probe, "g", "c", "0", "0-0", "COUNT", "1")
    except redis.exceptions.NoPermissionError:
        return True  # the command exists, this user just may not run it here
    except redis.exceptions.ResponseError as err:
        return "unknown command" not in str(err).lower()
    return True


class _Info:
    """INFO sections, read once each; a user without the right to INFO gets one finding
    saying so, and the checks that need it are skipped rather than failing the whole report."""

    def __init__(self, client: redis.Redis, findings: list[Finding]):
        self.client, self.findings, self.refused = client, findings, False

    def memory(self) -> JSONObject:
        """INFO memory; on a cluster, of the primary nearest its maxmemory: each fills on its
        own, and the first full one refuses its sessions' appends."""
        own = self("memory")
        if not own or not self("cluster").get("cluster_enabled"):
            return own
        found = []
        pool = self.client.connection_pool  # each primary with this one's credentials and TLS
        for address, node in self.client.cluster("NODES").items():
            if "master" not in node["flags"] or "fail" in node["flags"]:
                continue
            host, _, port = str(address).rpartition(":")
            where = {"host": host, "port": int(port.split("@")[0])}
            other = redis.Redis(
                connection_pool=redis.ConnectionPool(
                    connection_class=pool.connection_class,
                    **{**pool.connection_kwargs, **where},
                )
            )
            try:
                found.append(dict(other.info("memory")))
            finally:
                other.close()
        used, limit = fullest(found or [own])
        return {"used_memory": used, "maxmemory": limit}

    def __call__(self, section: str) -> JSONObject:
        if self.refused:
            return {}
        try:
            return dict(self.client.info(section))
        except redis.exceptions.NoPermissionError as err:
            self.refused = True
            self.findings.append(
                Finding(
                    "warn",
                    "permissions",
                    f"INFO is refused to this user ({err}): version, persistence, memory,"
                    " cluster and replication are not checked",
                )
            )
            return {}


def _memory(info: dict[str, Any]) -> Finding | None:
    if not info:
        return None
    used, limit = int(info.get("used_memory", 0)), int(info.get("maxmemory", 0))
    if not limit:
        return Finding(
            "warn",
            "memory",
            f"no maxmemory set ({used} bytes used): a full machine fails in ways Redis does"
            " not report; set maxmemory with noeviction",
        )
    share = used / limit
    detail = f"{used} of {limit} bytes used ({share:.0%})"
    # What to do about it: see what takes the room, and move finished sessions out.
    remedy = (
        "`ledger-bus du` shows which sessions take it; `ledger-bus archive --idle-after 7d"
        " --to postgresql://...` moves finished ones to SQL (docs/lifecycle.md)"
    )
    if used >= limit:
        return Finding(
            "fail", "memory", f"Redis memory is full: {detail}; appends are refused; {remedy}"
        )
    if share >= 0.8:
        return Finding(
            "warn", "memory", f"{detail}: appends will be refused when it fills; {remedy}"
        )
    return Finding("ok", "memory", detail)


def examine(
    client: redis.Redis,
    durability: Fsync = "strict",
    prefix: str = "lb",
    wanted: Durability = LOCAL,
) -> list[Finding]:
    """Inspect a live server; each finding says what it means for ledger data."""
    findings: list[Finding] = []
    info = _Info(client, findings)
    server = _Server.of(info("server"))
    version = _version_finding(client, server, prefix)
    if version is not None:
        findings.append(version)
    memory = _memory(info.memory())
    if memory is not None:
        findings.append(memory)
    appendonly = _persistence(client, info, durability, findings)
    findings.append(_cluster(client, info("cluster")))
    replication = info("replication")
    if replication.get("role") == "slave":
        findings.append(
            Finding("fail", "role", "this is a replica: appends must go to the primary")
        )
    elif replication:
        findings.extend(_replication(client, replication, wanted, appendonly, server))
    return findings


@dataclass(frozen=True)
class _Server:
    """The server's name and version, as INFO server says them (empty: INFO was refused)."""

    known: bool
    name: str
    version: str

    @classmethod
    def of(cls, server: JSONObject) -> _Server:
        version = str(server.get("valkey_version") or server.get("redis_version") or "0")
        name = "valkey" if "valkey_version" in server else "redis"
        return cls(bool(server), name, version)


def _version_finding(client: redis.Redis, server: _Server, prefix: str) -> Finding | None:
    if not server.known:
        return None  # not known: said by the permissions finding
    if _version(server.version) < (7, 0) or not _has_xautoclaim(client, prefix):
        return Finding(
            "fail",
            "version",
            f"{server.name} {server.version}: ledger-bus needs 7.0 or newer"
            " (XAUTOCLAIM with deleted ids, exclusive ranges)",
        )
    return Finding("ok", "version", f"{server.name} {server.version}")


def _persistence(
    client: redis.Redis, info: _Info, durability: Fsync, findings: list[Finding]
) -> str | None:
    """Whether appends reach disk, and stay there: AOF, fsync, eviction, the directory. Its
    findings go on `findings` (after any INFO's refusal, in the order they are found); returns
    `appendonly` (None: CONFIG refused)."""
    appendonly = _config(client, "appendonly")
    fsync = _config(client, "appendfsync")
    policy = _config(client, "maxmemory-policy")
    directory = _config(client, "dir")
    if appendonly is None:
        findings.append(
            Finding(
                "warn",
                "config",
                "CONFIG GET is refused here: check AOF,"
                " appendfsync and maxmemory-policy with your provider",
            )
        )
    if appendonly == "no":
        findings.append(_no_aof(_config(client, "save")))
    elif appendonly == "yes":
        findings.append(Finding("ok", "persistence", "appendonly yes"))
    if appendonly == "yes" and fsync is not None:
        findings.append(_fsync(fsync, durability))
    if policy is not None:
        findings.append(_eviction(policy))
    persistence = info("persistence")
    if persistence.get("aof_last_write_status", "ok") != "ok":
        findings.append(
            Finding(
                "fail", "persistence", "the last AOF write failed: appends are not reaching disk"
            )
        )
    if directory is not None:
        temporary = directory.startswith(("/tmp", "/var/tmp", "/dev/shm"))
        findings.append(
            Finding(
                "warn" if temporary else "ok",
                "directory",
                f"dir {directory}"
                + (": a temporary directory does not survive a reboot" if temporary else ""),
            )
        )
    return appendonly


def _no_aof(save: str | None) -> Finding:
    """What a server without an AOF loses: everything, without RDB snapshots (`save ""`);
    what came after the last snapshot, with them."""
    if save is not None and not save.strip():
        said = 'appendonly no and no snapshots (save ""): a restart or a crash loses every append'
    elif save is None:
        said = "appendonly no: a crash loses every append since the last snapshot, if any are taken"
    else:
        said = f"appendonly no: a crash loses every append since the last snapshot (save {save})"
    return Finding("fail", "persistence", said)


def _fsync(fsync: str, durability: Fsync) -> Finding:
    if fsync == "always":
        return Finding("ok", "fsync", "appendfsync always: an acknowledged append is on disk")
    if fsync == "everysec":
        level: Level = "fail" if durability == "strict" else "warn"
        return Finding(
            level,
            "fsync",
            "appendfsync everysec: a machine crash can lose about a second of acknowledged appends",
        )
    return Finding(
        "fail",
        "fsync",
        f"appendfsync {fsync}: the kernel decides when"
        " appends reach disk; a crash can lose many seconds",
    )


def _eviction(policy: str) -> Finding:
    if policy == "noeviction":
        return Finding(
            "ok",
            "eviction",
            "maxmemory-policy noeviction: a full server refuses writes instead of deleting keys",
        )
    return Finding(
        "fail",
        "eviction",
        f"maxmemory-policy {policy}: Redis may delete ledger keys (or run leases) to free memory",
    )


def _cluster(client: redis.Redis, cluster: JSONObject) -> Finding:
    if not cluster.get("cluster_enabled"):
        return Finding("ok", "cluster", "standalone server")
    fields = {str(k): str(v) for k, v in client.cluster("INFO").items()}
    assigned, failed = (
        int(fields.get("cluster_slots_assigned", 0)),
        int(fields.get("cluster_slots_fail", 0)),
    )
    state = fields.get("cluster_state", "?")
    level: Level = "ok" if state == "ok" and assigned == 16384 and failed == 0 else "fail"
    return Finding(
        level,
        "cluster",
        f"cluster_state {state}, {assigned}/16384 slots assigned, {failed} failing",
    )


def _replication(
    client: redis.Redis,
    replication: JSONObject,
    level: Durability,
    appendonly: str | None,
    server: _Server,
) -> list[Finding]:
    """What the replicas attached, their lag and the chosen durability mean for an append."""
    findings = []
    replicas = [v for k, v in replication.items() if k.startswith("slave") and isinstance(v, dict)]
    online = [r for r in replicas if r.get("state") == "online"]
    lags = ", ".join(f"{r.get('ip')}:{r.get('port')} lag {r.get('lag', '?')}s" for r in replicas)
    if replicas:
        detail = f"{len(online)} of {len(replicas)} replica(s) online ({lags})"
        if level.replicas:
            findings.append(Finding("ok", "replication", detail))
        else:
            findings.append(
                Finding(
                    "warn",
                    "replication",
                    f"{detail}; replication is asynchronous and durability {level} does not wait"
                    " for it: a failover can lose acknowledged appends (use replicas:N)",
                )
            )
    else:
        findings.append(Finding("ok", "replication", "no replicas"))
    if level.replicas > len(online):
        findings.append(
            Finding(
                "fail",
                "durability",
                f"durability {level} cannot hold: {len(online)} replica(s) online; every append"
                " will be reported not confirmed (exit 7)",
            )
        )
    if level.aof and appendonly == "no":
        findings.append(
            Finding("fail", "durability", f"durability {level} needs appendonly yes on the primary")
        )
    if level.aof and server.name == "redis" and _version(server.version) < (7, 2):
        findings.append(
            Finding(
                "fail",
                "durability",
                f"durability {level} needs WAITAOF: redis {server.version} has none",
            )
        )
    floor = _config(client, "min-replicas-to-write")
    if floor is not None and replicas:
        lag = _config(client, "min-replicas-max-lag")
        findings.append(
            Finding(
                "ok" if int(floor) else "warn",
                "min-replicas",
                f"min-replicas-to-write {floor}, min-replicas-max-lag {lag}"
                + ("" if int(floor) else ": the primary accepts writes with no replica in reach"),
            )
        )
    return findings
