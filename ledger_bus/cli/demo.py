"""`ledger-bus demo`: launch the orchestrator and workers, kill one mid-call, show it live."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Final

import click
from rich.console import Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.table import Table

from ledger_bus.cli.app import (
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    Failure,
    Settings,
    cli,
)
from ledger_bus.cli.output import show_record
from ledger_bus.demo.agents import SLOW_TOOL
from ledger_bus.demo.server import LocalServer, NoServerBinary
from ledger_bus.model.ids import CURSOR_ZERO, cursor_ms
from ledger_bus.model.jsontext import format_time
from ledger_bus.operations.reconciler import FLAG_KIND
from ledger_bus.store import DEFAULT_URL, URL_ENV, RecordedEvent, connect
from ledger_bus.store.base import EventStore, ServerAdmin

DEMO_PREFIX: Final = "lb-demo"  # the demo's sessions stay apart from the ledger's own
SESSION_START: Final = "demo"


def _answers(url: str) -> bool:
    """Whether a Redis answers at `url`."""
    import redis  # noqa: PLC0415  (redis-py, loaded by the commands that use it: 80 ms a start)

    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except (redis.exceptions.RedisError, ValueError):
        return False


def find_or_start_redis(url: str | None, stack: ExitStack, private: bool) -> tuple[str, str]:
    """The Redis to use and where it came from: the URL named, the default one, or a private one.

    A URL the user named is used or reported unreachable, never replaced by a private server.
    """
    if url and not private:
        if not _answers(url):
            raise Failure(f"the Redis at {url} does not answer", EXIT_UNAVAILABLE)
        return url, f"the Redis at {url}"
    if not private and _answers(DEFAULT_URL):
        return DEFAULT_URL, f"the Redis at {DEFAULT_URL}"
    try:
        server = stack.enter_context(LocalServer(appendonly=True))
    except NoServerBinary as err:
        raise Failure(str(err), EXIT_UNAVAILABLE) from None
    return server.url, f"a private server ({os.path.basename(server.binary)}) in {server.directory}"


@dataclass
class DemoView:
    """What the live view shows, folded from the session's events."""

    events: list[RecordedEvent] = field(default_factory=list)
    tasks: dict[str, str] = field(default_factory=dict)
    calls: dict[str, str] = field(default_factory=dict)  # attempt -> state
    killed: str | None = None
    complete: bool = False
    flags: dict[str, RecordedEvent] = field(default_factory=dict)  # attempt -> the flag

    def add(self, event: RecordedEvent) -> None:
        self.events.append(event)
        kind = event.get("kind")
        if kind == "task.assigned":
            self.tasks[event["task_id"]] = "assigned"
        elif kind == "task.done":
            self.tasks[event["task_id"]] = f"done by {event['by']}"
        elif kind == "session.complete":
            self.complete = True
        elif kind == FLAG_KIND:
            self.flags[event["attempt_id"]] = event
        elif event.type == "tool_call":
            self.calls[str(event.attempt_id)] = f"{event.agent} running {event['tool']}"
        elif event.type == "tool_result":
            self.calls[str(event.attempt_id)] = f"{event.agent} {event['status']}"

    def render(self, session: str, height: int = 25, width: int = 80) -> RenderableType:
        """The view for a terminal of `height` x `width`: the footer (the kill and the flag, the
        point of the demo) is never cut off; the tasks get up to half of what it leaves, and
        the log of events the rest."""
        footer = self._footer()
        footer_lines = sum(max(1, -(-len(line) // max(width, 1))) for line in footer.split("\n"))
        # Each panel takes 3 lines of frame and header.
        room = max(2, height - footer_lines - 6 - 1)
        task_rows = min(len(self.tasks), max(1, room // 2))
        tasks = Table(box=None, header_style="bold")
        tasks.add_column("task", no_wrap=True)
        tasks.add_column("state", no_wrap=True, overflow="ellipsis")
        items = list(self.tasks.items())
        if len(items) > task_rows:  # the ones still to do first, then how many are done
            waiting = [(t, s) for t, s in items if not s.startswith("done")]
            done = len(items) - len(waiting)
            items = [*waiting[: task_rows - 1], ("…", f"{len(waiting)} to do, {done} done")]
        for task_id, state in items:
            tasks.add_row(task_id, state)
        log = Table(box=None, header_style="bold", expand=True)
        for column, min_width in (("at", 12), ("agent", 12), ("type", 11), ("what", None)):
            log.add_column(column, overflow="ellipsis", no_wrap=True, min_width=min_width)
        for event in self.events[-max(1, room - len(items)) :]:
            at = format_time(cursor_ms(event.cursor))[11:23]
            log.add_row(at, event.agent, event.type, event.summary(width))
        return Group(
            Panel(log, title=f"session {session}"),
            Panel(tasks, title="tasks"),
            footer,
        )

    def _footer(self) -> str:
        open_calls = [a for a, state in self.calls.items() if "running" in state]
        footer = f"{len(self.events)} events"
        if self.killed:
            footer += f"; {self.killed} was killed with SIGKILL mid-call"
        if open_calls:
            footer += f"; calls without a result: {', '.join(open_calls)}"
        for attempt, flag in self.flags.items():
            footer += (
                f"\nthe reconciler flagged {attempt} ({flag['tool']}, open"
                f" {flag['open_for_s']:.1f}s, its run's lease gone)"
            )
        return footer


def _spawn(role: str, session: str, arg: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "ledger_bus.demo.agents", role, session, arg],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


@cli.command()
@click.option("--workers", type=click.IntRange(2, 8), default=3, show_default=True)
@click.option("--tasks", type=click.IntRange(4, 100), default=8, show_default=True)
@click.option("--no-kill", is_flag=True, help="Let every worker live.")
@click.option("--live/--no-live", default=None, help="A live view (default: on a terminal).")
@click.option("--private", is_flag=True, help="Start a private server even if one answers.")
@click.option(
    "--clean", is_flag=True, help="Remove the sessions earlier demos left (demo-*), and stop."
)
@click.pass_context
def demo(
    ctx: click.Context,
    workers: int,
    tasks: int,
    no_kill: bool,
    live: bool | None,
    private: bool,
    clean: bool,
) -> None:
    """An orchestrator and workers in separate processes, coordinating only through the ledger.

    Its sessions are named demo-DATE-TIME-PID and kept under the key prefix lb-demo (unless
    --prefix names another), apart from the ledger's own; --clean removes them.
    """
    settings = ctx.find_object(Settings)
    assert settings is not None
    source = ctx.find_root().get_parameter_source("prefix")
    if source is click.core.ParameterSource.DEFAULT:
        settings.prefix = DEMO_PREFIX
    if clean:
        _clean(settings)
        return
    live = sys.stdout.isatty() if live is None else live
    with ExitStack() as stack:
        url, origin = find_or_start_redis(settings.url, stack, private)
        click.echo(f"ledger-bus demo on {origin}", err=True)
        session = f"{SESSION_START}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
        env = {**os.environ, URL_ENV: url, "LEDGER_BUS_PREFIX": settings.prefix}
        store = stack.enter_context(connect(url, prefix=settings.prefix))
        procs = {
            f"worker-{i + 1}": _spawn("worker", session, f"worker-{i + 1}", env)
            for i in range(workers)
        }
        stack.callback(_stop_all, procs)
        time.sleep(0.5)  # let the workers join the group before the first task
        orchestrator = _spawn("orchestrator", session, str(tasks), env)
        heartbeat = os.path.join(stack.enter_context(tempfile.TemporaryDirectory()), "hb")
        reconciler = _spawn_reconciler(session, heartbeat, env)
        stack.callback(_stop_all, {"orchestrator": orchestrator, "reconciler": reconciler})
        watched = Watched(store, session, procs, live=live, kill=not no_kill)
        watched.run()
        board = watched.board
        orchestrator.wait(timeout=30)
        # Counted in the ledger, not in the view: the view stops reading once the demo is
        # done, and the runs' ends (and the reconciler's flag) may land after that.
        recorded = store.session_info(session).events
    _report(session, settings, board, url, private, recorded)
    if not board.complete:
        raise Failure("the demo did not complete in time", 1)


def _spawn_reconciler(session: str, heartbeat: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ledger_bus",
            "reconcile",
            "--session",
            session,
            "--grace",
            "1",
            "--interval",
            "0.5",
            "--heartbeat",
            heartbeat,
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


class Watched:
    """The demo's session as it runs: its events read into the board, shown live or a line
    each, and one worker killed with SIGKILL in the middle of a slow call (unless not `kill`)."""

    def __init__(
        self,
        store: EventStore,
        session: str,
        procs: dict[str, subprocess.Popen[bytes]],
        *,
        live: bool,
        kill: bool,
    ):
        self.store = store
        self.session = session
        self.procs = procs
        self.live = live
        self.kill = kill
        self.board = DemoView()
        self.kill_at: tuple[float, str] | None = None
        self.cursor = CURSOR_ZERO
        self.deadline = time.monotonic() + 180

    def run(self) -> None:
        """Until the tasks are done and the killed call flagged, or three minutes have gone."""
        if not self.live:
            while not self.finished():
                self.step()
            return
        with Live(refresh_per_second=8) as view:
            while not self.finished():
                self.step()
                size = view.console.size
                view.update(self.board.render(self.session, size.height, size.width))

    def finished(self) -> bool:
        # Done when the tasks are, and the killed worker's call has been flagged.
        board = self.board
        flagged = board.killed is None or any(
            f["run_id"].startswith(board.killed) for f in board.flags.values()
        )
        return (board.complete and flagged) or time.monotonic() > self.deadline

    def step(self) -> None:
        board = self.board
        for event in self.store.wait_session(self.session, self.cursor, timeout_ms=200):
            self.cursor = event.cursor
            board.add(event)
            if not self.live:
                click.echo(f"{event.agent:>13} {event.type:<11} {event.summary(100)}")
            slow = event.type == "tool_call" and event.get("tool") == SLOW_TOOL
            if slow and self.kill and board.killed is None and self.kill_at is None:
                self.kill_at = (time.monotonic() + 0.8, event.agent)
        if self.kill_at and time.monotonic() >= self.kill_at[0]:
            self.procs[self.kill_at[1]].send_signal(signal.SIGKILL)
            board.killed = self.kill_at[1]
            self.kill_at = None
            if not self.live:
                click.echo(f"{'demo':>13} {'SIGKILL':<11} {board.killed}, in the middle of a call")


def _clean(settings: Settings) -> None:
    admin = settings.store()
    if not isinstance(admin, ServerAdmin):
        raise Failure("the demo runs on Redis: name one with --url", EXIT_USAGE)
    removed = admin.purge_sessions(f"{SESSION_START}-")
    show_record(settings, {"prefix": settings.prefix, "removed": len(removed)})


def _stop_all(procs: dict[str, subprocess.Popen[bytes]]) -> None:
    for proc in procs.values():
        if proc.poll() is None:
            proc.terminate()
    for proc in procs.values():
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def _report(
    session: str, settings: Settings, board: DemoView, url: str, private: bool, recorded: int
) -> None:
    done = sum(state.startswith("done") for state in board.tasks.values())
    unresolved = [a for a, state in board.calls.items() if "running" in state]
    lines = [
        "",
        f"session {session}: {recorded} events, {done}/{len(board.tasks)} tasks done",
    ]
    if board.killed:
        lines.append(
            f"{board.killed} was killed mid-call; another worker took over its task."
            f" Its call stays requested without a result: {', '.join(unresolved) or 'none'}"
        )
    for attempt in board.flags:
        lines.append(
            f"the reconciler flagged {attempt} as unresolved once the run's lease expired:"
            " nobody knows whether that call took effect, and nothing will run it again."
        )
    prefix = "" if settings.prefix == "lb" else f" --prefix {settings.prefix}"
    base = f"{_program()} --url {url}{prefix}"
    lines += [
        "inspect it:",
        f"  {base} ui   (the web view of the demo's sessions)",
        f"  {base} tail {session} -n 20",
        f"  {base} inspect {session}",
        f"  {base} export {session} conversation.jsonl",
        f"  {base} unresolved {session}",
        f"  {base} scan {session} | jq -c 'select(.type == \"tool_call\")'",
    ]
    if private or (url != DEFAULT_URL and not settings.url):
        lines.append(
            "(the private server stopped with the demo; name a Redis with --url to keep"
            " the session)"
        )
    else:
        lines.append(f"remove the demo's sessions: {_program()} --url {url} demo --clean")
    click.echo("\n".join(lines))


def _program() -> str:
    """How to run this command again from here: `ledger-bus` when that is on PATH, else the path
    it was started by (`.venv/bin/ledger-bus` after `make demo`), else through Python."""
    started = sys.argv[0]
    on_path = shutil.which("ledger-bus")
    if on_path and os.path.realpath(on_path) == os.path.realpath(started):
        return "ledger-bus"
    if os.path.basename(started) == "ledger-bus" and os.path.exists(started):
        return started
    return f"{sys.executable} -m ledger_bus"
