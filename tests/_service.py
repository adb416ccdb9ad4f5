"""Serving a test store in-process, and driving the async client from synchronous tests."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dedupstore import DedupStore
from dedupstore.client import AsyncDedupClient, DedupClient
from dedupstore.server import Server

#: The authorities the conformance tests run against.
KINDS = ("embedded", "sync", "async")


@contextmanager
def served(store: DedupStore, **kwargs: Any) -> Iterator[Server]:
    """``store`` served on an ephemeral loopback port until the block ends (the store stays open)."""
    server = Server(store, listen="127.0.0.1:0", **kwargs)
    server.start()
    try:
        yield server
    finally:
        server.stop(grace=1)


class AsyncBridge:
    """An ``AsyncDedupClient`` behind synchronous methods: its own event loop runs in a thread,
    so the very same test body drives the embedded store, the sync client and the async client."""

    def __init__(self, make: Callable[[], AsyncDedupClient]) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="async-client-loop", daemon=True)
        self._thread.start()

        async def create() -> AsyncDedupClient:
            return make()  # the channel binds to the loop it is created in

        self.client = self.run(create())

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.client, name)
        if not inspect.iscoroutinefunction(attr):
            return attr
        return lambda *args, **kwargs: self.run(attr(*args, **kwargs))

    def close(self) -> None:
        self.run(self.client.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()


@contextmanager
def authority(kind: str, store: DedupStore, **client_kwargs: Any) -> Iterator[Any]:
    """The store itself, or a sync or async client of a server over it."""
    if kind == "embedded":
        yield store
        return
    with served(store) as server:
        if kind == "sync":
            client = DedupClient(server.target, **client_kwargs)
            try:
                yield client
            finally:
                client.close()
        else:
            bridge = AsyncBridge(lambda: AsyncDedupClient(server.target, **client_kwargs))
            try:
                yield bridge
            finally:
                bridge.close()


def make_store_dir(tmp_path: Path, namespace: str) -> Path:
    """A closed store with ``namespace`` (5-minute lease), for a ``dedupstore serve`` subprocess."""
    path = tmp_path / "served"
    with DedupStore.open(path) as s:
        s.ensure_namespace(namespace, horizon="1h", lease="5m")
    return path


def serve_process(path: Path, listen: str, *args: str, **env: str) -> tuple[subprocess.Popen[str], str]:
    """``dedupstore serve`` in a subprocess; returns it and the address it reported when ready."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "dedupstore", "serve", "--path", str(path), "--listen", listen, "--json", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **env},
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        _, err = proc.communicate(timeout=60)
        raise AssertionError(f"serve did not start: {err}")
    return proc, json.loads(line)["listen"]


def stop_process(proc: subprocess.Popen[str], signalled: bool = False) -> tuple[int, str, str]:
    """SIGTERM (unless ``signalled`` already, or it has exited), then its exit code, stdout and stderr."""
    if not signalled and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    return proc.returncode, out, err
