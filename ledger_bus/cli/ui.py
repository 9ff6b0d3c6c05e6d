"""`ledger-bus ui`: serve the web view of the configured store."""

from __future__ import annotations

import socket

import click

from ledger_bus.access.limits import Limits
from ledger_bus.access.tokens import TokenFile
from ledger_bus.cli.app import (
    BadInput,
    Settings,
    cli,
    pass_settings,
    say,
)
from ledger_bus.model.environment import is_loopback, without_password
from ledger_bus.model.errors import InvalidInput
from ledger_bus.store import DEFAULT_URL


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port", type=click.IntRange(0, 65535), default=8765, show_default=True, help="Port."
)
@click.option(
    "--tokens",
    "tokens_file",
    help="The tokens file (ledger-bus token makes one): every request needs one of its tokens. "
    "Needed beyond loopback.",
)
@click.option(
    "--max-streams",
    type=click.IntRange(1),
    default=Limits.streams,
    show_default=True,
    help="Live event streams one token may hold open at once (without --tokens: all of them).",
)
@pass_settings
def ui(settings: Settings, host: str, port: int, tokens_file: str | None, max_streams: int) -> None:
    """A live, read-only web view of the ledger: sessions, timelines, open calls, groups.

    Listens on loopback unless --host says otherwise, and there answers only requests for a
    local host name from no other site's page; beyond loopback only with --tokens, and then
    each request shows the sessions its token may read (any role's token may look). A token
    taken out of the file ends the live streams it opened, at their next event or ping.
    Needs the `ui` extra (pip install 'ledger-bus[ui]').
    """
    # The [ui] extra: loaded here, so that its absence is said as one line and exit 2.
    try:
        import uvicorn  # noqa: PLC0415

        from ledger_bus.ui.app import create_app  # noqa: PLC0415
    except ImportError as err:
        raise BadInput(f"ledger-bus ui needs {err.name}: pip install 'ledger-bus[ui]'") from None
    if settings.url is not None and settings.url.startswith("memory:"):
        raise BadInput("memory:// lives inside one process: give the view a Redis or SQL URL")
    if tokens_file is None and not is_loopback(host):
        raise BadInput(
            f"{host} is beyond this machine: give --tokens FILE (ledger-bus token makes one)"
        )
    tokens = None
    if tokens_file is not None:
        try:
            tokens = TokenFile(tokens_file)
        except InvalidInput as err:
            raise BadInput(str(err)) from None
    # Here, not at the top: the asyncio store imports redis-py (80 ms of a start), which the
    # other commands' --help never needs.
    from ledger_bus.agent import aio  # noqa: PLC0415  (see above)

    async def open_store() -> aio.AsyncStore:
        return await aio.connect(
            settings.url, timeout=settings.timeout, prefix=settings.prefix, archive=settings.archive
        )

    location = without_password(settings.url or DEFAULT_URL)
    if settings.prefix != "lb":  # which ledger of that server (the demo's is lb-demo)
        location += f" · prefix {settings.prefix}"
    app = create_app(
        open_store, location, tokens=tokens, host=host, limits=Limits(streams=max_streams)
    )
    # Bound here, before the address is printed: a port taken is one line and exit 2, not the
    # address followed by the server's own error.
    listener = _listen(host, port)
    door = f", each request with a token of {tokens_file}" if tokens_file else ""
    say(f"the web view is on http://{host}:{listener.getsockname()[1]}/ for {location}{door}")
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    server.run(sockets=[listener])


def _listen(host: str, port: int) -> socket.socket:
    """A listening socket on host:port; BadInput (exit 2) when it cannot be had."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        listener = socket.socket(family, kind, proto)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind(address)
            listener.listen(2048)
        except OSError:
            listener.close()
            raise
    except OSError as err:
        raise BadInput(f"cannot listen on {host}:{port}: {err.strerror or err}") from None
    listener.set_inheritable(True)
    return listener
