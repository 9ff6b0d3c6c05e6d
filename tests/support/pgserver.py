"""A private PostgreSQL in a temp dir, from the system's binaries: for tests and benchmarks.

It listens on a free loopback port with trust authentication, owned by the `postgres` user when
run as root (PostgreSQL refuses to run as root), and is removed with its data when closed.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

import psycopg

from ledger_bus.demo.server import free_port, start_on_a_free_port
from ledger_bus.model.errors import BackendUnavailable


class NoPostgres(BackendUnavailable):
    """Raised when no PostgreSQL server binaries are installed."""


def postgres_bin() -> str:
    """The directory of the newest installed PostgreSQL's initdb and postgres."""
    found = shutil.which("initdb")
    if found:
        return os.path.dirname(os.path.realpath(found))
    versions = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda path: int(path.split("/")[-3]) if path.split("/")[-3].isdigit() else 0,
    )
    if not versions:
        raise NoPostgres(
            "no PostgreSQL binaries (initdb); install them: `apt-get install postgresql`"
        )
    return os.path.dirname(versions[-1])


class LocalPostgres:
    """initdb, then postgres on 127.0.0.1:`port`; `url` names its database `ledger`."""

    def __init__(
        self, port: int | None = None, fsync: bool = True, pick_port: Callable[[], int] = free_port
    ):
        # As LocalServer's: a port picked here is picked again if it is lost before the bind.
        self._pick_port = None if port else pick_port
        self.port = port or pick_port()
        self.fsync = fsync
        self.bin = postgres_bin()
        self.directory = tempfile.mkdtemp(prefix="ledger-bus-pg-")
        self.data = os.path.join(self.directory, "data")
        self.proc: subprocess.Popen[bytes] | None = None
        self._user: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(self.directory, "postgres", "postgres")
            self._user = ["runuser", "-u", "postgres", "--"]

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/ledger"

    def _run(self, *args: str) -> None:
        done = subprocess.run(
            [*self._user, *args], capture_output=True, text=True, check=False, cwd=self.directory
        )
        if done.returncode:
            raise BackendUnavailable(f"{os.path.basename(args[0])} failed: {done.stderr.strip()}")

    def start(self, wait: float = 30.0) -> LocalPostgres:
        return start_on_a_free_port(
            lambda: self._start(wait),
            [Path(self.directory, "postgres.log")],
            self._pick_port,
            lambda port: setattr(self, "port", port),
        )

    def _start(self, wait: float) -> LocalPostgres:
        if not os.path.exists(self.data):
            self._run(
                os.path.join(self.bin, "initdb"),
                "-D",
                self.data,
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
            )
        options = [
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            f"port={self.port}",
            "-c",
            f"unix_socket_directories={self.directory}",
            "-c",
            f"fsync={'on' if self.fsync else 'off'}",
            "-c",
            "max_connections=200",
        ]
        with open(os.path.join(self.directory, "postgres.log"), "ab") as log:
            self.proc = subprocess.Popen(
                [*self._user, os.path.join(self.bin, "postgres"), "-D", self.data, *options],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + wait
        while True:
            try:
                self._create_database()
                self._pick_port = None  # answered: restarts keep this port
                return self
            except psycopg.OperationalError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise BackendUnavailable(
                        f"postgres did not start on port {self.port}: {self._log_tail()}"
                    ) from None
                time.sleep(0.1)

    def _create_database(self) -> None:
        dsn = f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres connect_timeout=2"
        with psycopg.connect(dsn, autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = 'ledger'").fetchone()
            if not exists:
                conn.execute("CREATE DATABASE ledger")

    def _log_tail(self) -> str:
        try:
            with open(os.path.join(self.directory, "postgres.log"), encoding="utf-8") as log:
                lines = log.read().strip().splitlines()
        except OSError:
            return "no log"
        return " | ".join(lines[-3:])

    def _postmaster(self) -> int | None:
        """The server's own pid, from its lock file: under runuser it is not our child."""
        try:
            with open(os.path.join(self.data, "postmaster.pid"), encoding="utf-8") as lock:
                return int(lock.readline())
        except (OSError, ValueError):
            return None

    def _signal(self, signum: int, wait: float) -> bool:
        """Send the postmaster `signum`; True once it is gone within `wait` seconds."""
        pid = self._postmaster()
        if pid is None:
            return True
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            return True
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return True
            time.sleep(0.05)
        return False

    def kill(self) -> None:
        """SIGKILL the server and every process of it, as a crash of its host would; `start()`
        brings it back on its data."""
        pid = self._postmaster()
        if pid is not None:
            for child in _children(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child, signal.SIGKILL)
        self._signal(signal.SIGKILL, 30)
        if self.proc is not None:
            self.proc.wait(timeout=30)
        # Its backends see the postmaster gone and exit; a new postmaster waits for them.
        time.sleep(0.5)

    def kill_postmaster(self) -> None:
        """SIGKILL the postmaster alone, as the OOM killer would: its backends find it gone and
        exit on their own; `start()` brings it back once they have."""
        pid = self._postmaster()
        children = _children(pid) if pid is not None else []
        self._signal(signal.SIGKILL, 30)
        if self.proc is not None:
            self.proc.wait(timeout=30)
        deadline = time.monotonic() + 30
        while any(_alive(child) for child in children) and time.monotonic() < deadline:
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        if not self._signal(signal.SIGINT, 30):  # fast shutdown
            self._signal(signal.SIGKILL, 30)
        self.proc.wait(timeout=30)

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> LocalPostgres:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (a postmaster's backends and workers)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(entry))
    return found
