"""A write-behind writer in its own process, for test_window.py.

    python _window_child.py STORE_DIR APPLY_INTERVAL [DURABILITY [MAP_BYTES [PARTITIONS]]]

Opens the store (flush mode unless DURABILITY says sync, no eviction, checkpoints an hour apart;
MAP_BYTES of each write-behind segment mapped, if given and not "-"; PARTITIONS
partitions, if given) and
answers ``open``; then reads commands on stdin: ``claim PREFIX N`` claims
keys PREFIX0..PREFIX{N-1} and completes the even ones (outcome ``f-`` + key),
then answers ``ok`` and each partition's write-behind figures as JSON (read
from the windows, without applying them; ``rotating``: a segment rotation
is under way), or ``stuck`` if the calls did not return within 30 s.
``laps PREFIX N LAPS`` does ``claim PREFIX<lap>- N`` LAPS times, each
followed by an apply of every window that rotates its segment and the
flusher's recycling of the old one (so the segments are written over and
over), and answers as ``claim`` does. ``hold
before|after`` starts an apply of every open window that rotates its segment
and stops for good before (or after) its commit, and answers once all have
stopped there. It never closes the store: the test kills it, or closes its
stdin to let it exit.
"""

from __future__ import annotations

import json
import sys
import threading
from typing import Any

from dedupstore import DedupStore, Status, window


def main() -> None:
    path, apply_interval = sys.argv[1], float(sys.argv[2])
    durability = sys.argv[3] if len(sys.argv) > 3 else "flush"
    if len(sys.argv) > 4 and sys.argv[4] != "-":
        window.MAP_BYTES = int(sys.argv[4])
    partitions = {"partitions": int(sys.argv[5])} if len(sys.argv) > 5 else {}
    store = DedupStore.open(path, durability=durability, eviction_rate=0, flush_interval=3600,
                            apply_interval=apply_interval, **partitions)
    store.ensure_namespace("n", horizon="1h", lease="1h")
    print("open", flush=True)
    for line in sys.stdin:
        words = line.split()
        if words[0] == "claim":
            worker = threading.Thread(target=claim, args=(store, words[1], int(words[2])), daemon=True)
            worker.start()
            worker.join(30)
            if worker.is_alive():
                print("stuck", flush=True)
                continue
        elif words[0] == "laps":
            laps(store, words[1], int(words[2]), int(words[3]))
        elif words[0] == "hold":
            hold(store, words[1])
        # Each partition window's own figures: stats() would apply the windows first.
        wb = [dict(p.window.stats(), rotating=p.window._mirror is not None) if p.window is not None else None
              for p in store._parts]
        print("ok " + json.dumps(wb), flush=True)


def claim(store: DedupStore, prefix: str, n: int) -> None:
    for i in range(n):
        key = f"{prefix}{i}"
        r = store.claim("n", key, {"v": 1})
        if r.status is Status.NEW and i % 2 == 0:
            store.complete("n", key, r.token, f"f-{key}".encode())


def laps(store: DedupStore, prefix: str, n: int, count: int) -> None:
    window.SEGMENT_BYTES = 1  # every apply of a window that logged something rotates
    for lap in range(count):
        claim(store, f"{prefix}{lap}-", n)
        for w in (p.window for p in store._parts if p.window is not None):
            w.apply()
            w.drop_retired()


def hold(store: DedupStore, when: str) -> None:
    window.SEGMENT_BYTES = 1  # every apply of a window that logged something rotates
    stopped = threading.Semaphore(0)
    real = window.Window._commit

    def held(self: window.Window, ov: Any, owner: Any, op: Any = None, helped: bool = False) -> Any:
        if when == "after":
            real(self, ov, owner, op, helped)
        stopped.release()
        threading.Event().wait()  # for good: the test kills the process

    window.Window._commit = held  # type: ignore[method-assign]
    windows = [p.window for p in store._parts if p.window is not None and p.window.active and p.window._size]
    for w in windows:
        threading.Thread(target=w.apply, daemon=True).start()
    for _ in windows:
        stopped.acquire()

if __name__ == "__main__":
    main()
