"""The `ledger-bus` root command, its shared options, exit codes and output."""

from __future__ import annotations

import importlib
import os
import signal
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, Final, NoReturn

import click

import ledger_bus
from ledger_bus.agent.names import closest, find_session, named_sessions
from ledger_bus.model.environment import ARCHIVE_ENV, DEFAULT_URL, URL_ENV
from ledger_bus.model.errors import (
    BackendRefused,
    BackendUnavailable,
    DurabilityNotConfirmed,
    IdempotencyConflict,
    InvalidInput,
    LedgerError,
    NotFound,
    VersionConflict,
)
from ledger_bus.model.ids import check_name

if TYPE_CHECKING:
    from ledger_bus.store import EventStore

EXIT_OK: Final = 0
EXIT_REFUSED: Final = 1
EXIT_USAGE: Final = 2
EXIT_VERSION_CONFLICT: Final = 3
EXIT_IDEMPOTENCY_CONFLICT: Final = 4
EXIT_UNAVAILABLE: Final = 5
EXIT_NOT_FOUND: Final = 6
EXIT_NOT_CONFIRMED: Final = 7
EXIT_BACKEND_REFUSED: Final = 8
EXIT_AT_RISK: Final = 9  # doctor: the backend can lose data as it is set up
EXIT_INTERNAL: Final = 70  # sysexits' EX_SOFTWARE: a fault of ledger-bus itself, worth a report


def exit_code_for(err: LedgerError) -> int:
    """The documented exit code of a library error."""
    if isinstance(err, VersionConflict):
        return EXIT_VERSION_CONFLICT
    if isinstance(err, IdempotencyConflict):
        return EXIT_IDEMPOTENCY_CONFLICT
    if isinstance(err, BackendUnavailable):
        return EXIT_UNAVAILABLE
    if isinstance(err, BackendRefused):
        return EXIT_BACKEND_REFUSED
    if isinstance(err, NotFound):
        return EXIT_NOT_FOUND
    if isinstance(err, DurabilityNotConfirmed):
        return EXIT_NOT_CONFIRMED
    if isinstance(err, InvalidInput):
        return EXIT_USAGE
    return EXIT_REFUSED


# Control characters and the separators str.splitlines() breaks at, written as escapes.
_ESCAPES: Final = {
    code: f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
    for code in [*range(0x20), *range(0x7F, 0xA0), 0x2028, 0x2029]
}


def say(message: str) -> None:
    """One line on stderr, whatever the text holds: control characters and lone surrogates (from
    arguments that were not UTF-8) are escaped rather than breaking the line or the encoder."""
    line = " ".join(message.splitlines()).translate(_ESCAPES)
    sys.stderr.write(f"ledger-bus: {line}\n".encode("utf-8", "backslashreplace").decode("utf-8"))
    sys.stderr.flush()


def did_you_mean(name: str, known: Iterable[str], otherwise: str = "") -> str:
    """ "; did you mean a, b?" for the names closest to `name`, else `otherwise`."""
    found = closest(name, known)
    return f"; did you mean {', '.join(found)}?" if found else otherwise


