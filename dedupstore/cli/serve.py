"""``dedupstore serve``: share one store over gRPC (docs/service.md, docs/cli/serve.md)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from typing import Any

from dedupstore.cli import EXIT_OK, UsageError, add_json_flag, add_store_thread_flags, store_thread_options
from dedupstore.cli.inspect import parse_whole
from dedupstore.errors import StoreAlreadyOpenError, StoreFormatError
from dedupstore.layout import DURABILITY
from dedupstore.units import parse_duration

#: Test-only fault injection (docs/service.md, "Test hooks"); never set it in production.
TEST_HOOK_ENV = "DEDUPSTORE_TEST_HOOK"


def register(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = verbs.add_parser(
        "serve",
        help="serve a store over gRPC (service dedupstore.v1.DedupStore, health, reflection)",
        description=(
            "Serve the store at --path to clients on other hosts: service dedupstore.v1.DedupStore (Claim, "
            "ClaimBatch, Complete, Release, Renew, Lookup, Stats), grpc.health.v1.Health and server reflection. "
            "Runs until SIGTERM or SIGINT, then health goes NOT_SERVING, new calls are refused, in-flight calls "
            "get --grace to finish and the store is closed."
        ),
    )
    parser.add_argument("--path", required=True, metavar="DIR", help="the store directory")
    parser.add_argument("--create", action="store_true", help="create the store if it does not exist")
    parser.add_argument(
        "--listen", default="127.0.0.1:7411", metavar="HOST:PORT",
        help="address to listen on (default 127.0.0.1:7411; port 0 picks a free port)",
    )
    parser.add_argument("--token-file", metavar="FILE", help="require 'authorization: Bearer <token in FILE>'")
    parser.add_argument("--tls-cert", metavar="PEM", help="TLS certificate chain (with --tls-key)")
    parser.add_argument("--tls-key", metavar="PEM", help="TLS private key (with --tls-cert)")
    parser.add_argument(
        "--insecure", action="store_true",
        help="allow a non-loopback --listen without --token-file (anyone who can connect can claim)",
    )
    parser.add_argument("--max-message-bytes", default="4194304", metavar="N", help="largest request (default 4 MiB)")
    parser.add_argument("--max-batch", default="10000", metavar="N", help="most keys per ClaimBatch (default 10000)")
    parser.add_argument("--workers", default="32", metavar="N", help="request threads (default 32)")
    parser.add_argument("--metrics-listen", metavar="HOST:PORT", help="serve Prometheus metrics at /metrics")
    parser.add_argument("--grace", default="10s", metavar="DURATION", help="time in-flight calls get on shutdown")
    parser.add_argument("--durability", default="sync", choices=sorted(DURABILITY), help="default: sync")
    add_store_thread_flags(
        parser, "CPUs the store's own threads are kept on, such as 1 or 2-3, away from the request threads' "
        "(default: anywhere; Linux)",
    )
    add_json_flag(parser)
    parser.set_defaults(run=run)


def _read(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise UsageError(f"{what} {path}: {exc.strerror}") from None


def _test_hook() -> Any:
    spec = os.environ.get(TEST_HOOK_ENV)
    if not spec:
        return None
    print(f"dedupstore: warning: {TEST_HOOK_ENV}={spec} is set: test-only fault injection is active", file=sys.stderr)
    if spec == "kill-after-commit":

        def kill(method: str) -> None:
            if method in ("Claim", "ClaimBatch"):
                os.kill(os.getpid(), signal.SIGKILL)  # the claim is committed; its reply is never sent

        return kill
    if spec.startswith("delay-after-commit="):
        delay = float(spec.partition("=")[2])
        return lambda method: time.sleep(delay)
    raise UsageError(f"{TEST_HOOK_ENV}={spec!r}: expected kill-after-commit or delay-after-commit=SECONDS")


def run(args: argparse.Namespace) -> int:
    # Imported here: the other verbs must work without the [server] extra.
    try:
        from dedupstore.server import Limits, Server, is_loopback, parse_listen, read_token_file
    except ImportError as exc:
        raise UsageError(f"serve needs the server extra (pip install 'dedupstore[server]'): {exc}") from None
    from dedupstore import DedupStore

    host, _ = parse_listen(args.listen)
    token = read_token_file(args.token_file) if args.token_file else None
    if (args.tls_cert is None) != (args.tls_key is None):
        raise UsageError("--tls-cert and --tls-key go together")
    tls = None
    if args.tls_cert is not None:
        tls = (_read(args.tls_cert, "--tls-cert"), _read(args.tls_key, "--tls-key"))
    if not is_loopback(host) and token is None and not args.insecure:
        raise UsageError(
            f"--listen {args.listen} is not a loopback address: anyone who can connect could claim and complete. "
            f"Pass --token-file (and --tls-cert/--tls-key), or --insecure to accept that"
        )
    limits = Limits(
        max_message_bytes=parse_whole(args.max_message_bytes, "--max-message-bytes", 1024),
        max_batch=parse_whole(args.max_batch, "--max-batch", 1),
    )
    workers = parse_whole(args.workers, "--workers", 1)
    threads = store_thread_options(args)
    grace = parse_duration(args.grace, what="--grace", allow_zero=True)
    hook = _test_hook()
    try:
        store = DedupStore.open(args.path, create=args.create, durability=args.durability, **threads)
    except (StoreFormatError, StoreAlreadyOpenError) as exc:
        hint = "" if args.create else " (pass --create to make a new store)"
        raise UsageError(f"{exc}{hint}") from None
    stop = threading.Event()
    received: list[str] = []

    def on_signal(signum: int, _frame: object) -> None:
        received.append(signal.Signals(signum).name)
        stop.set()

    with store:
        server = Server(
            store, listen=args.listen, token=token, tls=tls, limits=limits, workers=workers,
            metrics_listen=args.metrics_listen, after_commit=hook,
        )
        # Installed for the rest of the run: a second signal during shutdown
        # must not kill the process while it closes the store.
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, on_signal)
        try:
            server.start()
            ready = {
                "command": "serve",
                "path": str(store.path),
                "listen": server.target,
                "metrics": None if server.metrics_port is None else f"http://{host_for(args.metrics_listen)}:"
                f"{server.metrics_port}/metrics",
                "token": token is not None,
                "tls": tls is not None,
                "pid": os.getpid(),
            }
            if args.json:
                print(json.dumps(ready), flush=True)
            else:
                extra = f"; metrics on {ready['metrics']}" if ready["metrics"] else ""
                print(
                    f"dedupstore: serving {store.path} on {server.target} (token {'on' if token else 'off'}, "
                    f"TLS {'on' if tls else 'off'}){extra}",
                    flush=True,
                )
            while not stop.wait(0.5):
                pass
            server.stop(grace)
        finally:
            server.stop(0)
    print(f"dedupstore: stopped on {received[0] if received else 'request'}; store closed", flush=True)
    return EXIT_OK


def host_for(listen: str) -> str:
    host = listen.rpartition(":")[0]
    return host if host.startswith("[") or ":" not in host else f"[{host}]"
