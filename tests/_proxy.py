"""A loopback TCP proxy that can reset every connection it carries, to lose a reply in flight."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading


class ResettingProxy:
    """Forwards 127.0.0.1:<port> to ``upstream``; :meth:`reset_all` aborts every open connection
    with a TCP RST (SO_LINGER 0), as a dying load balancer or NAT would."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self._upstream = upstream
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, name="proxy-accept", daemon=True).start()

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self._upstream)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._socks += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), name="proxy-pump", daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def reset_all(self) -> None:
        with self._lock:
            socks, self._socks = self._socks, []
        for s in socks:
            with contextlib.suppress(OSError):
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                # close() alone would wait for the pump blocked in recv() on this
                # socket (the kernel keeps it open until then); shutdown wakes it.
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def close(self) -> None:
        self._listener.close()
        self.reset_all()