class Failure(click.ClickException):
    """Raised to end a command with one plain line on stderr and a documented exit code."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code  # type: ignore[misc]  # click's is a class attribute

    def show(self, file: IO[Any] | None = None) -> None:
        say(self.format_message())


class BadInput(Failure):
    """Raised for invalid input (exit 2); nothing was written."""

    def __init__(self, message: str):
        super().__init__(message, EXIT_USAGE)


def refs_option(command: Callable[..., None]) -> Callable[..., None]:
    """--refs: print the fields kept as artifacts as their references (sha256, size, media
    type) instead of reading their values."""

    def remember(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
        settings = ctx.find_object(Settings)
        if value and settings is not None:
            settings.refs = True

    return click.option(
        "--refs",
        is_flag=True,
        expose_value=False,
        callback=remember,
        help="Fields kept as artifacts as their references, not their values.",
    )(command)


class LedgerGroup(click.Group):
    """Translates library errors into one line on stderr and the documented exit code.

    Its commands are loaded when used (`lazy`: command name -> the module that registers it),
    so that `ledger-bus --version` or a `tail` imports what it needs, not every command's
    dependencies."""

    lazy: dict[str, str] = {}  # noqa: RUF012  (set once, by ledger_bus.cli)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.lazy:
            importlib.import_module(self.lazy[cmd_name])  # registers it, by its decorator
        found = self.commands.get(cmd_name)
        if found is not None:
            output_after(found)  # once for each command: it looks before it adds
        return found

    def invoke(self, ctx: click.Context) -> object:
        try:
            done = super().invoke(ctx)
        except LedgerError as err:
            missing = ctx.obj.missing_ledger() if isinstance(ctx.obj, Settings) else None
            if isinstance(err, NotFound) and missing is not None:
                # Not found because the SQLite file --url names is not there: say that first.
                raise Failure(f"{missing}: {err}", EXIT_NOT_FOUND) from None
            raise Failure(str(err), exit_code_for(err)) from None
        except BrokenPipeError:
            # A reader that went away (`| head -1`) is how pipelines end, not an error; click
            # would make it exit 1. Point stdout at /dev/null so the final flush cannot fail.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise click.exceptions.Exit(EXIT_OK) from None
        if isinstance(ctx.obj, Settings):
            # A command that only read, from a SQLite file that is not there: what it printed
            # (an empty list, or nothing) would be as true of an empty ledger. Say where it
            # looked. A write made the file, and there is nothing to say.
            ctx.obj.note_missing_ledger(
                "taken for an empty ledger (a write creates the file, a read never does)"
            )
        return done


@dataclass
class Settings:
    url: str | None
    timeout: float
    prefix: str
    output: str
    durability: str | None = None
    archive: str | None = None
    refs: bool = False  # show artifacts as their references (spec 3.11), not their values
    _store: EventStore | None = None
    _noted: bool = False  # the note that the ledger file is not there, said once

    def store(self, *, patient: bool = False) -> EventStore:
        """The store at --url. A one-shot command finds out at once that nothing listens there
        (exit 5 within a second); `patient`, for the commands that run for long, keeps
        retrying with backoff instead."""
        if self._store is None:
            # The store, loaded by the first command that needs one: --help, --version and
            # usage errors never pay for it.
            from ledger_bus.store import connect  # noqa: PLC0415
            from ledger_bus.store.base import ServerAdmin  # noqa: PLC0415

            if (self.url or "").startswith("memory:"):
                # Each command is a process of its own: a memory store would start empty, and
                # what it wrote would be gone when the command ends.
                raise InvalidInput(
                    "memory:// lives inside one process, and each ledger-bus command is one of"
                    " its own: use a Redis URL (or the Python API for memory://)"
                )
            self._store = connect(
                self.url,
                timeout=self.timeout,
                prefix=self.prefix,
                durability=self.durability,
                archive=self.archive,
            )
            if not patient and isinstance(self._store, ServerAdmin):
                try:
                    self._store.check_contact()
                except LedgerError:
                    self._store.close()
                    self._store = None
                    raise
            self._store.resolve_artifacts = not self.refs
            if patient:  # it may read for long, before a writer makes the file: say so now
                self.note_missing_ledger("waiting for a write to make it")
        return self._store

    def missing_ledger(self) -> NotFound | None:
        """NotFound naming the SQLite file --url names, while no file is there (the store reads
        an empty ledger there and creates nothing); None for a store opened on anything else."""
        # Asked by name: the SQL store's module is loaded only by the commands on a SQL store.
        check = getattr(self._store, "missing_ledger", None)
        found: NotFound | None = check() if check is not None else None
        return found

    def note_missing_ledger(self, then: str) -> None:
        """One line on stderr, once, naming the SQLite file --url names when it is not there."""
        missing = None if self._noted else self.missing_ledger()
        if missing is not None:
            self._noted = True
            say(f"{missing}: {then}")

    def session(self, session_id: str) -> EventStore:
        """The store, once it is known to hold `session_id`, named exactly (what a command that
        deletes acts on): NotFound (exit 6) naming the sessions a framework knows by that id, or
        the closest sessions it does hold, instead of printing nothing as if all were well."""
        store = self.store()
        if not store.session_exists(session_id):
            self.not_archived(session_id)
            find_session(store, session_id, exact=True)
        return store

    def named(self, name: str) -> tuple[EventStore, str]:
        """The store and the session `name` names: that session, else the one session a
        framework knows by that id (an ADK session id, a LangGraph thread id: agent/names.py).
        NotFound (exit 6) naming each it may mean when there are several, else the closest."""
        store = self.store()
        try:
            if store.session_exists(name):
                return store, name
            self.not_archived(name)
        except InvalidInput:
            pass  # a thread id need not be a session id: its session's name is its digest
        try:
            return store, find_session(store, name)
        except NotFound:
            check_name(name, "session id")  # a name no session can have is bad input (exit 2)
            raise

    def awaited(self, name: str, *, patient: bool = True) -> tuple[EventStore, str]:
        """The store and the session a follower of `name` follows: that session, or the one a
        framework knows by that id, or, while neither holds an event, `name` itself, waited for
        (said on stderr). NotFound when `name` may mean several sessions."""
        store = self.store(patient=patient)
        check_name(name, "session id")  # a follower's session may be written: a name it can take
        if store.session_exists(name):
            return store, name
        meant = named_sessions(store, name)
        if len(meant) > 1:
            find_session(store, name)  # NotFound, naming each
        if meant:
            return store, meant[0]
        say(f"no session {name!r} yet: waiting for its first event")
        return store, name

    def not_archived(self, session_id: str) -> None:
        """NotFound (exit 6) naming where `session_id` went, when it was archived from here."""
        # The store's package: imported with the store (self.store()), never by this module's import
        from ledger_bus.store.families import ArchiveSource  # noqa: PLC0415

        store = self.store()
        archived = store.archive_state(session_id)[0] if isinstance(store, ArchiveSource) else None
        if archived is not None:
            raise NotFound(
                f"session {session_id!r} is archived in {archived}: read it with --archive"
                f" (or {ARCHIVE_ENV}) naming that store"
            )

    @property
    def as_table(self) -> bool:
        if self.output == "auto":
            return sys.stdout.isatty()
        return self.output == "table"


pass_settings = click.make_pass_decorator(Settings)

OUTPUTS: Final = click.Choice(["auto", "jsonl", "table"])


def _take_output(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    settings = ctx.find_object(Settings)
    if value is not None and settings is not None:
        settings.output = value


def output_after(command: click.Command) -> None:
    """Give `command` (every command under it, for a group) an -o/--output of its own, so that
    the output format goes after the command as well as before it (`ledger-bus tail s1 -o
    jsonl`); given both ways, the one after wins."""
    if isinstance(command, click.Group):
        for inner in command.commands.values():
            output_after(inner)
    elif not any("--output" in p.opts for p in command.params):
        command.params.append(
            click.Option(
                ["-o", "--output"],
                type=OUTPUTS,
                default=None,
                expose_value=False,
                callback=_take_output,
                help="auto, jsonl or table (as the option before the command).",
            )
        )


@click.group(cls=LedgerGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--url",
    envvar=URL_ENV,
    show_envvar=True,
    help="redis://, rediss://, unix://, redis+cluster://H:P,H2:P2/0,"
    " redis+sentinel://H:P,H2:P2/MASTER/DB,"
    f" sqlite:///PATH or postgresql://USER@HOST:PORT/DB (default {DEFAULT_URL});"
    " ?durability=replicas:1 and the like.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0.1),
    default=10.0,
    show_default=True,
    envvar="LEDGER_BUS_TIMEOUT",
    help="Seconds, retries included, before an unreachable backend is an error (exit 5).",
)
@click.option(
    "--prefix",
    default="lb",
    show_default=True,
    envvar="LEDGER_BUS_PREFIX",
    help="First part of every Redis key.",
)
@click.option(
    "--durability",
    default=None,
    envvar="LEDGER_BUS_DURABILITY",
    show_envvar=True,
    help="What an append waits for: local, replicas:N, aof or aof+replicas:N (default: the"
    " URL's ?durability=, else local). Not confirmed in time: exit 7.",
)
@click.option(
    "--archive",
    default=None,
    help=f"The SQL store sessions archived from this Redis live in, read through (sqlite:///PATH"
    f" or postgresql://...; env var: {ARCHIVE_ENV}).",
)
@click.option(
    "-o",
    "--output",
    type=OUTPUTS,
    default="auto",
    show_default=True,
    help="auto: a table on a terminal, JSONL otherwise (also after the command: tail s1 -o jsonl).",
)
@click.version_option(version=ledger_bus.__version__, package_name="ledger-bus")
@click.pass_context
def cli(
    ctx: click.Context,
    url: str | None,
    timeout: float,
    prefix: str,
    durability: str | None,
    archive: str | None,
    output: str,
) -> None:
    """A durable, append-only event log for multi-agent systems, on Redis Streams.

    Exit codes: 0 done; 1 refused by a rule; 2 bad usage or invalid input; 3 version conflict;
    4 idempotency conflict; 5 backend unreachable; 6 not found; 7 written on the primary,
    durability not confirmed in time (retry with the same append_id); 8 the backend refused
    (memory full, no permission); 9 doctor found that data can be lost; 70 internal error.
    """
    settings = Settings(
        url=url,
        timeout=timeout,
        prefix=prefix,
        output=output,
        durability=durability,
        archive=archive,
    )
    ctx.obj = settings
    ctx.call_on_close(lambda: settings._store.close() if settings._store else None)


def stop_on_sigterm() -> None:
    """Turn SIGTERM into KeyboardInterrupt, so long-running commands end the same way on both."""

    def handler(signum: int, frame: object) -> NoReturn:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)
