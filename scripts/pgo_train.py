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
filtered, and are evicted during each run. Code no run here reaches keeps
GCC's ordinary -O2 choices (-fprofile-partial-training).

    PYTHONPATH=DIR python scripts/pgo_train.py [--seconds 1.0]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

#: (durability, mode, rate in events/s, share of --seconds) of each run.
RUNS = (
    ("flush", "poll", 18_000, 4.0),
    ("flush", "single", 18_000, 2.0),
    ("flush", "batch", 50_000, 2.0),
    ("sync", "poll", 18_000, 2.0),
    ("sync", "batch", 50_000, 1.0),
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=1.0, help="length of the shortest run (the others are multiples)")
    args = ap.parse_args(argv)
    from dedupstore import _native
    from dedupstore.loadgen import HORIZON_S, LoadConfig, run_load

    print(f"pgo_train: training {_native.__file__} ({_native.NATIVE_BUILD} build)", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="dedupstore-pgo-") as tmp:
        for i, (durability, mode, rate, share) in enumerate(RUNS):
            config = LoadConfig(rate=rate, duration=args.seconds * share, durability=durability, mode=mode,
                                time_scale=HORIZON_S)
            report = run_load(config, Path(tmp) / f"store{i}", back_to_back=False)
            print(f"pgo_train: {durability} {mode}: {report.claimed:,} events claimed, {report.evicted:,} evicted",
                  file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
