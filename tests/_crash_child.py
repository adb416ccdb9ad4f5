"""The process test_crash.py kills: it claims and completes fresh keys forever,
acknowledging each returned call on stdout, until SIGKILL.

    python _crash_child.py STORE_DIR DURABILITY RUN

Its plan is a pure function of RUN, so the parent knows exactly which keys the
call in flight at the kill could have touched.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Iterator
from dataclasses import dataclass

NS = "crash"
LEASE = "1h"  # outlives the test: an acknowledged claim stays PENDING, never UNKNOWN
HORIZON = "7d"


@dataclass(frozen=True)
class Op:
    kind: str  # "claim" (one key: claim(); several: claim_many()) or "complete"
    keys: tuple[str, ...]


def outcome_of(key: str) -> bytes:
    return f"done:{key}".encode()


def plan(run: int) -> Iterator[Op]:
    """Claims of one or several fresh keys, each followed by completions of
    some of them (others stay pending: evidence of unresolved effects)."""
    rng = random.Random(run)
    n = 0
    while True:
        size = rng.choice([1, 1, 1, 2, 4])
        keys = tuple(f"r{run}-k{n + i}" for i in range(size))
        n += size
        yield Op("claim", keys)
        for key in keys:
            if rng.random() < 0.7:
                yield Op("complete", (key,))


def main() -> None:
    path, durability, run = sys.argv[1], sys.argv[2], int(sys.argv[3])
    from dedupstore import DedupStore, Status

    out = sys.stdout
    store = DedupStore.open(path, partitions=2, durability=durability)
    store.ensure_namespace(NS, horizon=HORIZON, lease=LEASE)
    out.write("READY\n")
    out.flush()
    tokens: dict[str, int] = {}
    for op in plan(run):
        if op.kind == "claim":
            # Several keys go through claim_many: its partitions commit separately.
            single = len(op.keys) == 1
            results = [store.claim(NS, op.keys[0])] if single else list(store.claim_many(NS, list(op.keys)))
            lines = []
            for key, res in zip(op.keys, results, strict=True):
                if res.status is not Status.NEW or res.token is None:
                    raise SystemExit(f"fresh key {key} got {res!r}")
                tokens[key] = res.token
                lines.append(f"NEW {key} {res.token}\n")
            # One write per call: the acknowledgement of a batch is all or nothing.
            out.write("".join(lines))
        else:
            (key,) = op.keys
            store.complete(NS, key, tokens.pop(key), outcome_of(key))
            out.write(f"DONE {key}\n")
        out.flush()


if __name__ == "__main__":
    main()
