"""A process killed while evicting loses nothing within its horizon, and the
frontier always covers whatever it did remove (never lags, never moves back)."""

from __future__ import annotations

import contextlib
import random
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import FakeClock

from dedupstore import DedupStore

HORIZON = 80.0
GEN = 10.0

CHILD = textwrap.dedent(
    """
    import sys
    from dedupstore import DedupStore
    path, now = sys.argv[1], float(sys.argv[2])
    with DedupStore.open(path, clock=lambda: now, eviction_rate=0, eviction_batch=3) as s:
        print("ready", flush=True)
        # One eviction call per line the parent sends: the parent decides how
        # far each life gets, however fast or loaded the machine is.
        while sys.stdin.readline() and sum(s.evict(3).values()):
            print("step", flush=True)
    print("done", flush=True)
    """
)


@pytest.mark.slow
def test_kill_during_eviction(tmp_path: Path) -> None:
    path = tmp_path / "s"
    clock = FakeClock()
    seen: dict[str, float] = {}
    with DedupStore.open(path, clock=clock, eviction_rate=0, partitions=2) as s:
        s.ensure_namespace("n", horizon=f"{HORIZON:g}s", lease="5s")
        for step in range(40):
            batch = s.claim_many("n", [f"s{step}-k{i}" for i in range(60)])
            s.complete_many("n", [(r.key, r.token, b"ok") for r in batch if r.token is not None and step % 7])
            seen.update((r.key.decode(), clock.now) for r in batch)
            clock.advance(GEN)
    now = clock.now
    rng = random.Random(7)
    last_frontier = 0.0
    kills = 0
    finished = False
    while kills < 20 and not finished:
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(path), repr(now)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdin is not None and child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        # Killed after a random number of eviction calls (not a random time:
        # eviction does not wait for the disk, so its speed varies a lot),
        # then during one more, a random moment into it.
        for _ in range(rng.randint(0, 40)):
            child.stdin.write("go\n")
            child.stdin.flush()
            if child.stdout.readline().strip() != "step":
                break
        with contextlib.suppress(BrokenPipeError):
            child.stdin.write("go\n")
            child.stdin.flush()
        time.sleep(rng.uniform(0.0, 0.002))
        child.kill()
        out, _ = child.communicate()
        finished = "done" in out
        kills += 0 if finished else 1
        with DedupStore.open(path, clock=lambda: now, eviction_rate=0) as s:
            frontier = s.stats()["namespaces"]["n"]["frontier"]
            assert frontier >= last_frontier, "the frontier moved backwards"
            last_frontier = frontier
            for key, first_seen in seen.items():
                rec = s.lookup("n", key)
                if now - first_seen < HORIZON:
                    assert rec is not None, f"{key} was within its horizon and is gone"
                if rec is None:
                    # Whatever was removed is covered: a late replay of it is never NEW.
                    assert first_seen < frontier, f"{key} is gone but the frontier {frontier} does not cover it"
            # Unresolved records survive every kill.
            pending = {k for k in seen if int(k.split("-")[0][1:]) % 7 == 0}
            assert {r.key.decode() for r in s.unresolved("n")} == pending
    assert kills >= 20, f"only {kills} kills before eviction finished: make the store bigger"
