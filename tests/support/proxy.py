"""A loopback TCP proxy for fault tests: it can lose a reply, delay every byte as a link between
hosts does, and be pointed at another server (a failover behind a fixed address)."""

from __future__ import annotations

import contextlib
import queue
import socket
import threading
import time

from ledger_bus.demo.server import free_port


class DropProxy:
    """Forwards 127.0.0.1:port to a target.

    `drop_next_reply_to(marker)` arms one fault: the request holding `marker` reaches the server,
    its reply is lost with the connection. `delay_s` holds every chunk that long in each direction;
    `retarget(port)` cuts every connection, with what it still held, and sends new ones elsewhere.
    """

    def __init__(self, target_port: int, delay_s: float = 0.0):
        self.target_port = target_port
        self.delay_s = delay_s
        self.port = free_port()
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._marker: bytes | None = None
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        self._senders: dict[socket.socket, queue.Queue[tuple[float, bytes] | None]] = {}
        self.dropped = 0
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def drop_next_reply_to(self, marker: bytes) -> None:
        with self._lock:
            self._marker = marker

    def retarget(self, port: int) -> None:
        """Send new connections to `port`; cut the open ones, losing what they held in flight."""
        with self._lock:
            self.target_port = port
            cut, self._open = self._open, []
        for sock in cut:
            _shut(sock)

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
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                _shut(client)
                continue
            with self._lock:
                self._open += [client, upstream]
            cut = threading.Event()
            for target, args in (
                (self._pump_requests, (client, upstream, cut)),
                (self._pump_replies, (upstream, client, cut)),
            ):
                threading.Thread(target=target, args=args, daemon=True).start()

    def _sender(self, out: socket.socket) -> queue.Queue[tuple[float, bytes] | None]:
        """A queue whose chunks reach `out` delay_s after they were put; None closes `out` once
        what came before it is sent. Cutting `out` loses what the queue still holds."""
        chunks: queue.Queue[tuple[float, bytes] | None] = queue.Queue()

        def send() -> None:
            with contextlib.suppress(OSError):
                while (item := chunks.get()) is not None:
                    due, chunk = item
                    time.sleep(max(0.0, due - time.monotonic()))
                    out.sendall(chunk)
            _shut(out)

        threading.Thread(target=send, daemon=True).start()
        return chunks

    def _pump_requests(
        self, client: socket.socket, upstream: socket.socket, cut: threading.Event
    ) -> None:
        with contextlib.suppress(OSError):
            while chunk := client.recv(65536):
                if self._take_marker(chunk):
                    cut.set()  # before the server can answer, so its reply is never forwarded
                self._send(upstream, chunk)
        self._send(upstream, None)

    def _pump_replies(
        self, upstream: socket.socket, client: socket.socket, cut: threading.Event
    ) -> None:
        with contextlib.suppress(OSError):
            while chunk := upstream.recv(65536):
                if cut.is_set():
                    # The server has executed the request; its reply is lost with the connection.
                    self.dropped += 1
                    break
                self._send(client, chunk)
        self._send(client, None)
        _shut(upstream)

    def _send(self, out: socket.socket, chunk: bytes | None) -> None:
        """Forward a chunk, at once or delay_s later in order; None: the direction has ended."""
        if not self.delay_s:
            if chunk is None:
                _shut(out)
            else:
                out.sendall(chunk)
            return
        with self._lock:
            sender = self._senders.get(out)
            if sender is None:
                sender = self._senders[out] = self._sender(out)
        sender.put(None if chunk is None else (time.monotonic() + self.delay_s, chunk))

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        self.retarget(self.target_port)


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
