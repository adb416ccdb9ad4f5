"""A write-behind writer in its own process, for test_window.py.

    python _window_child.py STORE_DIR APPLY_INTERVAL [DURABILITY [MAP_BYTES]]

Opens the store (flush mode unless DURABILITY says sync, no eviction, checkpoints an hour apart;
MAP_BYTES of each write-behind segment mapped, if given) and
answers ``open``; then reads commands on stdin: ``claim PREFIX N`` claims
keys PREFIX0..PREFIX{N-1} and completes the even ones (outcome ``f-`` + key),
then answers ``ok`` and each partition's write-behind figures as JSON (read
from the windows, without applying them). It never closes the store: the
test kills it, or closes its stdin to let it exit.
"""

from __future__ import annotations

import json
import sys

from dedupstore import DedupStore, Status, window


def main() -> None:
    path, apply_interval = sys.argv[1], float(sys.argv[2])
    durability = sys.argv[3] if len(sys.argv) > 3 else "flush"
    if len(sys.argv) > 4:
        window.MAP_BYTES = int(sys.argv[4])
    store = DedupStore.open(path, durability=durability, eviction_rate=0, flush_interval=3600,
                            apply_interval=apply_interval)
    store.ensure_namespace("n", horizon="1h", lease="1h")
    print("open", flush=True)
    for line in sys.stdin:
        words = line.split()
        if words[0] == "claim":
            prefix, n = words[1], int(words[2])
            for i in range(n):
                key = f"{prefix}{i}"
                r = store.claim("n", key, {"v": 1})
                if r.status is Status.NEW and i % 2 == 0:
                    store.complete("n", key, r.token, f"f-{key}".encode())
        # Each partition window's own figures: stats() would apply the windows first.
        wb = [p.window.stats() if p.window is not None else None for p in store._parts]
        print("ok " + json.dumps(wb), flush=True)


if __name__ == "__main__":
    main()
