"""A flush-mode writer in its own process, for test_checkpoint.py.

    python _flush_writer.py STORE_DIR NAMESPACE

Reads commands on stdin: ``claim PREFIX N`` claims and completes keys
PREFIX0..PREFIX{N-1} (outcome ``f-`` + key) and answers ``ok``. It never
checkpoints after its open (flush_interval is an hour) and never closes: the
test kills it.
"""

from __future__ import annotations

import sys

from dedupstore import DedupStore, Status


def main() -> None:
    path, ns = sys.argv[1], sys.argv[2]
    store = DedupStore.open(path, durability="flush", eviction_rate=0, flush_interval=3600)
    print("open", flush=True)
    for line in sys.stdin:
        verb, prefix, n = line.split()
        assert verb == "claim"
        for i in range(int(n)):
            key = f"{prefix}{i}"
            r = store.claim(ns, key, {"v": 1})
            if r.status is Status.NEW:
                store.complete(ns, key, r.token, f"f-{key}".encode())
        print("ok", flush=True)


if __name__ == "__main__":
    main()
