"""Operations, from the command line: unresolved, reconcile, resolve, doctor, acl, and a
session's life (delete, archive, du, bound)."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from typing import TYPE_CHECKING

import click

from ledger_bus.agent.names import named_sessions
from ledger_bus.cli.app import (
    EXIT_AT_RISK,
    EXIT_BACKEND_REFUSED,
    EXIT_REFUSED,
    EXIT_UNAVAILABLE,
    BadInput,
    Failure,
    Settings,
    cli,
    did_you_mean,
    exit_code_for,
    pass_settings,
    say,
)
from ledger_bus.cli.output import emit, show_record, show_rows, terminal
from ledger_bus.cli.params import Duration
from ledger_bus.model.errors import LedgerError, NotFound
from ledger_bus.model.ids import StreamId, check_name
from ledger_bus.model.jsontext import JSONObject, parse_json
from ledger_bus.operations.heartbeat import heartbeat_age, read_heartbeat
from ledger_bus.operations.metrics import ReconcilerMetrics
from ledger_bus.operations.probes import load_probes
from ledger_bus.operations.reconciler import (
    MIN_PRUNE_AFTER_S,
    Reconciler,
    ReconcilerConfig,
    log_action,
)
from ledger_bus.operations.resolve import open_for, probes_op, resolve_attempt
from ledger_bus.store import ARCHIVE_ENV, DEFAULT_URL, connect, split_durability
from ledger_bus.store.base import (
    DEFAULT_DEDUP_WINDOW_MS,
    ArchiveSource,
    ArchiveTarget,
    EventStore,
    ServerAdmin,
)
from ledger_bus.store.buckets import INDEX_BUCKETS

if TYPE_CHECKING:
    import redis


@cli.command()
@click.argument("session")
@pass_settings
def unresolved(settings: Settings, session: str) -> None:
    """Each tool_call of the session that has no tool_result, oldest first."""
    store, session = settings.named(session)
    reconciler = Reconciler(store)
    now = store.now_ms()
    attempts = store.open_attempts(session)
    rows = open_for(attempts, now, store.run_op(probes_op(store, attempts)))
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
@click.option(
    "--probes",
    "probe_specs",
    multiple=True,
    metavar="MODULE:ATTR",
    help="A mapping of tool names to probes that settle open calls (repeatable).",
)
@click.option(
    "--probe-timeout",
    type=Duration(),
    default="10s",
    show_default=True,
    help="How long a probe may take before its call counts as unknown.",
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
    probe_specs: tuple[str, ...],
    probe_timeout: float,
) -> None:
    """The reconciler worker: settles each call requested and never finished whose tool has a
    probe (--probes), and flags the others (and those no probe could settle), exactly once.

    One JSON line per action on stderr, its log. With --once, the pass's actions (its flags, and
    the pass's report) are its result, printed on stdout too. SIGTERM ends it between two flags.
    """
    if check:
        check_heartbeat(settings, heartbeat, interval)
        return
    config = ReconcilerConfig(
        grace_s=grace,
        interval_s=interval,
        prune_after_s=prune_after,
        buckets=buckets or tuple(range(INDEX_BUCKETS)),
        sessions=sessions,
        archive_idle_s=archive_idle_after,
        probe_timeout_s=probe_timeout,
    )
    probes = load_probes(list(probe_specs))
    cold = None
    if archive_idle_after is not None:
        cold = open_archive(settings, archive_to)
    elif archive_to is not None:
        raise BadInput("--archive-to goes with --archive-idle-after")
    log_to_stderr()
    metrics = None
    if metrics_port is not None:
        metrics = serve_metrics(settings, metrics_port, metrics_address, patient=not once)
    stop = stop_on_signals()
    actions = Actions(keep=once)
    reconciler = Reconciler(
        settings.store(patient=not once),
        config,
        on_action=actions,
        metrics=metrics,
        archive=cold,
        probes=probes,
    )
    try:
        report = reconciler.run_forever(stop, heartbeat=heartbeat, once=once)
    finally:
        if metrics is not None:
            metrics.close()
        if cold is not None:
            cold.close()
    if once:
        show_rows(settings, actions.done, "reconcile")
    if once and report is not None and report.errors:
        raise Failure(
            f"the pass could not read or flag {report.errors} session(s): {report.last_error}",
            exit_code_for(report.last_failure) if report.last_failure else EXIT_REFUSED,
        )


def check_heartbeat(settings: Settings, heartbeat: str, interval: float) -> None:
    """`reconcile --check`: exit 0 if the last pass was lately and went well, else 1."""
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


def log_to_stderr() -> None:
    """The reconciler's log, one JSON line per action, on stderr."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger = logging.getLogger("ledger_bus.reconciler")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)


