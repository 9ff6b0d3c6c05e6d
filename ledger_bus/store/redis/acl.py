"""Least-privilege Redis ACL rules for the roles a ledger deployment has.

Each role gets the commands its job runs and nothing else, on the keys under one prefix only, so
one Redis can hold several tenants' ledgers, each prefix with its own users. Scripts run with the
caller's rights (Redis 7), so a role that may EVALSHA still cannot make the append script write
what the role itself may not: the script checks every write first and refuses whole.

No role has SCAN or KEYS: they ignore key patterns, and would list other tenants' sessions. The
operator rebuilds the session index (`sessions --rebuild`, a SCAN) and so is a deployment-wide
role, not a tenant's.
"""

from __future__ import annotations

import hashlib
from typing import Final

ROLES: Final = ("writer", "reconciler", "inspector", "operator")

# What every client of the ledger runs: connection set-up, the server clock, scripts by sha
# (loaded again after a restart or SCRIPT FLUSH), the read-only ones as such (a stream's read,
# read_stream.lua, on keys a role may only read).
_CONNECT: Final = "+ping +hello +select +time +evalsha +evalsha_ro +script|load"
# Reads of session data and the indexes, artifacts included.
_READ: Final = (
    "+xrange +xrevrange +xread +xlen +hget +hmget +hgetall +hscan +hlen +hexists +get +zrange"
    " +zrevrange"
)
# The commands the append script runs, and the indexes listed around it (an append that opens
# attempts takes back its provisional entry in the open-sessions index).
_APPEND: Final = "+xadd +hset +hdel +zadd +zrem"
# Consumer groups on a session log, with the dead-letter move (MULTI/EXEC) and the prune script.
_GROUPS: Final = (
    "+xreadgroup +xack +xautoclaim +xclaim +xpending +xgroup|create +xgroup|delconsumer"
    " +xinfo|groups +xinfo|consumers +multi +exec"
)
# Deleting sessions and streams (delete_session.lua, delete_stream.lua; the index entries after
# with _APPEND's ZREM).
_DELETE: Final = "+exists +hkeys +unlink +xdel +xtrim +hincrby +xinfo|groups +xinfo|stream"
# Whatever a cluster client asks to find the slots.
_CLUSTER: Final = "+cluster|slots +cluster|shards +cluster|nodes +cluster|info +readonly"
_OPERATE: Final = "+info +config|get +scan +slowlog|get +latency|latest +memory|usage"


def role_rules(role: str, prefix: str = "lb") -> str:
    """The ACL rules (without user name and password) of one role under one key prefix."""
    every = f"~{prefix}:*"
    leases = f"(+set +pexpire +del ~{prefix}:{{*}}:lease:*)"
    # A lease's first holding draws its token (lease.lua's HINCRBY); the writer and the operator
    # have HINCRBY from _DELETE.
    tokens = f"(+hincrby ~{prefix}:{{*}}:fences)"
    # Writing artifacts a chunk at a time (RedisStore._put_artifacts, artifact_put.lua); the
    # append script makes them persist and counts their references.
    artifacts = (
        f"(+exists +hset +pexpire +multi +exec +hstrlen +rename +unlink +persist +hincrby"
        f" ~{prefix}:{{*}}:art:* ~{prefix}:{{*}}:arts)"
    )
    forget = f"(+zscore +zscan +zrem ~{prefix}:open-sessions:*)"
    if role == "writer":
        # An agent: appends, reads, its runs' leases, following a session through a group, and
        # deleting (frameworks delete their threads).
        return (
            f"{_CONNECT} {_CLUSTER} {_READ} {_APPEND} {_GROUPS} {_DELETE} {every} {leases}"
            f" {artifacts}"
        )
    if role == "reconciler":
        # Reads open attempts and leases, appends flags, forgets idle sessions from the index;
        # takes a dead run's lease while its probe settles an open call (operations/probes.py).
        return (
            f"{_CONNECT} {_CLUSTER} {_READ} {_APPEND} {every} {leases} {tokens} {forget}"
            f" {artifacts}"
        )
    if role == "inspector":
        # Reads everything of the prefix; writes only what following with its own group needs:
        # the group's place on a session log, and its dead letters. No XADD to a session log.
        return (
            f"{_CONNECT} {_CLUSTER} {_READ} {_GROUPS} %R~{prefix}:* %RW~{prefix}:{{*}}:log"
            f" (+xadd %W~{prefix}:{{*}}:dead:*)"
        )
    if role == "operator":
        # Everything the others do, what doctor and `sessions --rebuild` need, and archiving
        # (HSETNX marks a session for its archive).
        return (
            f"{_CONNECT} {_CLUSTER} {_READ} {_APPEND} {_GROUPS} {_DELETE} {_OPERATE} {every}"
            f" +hsetnx {leases} {forget} {artifacts}"
        )
    raise ValueError(f"unknown role {role!r}; the roles are {', '.join(ROLES)}")


def acl_file(
    prefix: str = "lb", passwords: dict[str, str] | None = None, names: str = "ledger"
) -> str:
    """A users.acl with one user per role, `<names>-<role>`: on, with the password's SHA-256, for
    the roles `passwords` names; off (no login at all) for the others."""
    lines = []
    for role in ROLES:
        password = (passwords or {}).get(role)
        login = f"on #{hashlib.sha256(password.encode()).hexdigest()}" if password else "off"
        lines.append(
            f"user {names}-{role} {login} resetkeys resetchannels -@all {role_rules(role, prefix)}"
        )
    return "\n".join(lines) + "\n"
