"""Commands for operators: unresolved, reconcile, resolve, doctor, acl."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from typing import Any

import click

from ledger_bus.cli.app import (
    EXIT_AT_RISK,
    EXIT_BACKEND_REFUSED,
    EXIT_REFUSED,
    EXIT_UNAVAILABLE,
    BadInput,
    Failure,
    Settings,
    cli,
    exit_code_for,
    pass_settings,
)
from ledger_bus.cli.lifecycle import open_archive
from ledger_bus.cli.output import emit, show_record, show_rows
from ledger_bus.cli.params import Duration
from ledger_bus.model.errors import LedgerError
from ledger_bus.model.ids import check_name
from ledger_bus.model.jsontext import parse_json
from ledger_bus.operations.doctor import examine
from ledger_bus.operations.heartbeat import heartbeat_age, read_heartbeat
from ledger_bus.operations.metrics import ReconcilerMetrics
from ledger_bus.operations.reconciler import (
    MIN_PRUNE_AFTER_S,
    Reconciler,
    ReconcilerConfig,
    log_action,
)
from ledger_bus.operations.resolve import open_for, resolve_attempt
from ledger_bus.store import ARCHIVE_ENV
from ledger_bus.store.buckets import INDEX_BUCKETS
from ledger_bus.store.redis.acl import ROLES, acl_file


@cli.command()
@click.argument("session")
@pass_settings
def unresolved(settings: Settings, session: str) -> None:
    """Each tool_call of the session that has no tool_result, oldest first."""
    store = settings.session(session)
    reconciler = Reconciler(store)
    now = store.now_ms()
    attempts = store.open_attempts(session)
    rows = open_for(attempts, now)
    for row, attempt in zip(rows, attempts, strict=True):
        row["run_alive"] = reconciler.run_alive(attempt)
        row["safe_to_replay"] = store.safe_to_replay(session, attempt.run_id, attempt.tool)
    show_rows(settings, rows, f"{session}: unresolved calls")


@cli.command()
@click.option("--once", is_flag=True, help="One pass, then exit.")
@click.option(
    "--grace",
    type=Duration(),
    default="60s",
    show_default=True,
    help="How old an open call must be before it is flagged (30s, 5m, or seconds).",
)
@click.option(
    "--interval",
    type=Duration(minimum=0.1),
    default="5s",
    show_default=True,
    help="The pause between passes (5s, 1m, or seconds).",
)
@click.option(
    "--session",
    "sessions",
    multiple=True,
    help="Cover only this session (repeatable); the index is not read.",
)
@click.option(
    "--prune-after",
    type=Duration(minimum=MIN_PRUNE_AFTER_S),
    default="10m",
    show_default=True,
    help="How long a session with nothing open stays in the index (10m, 1h, or seconds).",
)
@click.option(
    "--bucket",
    "buckets",
    type=click.IntRange(0, INDEX_BUCKETS - 1),
    multiple=True,
    help="Cover only these index buckets (repeatable); default all.",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(1, 65535),
    default=None,
    help="Serve Prometheus metrics on this port.",
)
@click.option("--metrics-address", default="127.0.0.1", show_default=True)
@click.option(
    "--heartbeat",
    "heartbeat",
    default="/tmp/ledger-bus-reconciler.heartbeat",
    show_default=True,
    help="File touched after each pass.",
)
@click.option(
    "--check",
    is_flag=True,
    help="Exit 0 if the heartbeat is fresh (3 intervals, 30 s at least), else 1.",
)
@click.option(
    "--archive-idle-after",
    type=Duration(),
    default=None,
    help="Also move sessions quiet this long (7d, 12h) to the archive, every five minutes.",
)
@click.option(
    "--archive-to",
    default=None,
    help=f"The archive for --archive-idle-after (default: --archive, {ARCHIVE_ENV}).",
)
@pass_settings
def reconcile(
    settings: Settings,
    once: bool,
    grace: float,
    interval: float,
    prune_after: float,
    buckets: tuple[int, ...],
    sessions: tuple[str, ...],
    metrics_port: int | None,
    metrics_address: str,
    heartbeat: str,
    check: bool,
    archive_idle_after: float | None,
    archive_to: str | None,
) -> None:
    """The reconciler worker: flags each call requested and never finished, exactly once.

    One JSON line per action on stderr, its log. With --once, the pass's actions (its flags, and
    the pass's report) are its result, printed on stdout too. SIGTERM ends it between two flags.
    """
    if check:
        # 0 or 1 and nothing else: health probes (Docker's HEALTHCHECK) reserve other codes.
        try:
            age, last = heartbeat_age(heartbeat), read_heartbeat(heartbeat)
        except LedgerError as err:
            raise Failure(str(err), EXIT_REFUSED) from None
        limit = max(3 * interval, 30.0)
        if age > limit:
            raise Failure(f"last pass finished {age:.0f}s ago (limit {limit:.0f}s)", EXIT_REFUSED)
        if last.get("errors"):
            raise Failure(
                f"the last pass could not read or flag {last['errors']} session(s): "
                f"{last.get('last_error', 'see the reconciler log')}",
                EXIT_REFUSED,
            )
        show_record(settings, {"ok": True, "last_pass_s": round(age, 1), **last})
        return
    config = ReconcilerConfig(
        grace_s=grace,
        interval_s=interval,
        prune_after_s=prune_after,
        buckets=buckets or tuple(range(INDEX_BUCKETS)),
        sessions=sessions,
        archive_idle_s=archive_idle_after,
    )
    cold = None
    if archive_idle_after is not None:
        cold = open_archive(settings, archive_to)
    elif archive_to is not None:
        raise BadInput("--archive-to goes with --archive-idle-after")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger = logging.getLogger("ledger_bus.reconciler")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    metrics = None
    if metrics_port is not None:
        try:
            metrics = ReconcilerMetrics(
                metrics_port, metrics_address, settings.store(patient=not once)
            )
        except OSError as err:
            raise BadInput(
                f"cannot serve metrics on {metrics_address}:{metrics_port}: {err}"
            ) from None
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    done: list[dict[str, Any]] = []

    def act(record: dict[str, Any]) -> None:
        log_action(record)
        if once:
            done.append(record)

    reconciler = Reconciler(
        settings.store(patient=not once), config, on_action=act, metrics=metrics, archive=cold
    )
    try:
        report = reconciler.run_forever(stop, heartbeat=heartbeat, once=once)
    finally:
        if metrics is not None:
            metrics.close()
        if cold is not None:
            cold.close()
    if once:
        show_rows(settings, done, "reconcile")
    if once and report is not None and report.errors:
        raise Failure(
            f"the pass could not read or flag {report.errors} session(s): {report.last_error}",
            exit_code_for(report.last_failure) if report.last_failure else EXIT_REFUSED,
        )


@cli.command()
@click.argument("session")
@click.argument("attempt")
@click.option(
    "--unknown", "outcome", flag_value="unknown", help="Nobody knows whether the call took effect."
)
@click.option("--retried-as", default=None, help="Superseded by this new attempt.")
@click.option("--ok", "ok_json", default=None, help="The real result, as JSON.")
@click.option("--error", "error_json", default=None, help="The real error, as JSON.")
@click.option("--agent", default="operator", show_default=True)
@pass_settings
def resolve(
    settings: Settings,
    session: str,
    attempt: str,
    outcome: str | None,
    retried_as: str | None,
    ok_json: str | None,
    error_json: str | None,
    agent: str,
) -> None:
    """Close an open (typically flagged) attempt with an explicit terminal event."""
    chosen = [c for c in (outcome, retried_as, ok_json, error_json) if c is not None]
    if len(chosen) != 1:
        raise BadInput("give exactly one of --unknown, --retried-as, --ok, --error")
    result: Any = None
    if ok_json is not None:
        result, kind = parse_json(ok_json, "--ok"), "ok"
    elif error_json is not None:
        result, kind = parse_json(error_json, "--error"), "error"
    else:
        kind = "retried" if retried_as else "unknown"
    cursor = resolve_attempt(
        settings.store(),
        session,
        attempt,
        kind,  # type: ignore[arg-type]
        result=result,
        retry_attempt=retried_as,
        agent=agent,
    )
    show_record(
        settings, {"session": session, "attempt_id": attempt, "outcome": kind, "cursor": cursor}
    )


@cli.command()
@click.option(
    "--durability",
    type=click.Choice(["strict", "everysec"]),
    default="strict",
    show_default=True,
    help="strict: no acknowledged append may be lost.",
)
@pass_settings
def doctor(settings: Settings, durability: str) -> None:
    """Inspect a live Redis and say what it risks for a ledger; exit 9 when data can be lost."""
    import redis

    from ledger_bus.store import DEFAULT_URL, split_durability
    from ledger_bus.store.redis.connection import cluster_seeds, open_sentinel, refusal

    url, level = split_durability(settings.url or DEFAULT_URL, settings.durability)
    if url.startswith(("sqlite:", "postgresql:", "postgres:", "memory:")):
        raise BadInput(
            "doctor inspects a Redis; a SQL store's schema is `ledger-bus db current`, its"
            " durability the database's own"
        )
    timeouts = {"socket_timeout": settings.timeout, "socket_connect_timeout": settings.timeout}
    # For a cluster, the first seed the URL names is inspected, and through it the cluster's
    # slot coverage; behind Sentinel, the primary it names.
    client: redis.Redis
    if "+sentinel" in url:
        client = open_sentinel(url, timeouts)
    elif "+cluster" in url:
        client = redis.Redis.from_url(cluster_seeds(url)[0], **timeouts)
    else:
        client = redis.Redis.from_url(url, **timeouts)
    try:
        findings = examine(client, durability, settings.prefix, level)  # type: ignore[arg-type]
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as err:
        raise Failure(f"cannot inspect {url}: {err}", EXIT_UNAVAILABLE) from None
    except redis.exceptions.RedisError as err:
        raise Failure(f"cannot inspect {url}: {refusal(err)}", EXIT_BACKEND_REFUSED) from None
    finally:
        client.close()
    if settings.as_table:
        marks = {"ok": "[green]ok  [/]", "warn": "[yellow]warn[/]", "fail": "[red]FAIL[/]"}
        from rich.console import Console

        console = Console()
        for finding in findings:
            console.print(f"{marks[finding.level]} {finding.topic:<12} {finding.detail}")
    else:
        for finding in findings:
            emit(finding.to_dict())
    if any(f.level == "fail" for f in findings):
        raise Failure(f"{url}: data can be lost (see the FAIL lines)", EXIT_AT_RISK)


@cli.command()
@click.option(
    "--names",
    default="ledger",
    show_default=True,
    help="Users are named NAMES-writer, NAMES-reconciler, NAMES-inspector, NAMES-operator.",
)
@pass_settings
def acl(settings: Settings, names: str) -> None:
    """A users.acl of least-privilege users for this prefix (--prefix), one per role.

    A role whose password is in LEDGER_BUS_PASSWORD_<ROLE> (WRITER, RECONCILER, INSPECTOR,
    OPERATOR) is on, with the password's SHA-256; the others are off. Load it with
    `redis-server --aclfile users.acl` (see docs/deploy.md).
    """
    passwords = {
        role: os.environ[f"LEDGER_BUS_PASSWORD_{role.upper()}"]
        for role in ROLES
        if os.environ.get(f"LEDGER_BUS_PASSWORD_{role.upper()}")
    }
    sys.stdout.write(acl_file(settings.prefix, passwords, check_name(names, "user name")))
