"""A TCP proxy that can cut every connection and refuse new ones for a while: a database outage.

Used by the outage tests and by ``benchmarks/fault_matrix.py``.
"""

from __future__ import annotations

import socket
import threading
import time


class OutageProxy:
    """Forward ``127.0.0.1:<port>`` to ``target``; :meth:`outage` drops all traffic for some seconds."""

    def __init__(self, target: tuple[str, int]):
        self.target = target
        self.port = self._free_port()
        self._up = threading.Event()
        self._closed = False
        self._ended = threading.Event()  # set by close(): an outage in progress ends at once
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._start_listening()
        threading.Thread(target=self._accept_loop, daemon=True).start()

    @staticmethod
    def _free_port() -> int:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    def _start_listening(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        listener.settimeout(0.2)
        self._listener = listener
        self._up.set()

    def _accept_loop(self) -> None:
        while not self._closed:
            if not self._up.is_set():
                time.sleep(0.05)
                continue
            try:
                client, _ = self._listener.accept()
            except (TimeoutError, OSError):
                continue
            try:
                server = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            client.settimeout(None)
            server.settimeout(None)  # an idle database connection stays open
            with self._lock:
                if not self._up.is_set():  # an outage began while it connected: it is cut with the rest
                    for s in (client, server):
                        s.close()
                    continue
                self._conns += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            # shut both down before closing: a close() alone neither wakes the other direction's thread,
            # blocked in recv() on the socket, nor (with that recv holding the socket) sends the FIN, so
            # a connection its client closed stayed open to the server, its transaction's locks held
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def outage(self, seconds: float) -> None:
        """Close every connection and refuse new ones for ``seconds`` (or until :meth:`close`), then accept again."""
        with self._lock:
            self._up.clear()
        self._listener.close()
        with self._lock:
            conns, self._conns = self._conns, []
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)  # wakes the pipe thread blocked in recv()
            except OSError:  # already shut or reset by its peer: closed all the same
                pass
            s.close()
        self._ended.wait(seconds)
        if not self._closed:
            self._start_listening()

    def close(self) -> None:
        self._closed = True
        self._ended.set()
        self._up.clear()
        if self._listener is not None:
            self._listener.close()
