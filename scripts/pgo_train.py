#!/usr/bin/env python3
"""The training run of a profile-guided build (setup.py, DEDUPSTORE_PGO=1).

setup.py builds the extension with GCC's -fprofile-generate, runs this
script against that build (in a copy of the package on PYTHONPATH), then
builds again with -fprofile-use: GCC lays out, inlines and unrolls the C
by what ran here. It drives the store as consumers do, with the load
generator behind ``dedupstore bench`` (dedupstore/loadgen.py): the reference
stream (new keys, redeliveries, conflicting intents, late replays, then
completions and releases) in both durabilities, one call per event, polled
batches and batches of 100, with the store's clock fast enough (its 12 h
horizon passing in one second) that generations rotate, are sealed and
filtered, and are evicted during each run. Then the same stream's calls go,
unpaced, to a store on the default clock (``time.time``, which the native
code reads itself): the load generator's accelerated clock takes another
branch of every call's clock read, and trained on it alone GCC laid the
rest of a default-clock claim out as never run, in the cold partition
away from the hot code, where every deployment's claims ran it. Code no
run here reaches keeps GCC's ordinary -O2 choices
(-fprofile-partial-training).

    PYTHONPATH=DIR python scripts/pgo_train.py [--seconds 1.0]
"""

from __future__ import annotations

import argparse
import collections
import itertools
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dedupstore import Status

#: (durability, mode, rate in events/s, share of --seconds) of each run.
RUNS = (
    ("flush", "poll", 18_000, 4.0),
    ("flush", "single", 18_000, 2.0),
    ("flush", "batch", 50_000, 2.0),
    ("sync", "poll", 18_000, 2.0),
    ("sync", "batch", 50_000, 1.0),
)

#: Events of the default-clock phase, per durability, and the sizes of its
#: calls in turn (0: one claim(), else claim_many of that many): the main
#: job's polls take one to three events, a producer's batch a hundred.
DEFAULT_CLOCK_EVENTS = 20_000
DEFAULT_CLOCK_SIZES = (1, 2, 0, 1, 3, 2, 1, 0, 100)


def default_clock(root: Path, durability: str, events: int) -> tuple[str, collections.Counter[Status]]:
    """The reference stream's calls (claims, then completes or releases),
    unpaced, against a store on the default clock; returns the name of the
    clock the store read and the verdicts' counts."""
    from dedupstore import DedupStore
    from dedupstore.loadgen import NAMESPACE, LoadConfig, _Consumer, make_stream

    # time_scale 1: the stream's event times are real seconds from now.
    stream = make_stream(LoadConfig(rate=18_000, duration=1.0, durability=durability, time_scale=1), events)
    counts: collections.Counter[Status] = collections.Counter()
    with DedupStore.open(root, durability=durability) as store:
        clock = f"{store._clock.__module__}.{store._clock.__qualname__}"
        store.ensure_namespace(NAMESPACE)
        consumer = _Consumer(store, stream, time.time(), counts)
        sizes = itertools.cycle(DEFAULT_CLOCK_SIZES)
        i = 0
        while i < events:
            size = next(sizes)
            if size:
                end = min(events, i + size)
                consumer.batch(i, end)
                i = end
            else:
                consumer.single(i)
                i += 1
    return clock, counts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=1.0, help="length of the shortest run (the others are multiples)")
    args = ap.parse_args(argv)
    from dedupstore import Status, _native
    from dedupstore.loadgen import HORIZON_S, LoadConfig, run_load

    print(f"pgo_train: training {_native.__file__} ({_native.NATIVE_BUILD} build)", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="dedupstore-pgo-") as tmp:
        for i, (durability, mode, rate, share) in enumerate(RUNS):
            config = LoadConfig(rate=rate, duration=args.seconds * share, durability=durability, mode=mode,
                                time_scale=HORIZON_S)
            report = run_load(config, Path(tmp) / f"store{i}", back_to_back=False)
            print(f"pgo_train: {durability} {mode}: {report.claimed:,} events claimed, {report.evicted:,} evicted",
                  file=sys.stderr)
        for durability in ("flush", "sync"):
            clock, counts = default_clock(Path(tmp) / f"default-{durability}", durability, DEFAULT_CLOCK_EVENTS)
            print(f"pgo_train: {durability}, default clock ({clock}): {sum(counts.values()):,} events claimed, "
                  f"{counts[Status.NEW]:,} new, {counts[Status.DUPLICATE]:,} duplicates", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