def serve_metrics(
    settings: Settings, port: int, address: str, *, patient: bool
) -> ReconcilerMetrics:
    """The Prometheus endpoint; BadInput (exit 2) when the address cannot be served."""
    try:
        return ReconcilerMetrics(port, address, settings.store(patient=patient))
    except OSError as err:
        raise BadInput(f"cannot serve metrics on {address}:{port}: {err}") from None


def stop_on_signals() -> threading.Event:
    """An event SIGTERM and SIGINT set: the reconciler stops between two flags."""
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    return stop


class Actions:
    """What the reconciler does, logged as it is done; kept too when `keep` (--once: the
    pass's actions are its result)."""

    def __init__(self, keep: bool):
        self.keep = keep
        self.done: list[JSONObject] = []

    def __call__(self, record: JSONObject) -> None:
        log_action(record)
        if self.keep:
            self.done.append(record)


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
    result: object = None
    if ok_json is not None:
        result, kind = parse_json(ok_json, "--ok"), "ok"
    elif error_json is not None:
        result, kind = parse_json(error_json, "--error"), "error"
    else:
        kind = "retried" if retried_as else "unknown"
    store, session = settings.named(session)
    cursor = resolve_attempt(
        store,
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
    url, level = split_durability(settings.url or DEFAULT_URL, settings.durability)
    if url.startswith(("sqlite:", "postgresql:", "postgres:", "memory:")):
        raise BadInput(
            "doctor inspects a Redis; a SQL store's schema is `ledger-bus db current`, its"
            " durability the database's own"
        )
    # Here, not at the top: the other commands of this module never load redis-py (80 ms).
    import redis  # noqa: PLC0415  (see above)

    from ledger_bus.operations.doctor import examine  # noqa: PLC0415  (it imports redis-py)
    from ledger_bus.store.redis.connection import refusal  # noqa: PLC0415  (so does this)

    client = redis_to_examine(url, settings.timeout)
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
        shown = terminal(highlight=True)
        for finding in findings:
            shown.markup(f"{marks[finding.level]} {finding.topic:<12} {finding.detail}")
    else:
        for finding in findings:
            emit(finding.to_dict())
    if any(f.level == "fail" for f in findings):
        raise Failure(f"{url}: data can be lost (see the FAIL lines)", EXIT_AT_RISK)


def redis_to_examine(url: str, timeout: float) -> redis.Redis:
    """The server doctor inspects: for a cluster, the first seed the URL names (and through it
    the cluster's slot coverage); behind Sentinel, the primary it names."""
    import redis  # noqa: PLC0415  (loaded by the doctor command, as it says)

    from ledger_bus.store.redis.connection import cluster_seeds, open_sentinel  # noqa: PLC0415

    timeouts = {"socket_timeout": timeout, "socket_connect_timeout": timeout}
    if "+sentinel" in url:
        client: redis.Redis = open_sentinel(url, timeouts)
        return client
    if "+cluster" in url:
        return redis.Redis.from_url(cluster_seeds(url)[0], **timeouts)
    return redis.Redis.from_url(url, **timeouts)


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
    from ledger_bus.store.redis.acl import ROLES, acl_file  # noqa: PLC0415  (as doctor's imports)

    passwords = {
        role: os.environ[f"LEDGER_BUS_PASSWORD_{role.upper()}"]
        for role in ROLES
        if os.environ.get(f"LEDGER_BUS_PASSWORD_{role.upper()}")
    }
    sys.stdout.write(acl_file(settings.prefix, passwords, check_name(names, "user name")))


SPENT = (
    "the append ids stay spent: an append that reuses one writes nothing (the same events: its"
    " old result; others: IdempotencyConflict, exit 4); write again with new ones"
)


@cli.command()
@click.argument("session")
@click.argument("stream", required=False)
@click.option("--yes", is_flag=True, help="Delete; without it, only say what would go.")
@pass_settings
def delete(settings: Settings, session: str, stream: str | None, yes: bool) -> None:
    """Delete a session's events (or one stream's) from the ledger, for good (spec 3.9).

    SESSION is the session's own name (an ADK session's is adk~APP~USER~ID: `sessions` lists
    them). The append ids stay spent: a late retry of an old append gets its old result back
    and never writes its events again, and an append that reuses an id for other events is an
    IdempotencyConflict (exit 4), so a script run again after a delete must make new ones (put
    the deletion's generation in them, say). The session (or stream) can be written again, from
    version 1.
    """
    if yes:
        # Safe to retry, as the API is: a session (or stream) deleted already, or never
        # written, deletes 0 events and exits 0.
        store = settings.store()
        if not store.session_exists(session):
            settings.not_archived(session)
        done = (
            store.delete_session(session)
            if stream is None
            else store.delete_stream(StreamId(session, stream))
        )
        show_record(settings, done.to_dict())
        if not done.events:
            what = repr(session) if stream is None else f"{session!r} stream {stream!r}"
            meant = named_sessions(store, session) if stream is None else []
            hint = f"; did you mean {', '.join(meant)}?" if meant else ""
            said = "holds no events (deleted already, or never written)"
            say(f"nothing to delete: {what} {said}{hint}")
            return
        say(SPENT)
        return
    store = settings.session(session)
    info = store.session_info(session)
    versions = {s.name: s.version for s in info.streams}
    if stream is not None and stream not in versions:
        hint = did_you_mean(stream, versions)
        raise NotFound(f"session {session!r} has no stream {stream!r}{hint}")
    going = versions if stream is None else {stream: versions[stream]}
    show_record(
        settings,
        {
            "session": session,
            "stream": stream,
            "would_delete_events": info.events if stream is None else versions[stream],
            "streams": ", ".join(f"{name} ({v})" for name, v in sorted(going.items())),
            "open_attempts": sum(
                1 for a in store.open_attempts(session) if stream in (None, a.stream)
            ),
        },
    )
    say("nothing deleted: run again with --yes to delete")
    say(SPENT)


def open_archive(settings: Settings, to: str | None) -> EventStore:
    """The SQL store that sessions of the Redis at --url move to: `to`, else --archive or
    LEDGER_BUS_ARCHIVE; BadInput (exit 2) for anything else."""
    if not isinstance(settings.store(), ArchiveSource):
        raise BadInput(f"archive moves sessions out of Redis; --url names {settings.url!r}")
    where = to or settings.archive or os.environ.get(ARCHIVE_ENV)
    if not where:
        raise BadInput(f"say where to archive: --to URL (or --archive, or {ARCHIVE_ENV})")
    cold = connect(where, timeout=settings.timeout, prefix=settings.prefix)
    if not isinstance(cold, ArchiveTarget):
        cold.close()
        raise BadInput(f"an archive is a SQL store (sqlite:///PATH, postgresql://...): {where!r}")
    return cold


@cli.command()
@click.argument("sessions", nargs=-1)
@click.option(
    "--to",
    "to",
    default=None,
    help=f"The archive: sqlite:///PATH or postgresql://... (default: --archive, {ARCHIVE_ENV}).",
)
@click.option(
    "--idle-after",
    type=Duration(),
    default=None,
    help="Archive every session with no append for this long (7d, 12h, 30m), instead of naming"
    " them; those that may not move yet are skipped, and said so.",
)
@click.option("--force", is_flag=True, help="Archive despite open attempts or live leases.")
@pass_settings
def archive(
    settings: Settings,
    sessions: tuple[str, ...],
    to: str | None,
    idle_after: float | None,
    force: bool,
) -> None:
    """Move finished sessions from Redis to a SQL archive (spec 3.10).

    Each session is copied with its streams, versions, cursors, event ids and append_id records,
    verified there, then removed from Redis but for a tombstone naming the archive. A crash at
    any step loses nothing; running the command again finishes the job. Read archived sessions
    with --archive (or LEDGER_BUS_ARCHIVE) naming the same store.
    """
    # The [sql] extra's: loaded by the commands that move sessions to an archive alone.
    from ledger_bus.operations.archiving import archive_idle, archive_session  # noqa: PLC0415

    if bool(sessions) == (idle_after is not None):
        raise BadInput("name the sessions to archive, or give --idle-after; not both")
    cold = open_archive(settings, to)
    hot = settings.store()
    try:
        if idle_after is None:
            for session in sessions:
                show_record(settings, archive_session(hot, cold, session, force=force).to_dict())
            return
        for record in archive_idle(hot, cold, idle_after, force=force):
            show_record(settings, record)
    finally:
        cold.close()


@cli.command()
@click.argument("sessions", nargs=-1)
@click.option(
    "--top",
    type=click.IntRange(min=1),
    default=20,
    show_default=True,
    help="Without SESSION: the sessions taking the most, this many.",
)
@pass_settings
def du(settings: Settings, sessions: tuple[str, ...], top: int) -> None:
    """Memory each session takes in Redis, by kind of key (MEMORY USAGE, sampled).

    Without SESSION, every session in the index is measured and the largest are shown; the
    title says how full the server is. `log` is the events themselves; `streams` their indexes;
    `append_ids` what idempotency keeps; `attempts` open attempts and tools declared safe;
    `artifacts` the large fields kept apart (spec 3.11).
    """
    store = settings.store()
    if not isinstance(store, ServerAdmin):
        raise BadInput(f"du measures Redis memory; --url names {settings.url!r}")
    # Each named, by its own name or by the id its framework knows (exit 6 for none)
    named = [settings.named(session)[1] for session in sessions]
    names = named or [s for s, _ in store.sessions()]
    sizes: dict[str, dict[str, int]] = {}
    for start in range(0, len(names), 200):  # two round trips per 200 sessions
        sizes.update(store.memory_of(names[start : start + 200]))
    ranked = sorted(sizes.items(), key=lambda item: -sum(item[1].values()))
    if not sessions:
        ranked = ranked[:top]
    rows = [
        {"session": session, "bytes": sum(kinds.values()), **kinds} for session, kinds in ranked
    ]
    memory = store.memory_info()
    title = f"{len(names)} sessions"
    if memory is not None:
        used, limit = memory
        title += f"; redis uses {used:,} bytes" + (f" of {limit:,}" if limit else " (no maxmemory)")
    show_rows(settings, rows, title)


@cli.command()
@click.argument("session")
@click.argument("stream")
@click.option(
    "--keep", type=click.IntRange(min=1), default=None, help="Keep at least the newest N events."
)
@click.option(
    "--dedup-window",
    type=Duration(),
    default=None,
    help="How long a trimmed append's append_id still deduplicates a retry (default 1d).",
)
@click.option("--off", is_flag=True, help="Unbounded again (what was trimmed stays trimmed).")
@pass_settings
def bound(
    settings: Settings,
    session: str,
    stream: str,
    keep: int | None,
    dedup_window: float | None,
    off: bool,
) -> None:
    """Declare a stream bounded (spec 3.12), or say what it keeps (neither --keep nor --off).

    From its next append on, a bounded stream keeps its newest N events, trimming older appends
    whole: for checkpoints, of which the newest alone matters. The stream need not exist yet.
    """
    ref = StreamId(session, stream)
    store = settings.store()
    if off and (keep is not None or dedup_window is not None):
        raise BadInput("--off lifts the bound: give it alone")
    if keep is None and dedup_window is not None:
        raise BadInput("--dedup-window goes with --keep")
    if off:
        store.bound_stream(ref, None)
    elif keep is not None:
        window = DEFAULT_DEDUP_WINDOW_MS if dedup_window is None else int(dedup_window * 1000)
        store.bound_stream(ref, keep, window)
    found = store.stream_bound(ref)
    show_record(
        settings,
        {
            "session": session,
            "stream": stream,
            "keep": None if found is None else found.keep,
            "dedup_window_ms": None if found is None else found.dedup_window_ms,
        },
    )
