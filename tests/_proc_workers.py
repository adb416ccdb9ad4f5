"""Code that runs in spawned child processes for test_processes.py.

Kept apart from the test module so a spawned child imports only this and
dedupstore, not pytest and the tests.
"""

from __future__ import annotations

import random
import traceback
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

from dedupstore import ClaimResult, DedupStore, Record, Status

NS = "procs"
LEASE = "10m"  # far longer than any run: no lease may expire mid-test and hand out a second token


def key_name(i: int) -> str:
    return f"key-{i:05d}"


def intent_of(i: int) -> dict[str, int]:
    # Every process claims a key with the same intent, so CONFLICT is never a right answer.
    return {"item": i}


def completes(i: int) -> bool:
    # Completing every winner would cost one fsync per key; a quarter still
    # shows DUPLICATE outcomes crossing processes.
    return i % 4 == 0


def claim_worker(path: str, wid: int, nkeys: int, seed: int, barrier: Barrier, out: str) -> None:
    """Claim every key once, in a shuffled order, with single claims and
    claim_many batches mixed; write one line per verdict to ``out``."""
    rng = random.Random(seed)
    order = list(range(nkeys))
    rng.shuffle(order)
    lines: list[str] = []
    with DedupStore.open(path) as store:
        barrier.wait(timeout=60)
        pos = 0
        while pos < nkeys:
            n = rng.choice([1, 1, 1, 5, 50, 200])
            chunk = order[pos:pos + n]
            pos += n
            if n == 1:
                results: list[ClaimResult] = [store.claim(NS, key_name(chunk[0]), intent_of(chunk[0]))]
            else:
                results = list(store.claim_many(NS, [key_name(i) for i in chunk], [intent_of(i) for i in chunk]))
            for i, res in zip(chunk, results, strict=True):
                outcome = res.outcome
                if res.status is Status.NEW and completes(i):
                    assert res.token is not None
                    outcome = store.complete(NS, key_name(i), res.token, f"w{wid}".encode()).outcome
                lines.append(f"{i} {res.status.name} {(outcome or b'').decode()}\n")
    Path(out).write_text("".join(lines))


def _summary(value: Any) -> Any:
    # Store objects do not cross the pipe: reduce them to comparable tuples.
    if isinstance(value, ClaimResult):
        return ("result", value.status.name, value.token, value.outcome, value.retry_after)
    if isinstance(value, Record):
        return ("record", value.state.name, value.token, value.outcome)
    if isinstance(value, list):
        return [_summary(v) for v in value]
    return value


def serve_store(path: str, conn: Connection, clock_at: float | None = None) -> None:
    """Run store calls sent as (method, args, kwargs) and reply ("ok", summary) or ("error", class name, text).

    ``clock_at`` pins this process's store clock (default: real time).
    """
    clock = None if clock_at is None else (lambda: clock_at)
    with DedupStore.open(path, clock=clock) as store:
        conn.send(("ok", "ready"))
        while True:
            msg = conn.recv()
            if msg is None:
                break
            method, args, kwargs = msg
            try:
                value = getattr(store, method)(*args, **kwargs)
                if method == "claim_many":
                    value = list(value)
                conn.send(("ok", _summary(value)))
            except Exception as exc:
                conn.send(("error", type(exc).__name__, "".join(traceback.format_exception_only(exc))))
    conn.close()
