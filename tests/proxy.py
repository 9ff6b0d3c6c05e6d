"""A loopback TCP proxy that can lose a reply: it forwards a request, then cuts the connection."""

from __future__ import annotations

import contextlib
import socket
import threading

from ledger_bus.server import free_port


class DropProxy:
    """Forwards 127.0.0.1:port to a target; `drop_next_reply_to(marker)` arms one fault."""

    def __init__(self, target_port: int):
        self.target_port = target_port
        self.port = free_port()
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._marker: bytes | None = None
        self._lock = threading.Lock()
        self.dropped = 0
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def drop_next_reply_to(self, marker: bytes) -> None:
        with self._lock:
            self._marker = marker

    def _take_marker(self, chunk: bytes) -> bool:
        with self._lock:
            if self._marker is not None and self._marker in chunk:
                self._marker = None
                return True
            return False

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            cut = threading.Event()
            for target, args in (
                (self._pump_requests, (client, upstream, cut)),
                (self._pump_replies, (upstream, client, cut)),
            ):
                threading.Thread(target=target, args=args, daemon=True).start()

    def _pump_requests(
        self, client: socket.socket, upstream: socket.socket, cut: threading.Event
    ) -> None:
        with contextlib.suppress(OSError):
            while chunk := client.recv(65536):
                if self._take_marker(chunk):
                    cut.set()  # before the server can answer, so its reply is never forwarded
                upstream.sendall(chunk)

    def _pump_replies(
        self, upstream: socket.socket, client: socket.socket, cut: threading.Event
    ) -> None:
        with contextlib.suppress(OSError):
            while chunk := upstream.recv(65536):
                if cut.is_set():
                    # The server has executed the request; its reply is lost with the connection.
                    self.dropped += 1
                    break
                client.sendall(chunk)
        for sock in (client, upstream):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def close(self) -> None:
        self._closed = True
        self._listener.close()
