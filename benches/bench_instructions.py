#!/usr/bin/env python3
"""What one call costs in instructions: the calling thread's instruction
count per call under valgrind's callgrind, which does not move with the
machine's load (two runs of the same tree came within 3% of each other),
where CPU time on a shared machine moves by a factor of two between hours
(docs/benchmarks.md).

Every claim carries an intent shaped as the reference stream's
(``{"amount": 1234, "currency": "EUR"}``, canonical JSON). Each scenario
runs in a fresh process on a fresh flush-mode store (write-behind, applied
every second, no eviction thread), twice: with
``--calls`` iterations and with none, both after the same warm-up; the
figure is the difference of the main thread's counts divided by the
iterations, so interpreter start-up, imports and the store's opening cancel
out (both runs with Python's hash seed fixed, so that those are the same,
and with the warm-up's writes applied before the iterations). Background
threads (the flusher's applies and ticks) are counted apart by callgrind
and left out: under valgrind they run fifty times more often per call than
at full speed.

    claim             claim() of a new key, with an event time
    claim, aged       the same in a namespace 13 hours old on the store's
                      (injected) clock: twelve past hour-long generations
                      of the default 12 h horizon, sealed and filtered, as a
                      store that has run a while probes for every new key
                      (that clock is a Python function, which each claim
                      calls: about 440 instructions that a store on
                      time.time or dedupstore bench's clock does not run)
    claim, in flight  claim() of a key claimed before and not completed,
                      its pending record applied to LMDB: a redelivery
                      while the first delivery is still being worked on
                      (bench_peers.py's "repeat" shape)
    claim_many(1)     claim_many() of one new key, with an event time
    claim+complete    claim() then complete() of a new key: a single-call
                      consumer's round (dedupstore bench --mode single)
    round(1)          claim_many(1) then complete_many(1): dedupstore bench's
                      consumer round at its mean batch of 1 to 2 events
    round(2)          the same with 2 keys, per round (not per key): the
                      batch path (keys grouped by partition) that most of
                      the main job's events take (its mean batch is 1.9)
    round(100)/key    the same with 100 keys, per key: the batch target's path
    count by verdict  BatchResult.counts() of a batch of 100, per key: each
                      key's op code counted in C, then a dict of every
                      Status (a dict lookup keyed by each verdict, Status's
                      hash, until 7c664cf)

With ``--where SCENARIO`` it tells where one scenario's instructions go
instead: per call, each of the package's own functions with what it and
its callees take (inclusive), and the functions anywhere (the interpreter's
and libc's too) whose own code takes the most (exclusive), from the same
two runs' difference, by ``callgrind_annotate``.

With ``--cold`` it counts, per call, the cache lines the calling thread
fetches when its caches start cold, as a consumer's call after its sleep
does (``benches/bench_cold.py`` times that): callgrind simulates this
machine's first-level caches (32 KiB, 8-way) and a last level of 1 MiB, and
before each iteration the child writes to every line of a 4 MiB buffer (as
many writes in the run with no iterations, so they cancel). It prints the
instructions, the lines fetched into the first level and those fetched from
memory past the last, instruction and data apart; with ``--where`` it ranks
functions by lines fetched from memory.

It needs valgrind (Debian's package); without it, it says so and exits 0.

    cd /tmp && /path/to/.venv/bin/python /path/to/benches/bench_instructions.py [--calls 3000] [--json]
    cd /tmp && /path/to/.venv/bin/python /path/to/benches/bench_instructions.py --where claim [--top 20]
    cd /tmp && /path/to/.venv/bin/python /path/to/benches/bench_instructions.py --cold [--where 'round(1)']
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

#: The child: open a store, warm up, run ``n`` iterations of one scenario.
CHILD = r"""
import os, sys, tempfile, time
from dedupstore import DedupStore
what, n, most, cold = sys.argv[1], int(sys.argv[2]), int(sys.argv[4]), sys.argv[5] == "cold"
LL = int(sys.argv[6])
aged = what == "claim_aged"
clock = [time.time() - 13 * 3600]
# valgrind cannot reserve the default map (256 GiB of address space).
s = DedupStore.open(tempfile.mkdtemp(dir=sys.argv[3]), durability="flush", eviction_rate=0,
                    apply_interval="1s", map_size=1 << 30, clock=(lambda: clock[0]) if aged else None)
s.ensure_namespace("ns")
if aged:
    # An hour-long generation per step (the 12 h horizon's), 200 keys each;
    # then the refresh seals and filters every one that ended an hour ago.
    for g in range(13):
        for j in range(200):
            r = s.claim("ns", f"old{g}.{j}")
            s.complete("ns", r.key, r.token, b"ok")
        clock[0] += 3600.0
    s.refresh_prefilter()
t = clock[0] if aged else time.time()
size = {"round100": 100, "round2": 2}.get(what, 1)
# The reference stream's intent shape (dedupstore.loadgen.make_stream).
intent = {"amount": 1234, "currency": "EUR"}
ints, ets = [intent] * size, [t] * size

def round_of(tag):
    keys = [f"{tag}.{j}" for j in range(size)]
    b = s.claim_many("ns", keys, ints, event_times=ets)
    s.complete_many("ns", [(k, tok, b"ok") for k, tok in zip(keys, b.tokens)])

for i in range(20 if size >= 100 else 200):
    round_of(f"w{i}")
# The warm-up's writes applied now, by this thread: left pending, they would
# be applied by whichever thread got there first (a flush-mode call makes a
# slice of an apply under way, the flusher what the calls leave), so the
# main thread's count could depend on when the flusher's tick came.
s.flush()
keys = [f"k{i}" for i in range(n)]
if what == "claim_inflight":
    # As many keys claimed (and applied) in every run of the scenario, so
    # that only the second claims differ between them.
    for i in range(most):
        s.claim("ns", f"k{i}", intent, event_time=t)
    s.flush()
if what == "counts":
    b = s.claim_many("ns", [f"c{j}" for j in range(100)], [intent] * 100, event_times=[t] * 100)
if what in ("claim", "claim_aged", "claim_inflight"):
    step = lambda k: s.claim("ns", k, intent, event_time=t)
elif what == "single":
    def step(k):
        r = s.claim("ns", k, intent, event_time=t)
        s.complete("ns", r.key, r.token, b"ok")
elif what == "counts":
    # BatchResult.counts() of one batch of 100: a dict lookup per key by
    # its verdict, as a consumer counting verdicts makes.
    step = lambda k: b.counts()
elif what == "claim_many1":
    step = lambda k: s.claim_many("ns", [k], ints, event_times=ets)
else:
    step = round_of
if cold:
    # Every iteration after a write to each 64-byte line of a buffer four
    # times the simulated last-level cache; `most` writes in every run, so
    # that the runs' difference is the calls' own.
    junk = bytearray(4 * LL)
    zeros = bytes(len(range(0, len(junk), 64)))
    for k in keys:
        junk[::64] = zeros
        step(k)
    for _ in range(most - n):
        junk[::64] = zeros
else:
    for k in keys:
        step(k)
sys.stdout.flush()
os._exit(0)  # no close: its last apply and checkpoint would count
"""

SCENARIOS = {
    "claim": ("claim", 1),
    "claim, aged": ("claim_aged", 1),
    "claim, in flight": ("claim_inflight", 1),
    "claim+complete": ("single", 1),
    "claim_many(1)": ("claim_many1", 1),
    "round(1)": ("round1", 1),
    "round(2)": ("round2", 1),
    "round(100)/key": ("round100", 100),
    "count by verdict": ("counts", 100),
}


#: The caches callgrind simulates with ``--cold``: this machine's first
#: level (32 KiB, 8-way, per core) and a last level of 1 MiB, 16-way (callgrind
#: models two levels; the child's buffer is four times that).
CACHES = ("--I1=32768,8,64", "--D1=32768,8,64", "--LL=1048576,16,64")
LL_BYTES = 1 << 20
#: The events a --cold profile's counts are read as: instructions, lines
#: fetched into the first level (instructions, data read, data written) and
#: from memory past the last level (the same three).
COLD_EVENTS = ("Ir", "I1mr", "D1mr", "D1mw", "ILmr", "DLmr", "DLmw")


def _profile(what: str, n: int, workdir: str, most: int | None = None, cold: bool = False) -> Path:
    """The main thread's callgrind profile of ``n`` iterations of ``what``;
    ``most``: the largest ``n`` the scenario is counted at (what it sets up
    must not depend on ``n``), ``n`` if not given. ``cold``: caches
    simulated, and each iteration after the child has written over four
    times the last level."""
    out = Path(workdir) / f"cg.{what}.{n}{'.cold' if cold else ''}"
    sim = ["--cache-sim=yes", *CACHES] if cold else []
    subprocess.run(
        ["valgrind", "--tool=callgrind", "--separate-threads=yes", *sim, f"--callgrind-out-file={out}",
         sys.executable, "-c", CHILD, what, str(n), workdir, str(n if most is None else most),
         "cold" if cold else "warm", str(LL_BYTES)],
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        # A fixed hash seed: with a random one, the interpreter's start-up and
        # imports (most of each run's count) moved by up to 0.6 million
        # instructions between runs, which the two runs' difference took in
        # whole (0.02 million with the seed fixed; docs/benchmarks.md).
        env=dict(os.environ, PYTHONHASHSEED="0"),
    )
    return Path(f"{out}-01")


def _events(profile: Path) -> dict[str, int]:
    """A profile's counts in all, by event (``Ir``; with --cold, the misses too)."""
    text = profile.read_text(errors="replace")
    names = re.search(r"^events:\s+(.+)$", text, re.M)
    summary = re.search(r"^summary:\s+([\d ]+)$", text, re.M)
    if names is None or summary is None:
        raise RuntimeError(f"no summary in {profile}")
    return dict(zip(names.group(1).split(), map(int, summary.group(1).split()), strict=True))


def _summary(profile: Path) -> int:
    """A profile's instruction count in all."""
    return _events(profile)["Ir"]


def _iterations(calls: int, per: int) -> int:
    """How many iterations of a scenario of ``per`` calls each make ``calls``."""
    return max(1, calls // per) if per > 1 else calls


def count(what: str, n: int, workdir: str, most: int | None = None) -> int:
    """The main thread's instructions for ``n`` iterations of ``what``
    (``most`` as for _profile)."""
    return _summary(_profile(what, n, workdir, most))


#: A line of callgrind_annotate's function list: count, share, file:function [object].
_ANNOTATED = re.compile(r"^\s*([\d,]+) \(\s*[\d.]+%\)\s+(?:\S*?:)?(\S+?)(?: \[(\S+)\])?$")
#: Cython's names: __pyx_f_ (a cdef function), __pyx_pw_ (a def's wrapper),
#: then the module (10dedupstore 7_native), then a class's length-prefixed name.
_CYTHON = re.compile(r"^__pyx_(f|pw)_10dedupstore_7_native_(\w+)$")


def readable(name: str) -> str:
    """A function's name as the source spells it: Cython's mangled
    ``__pyx_f_10dedupstore_7_native_5Space__claim`` is ``Space._claim``, a
    def's wrapper ``__pyx_pw_..._9StoreCore_1claim`` is ``StoreCore.claim``;
    a C function keeps its name (callgrind's ``'2`` for a recursive call and
    gcc's ``.isra.0`` dropped)."""
    name = re.sub(r"'\d+$", "", name).split(".", 1)[0]
    m = _CYTHON.match(name)
    if m is None:
        return name
    kind, rest = m.groups()
    size = re.match(r"\d+", rest)
    if size is None:  # a module-level function: its name follows the module's
        return rest
    cls = rest[size.end(): size.end() + int(size.group())]
    member = rest[size.end() + int(size.group()) + 1:]
    if kind == "pw":  # a wrapper's member name is numbered: 1claim
        member = re.sub(r"^\d+", "", member)
    return f"{cls}.{member}"


def functions(profile: Path, inclusive: bool, event: str = "Ir") -> dict[tuple[str, bool], int]:
    """``event``'s counts (instructions by default) by (readable function
    name, whether it is the package's own) in one profile, the lines of one
    name added up."""
    text = subprocess.run(
        ["callgrind_annotate", "--auto=no", f"--inclusive={'yes' if inclusive else 'no'}", "--threshold=100",
         f"--show={event}", f"--sort={event}", str(profile)],
        check=True, capture_output=True, text=True,
    ).stdout
    res: dict[tuple[str, bool], int] = {}
    for line in text.splitlines():
        m = _ANNOTATED.match(line)
        if m is None or "PROGRAM TOTALS" in line:
            continue
        raw = line.split("%)", 1)[1].strip()
        own = "dedupstore" in (m.group(3) or "") or "/csrc/" in raw or "dedupstore/" in raw.split(":", 1)[0]
        key = (readable(m.group(2)), own)
        res[key] = res.get(key, 0) + int(m.group(1).replace(",", ""))
    return res


#: With --cold, what --where ranks functions by: lines from memory
#: (instruction reads, data reads and writes that missed the last level).
MEMORY = ("ILmr", "DLmr", "DLmw")


def where(scenario: str, calls: int, cold: bool = False) -> dict[str, object]:
    """Per call of ``scenario``: all instructions (``total``), the package's
    own functions by inclusive instructions (Cython's generated glue,
    ``__Pyx_*``, left out: it wraps the functions it calls), and all
    functions by exclusive ones, largest first; from the difference of a run
    with ``calls`` iterations and one with none. ``cold``: the same of the
    lines each call fetched from memory, its caches cold (``total`` then
    counts those lines)."""
    what, per = SCENARIOS[scenario]
    n = _iterations(calls, per)
    events = MEMORY if cold else ("Ir",)
    res: dict[str, object] = {}
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR", "/tmp")) as workdir:
        base, full = _profile(what, 0, workdir, n, cold), _profile(what, n, workdir, cold=cold)
        fe, be = _events(full), _events(base)
        res["total"] = round(sum(fe[e] - be[e] for e in events) / (n * per))
        for table, inclusive in (("inclusive", True), ("exclusive", False)):
            diff: dict[str, int] = {}
            for event in events:
                b, f = functions(base, inclusive, event), functions(full, inclusive, event)
                for (name, own), v in f.items():
                    if not inclusive or (own and not name.startswith("__Pyx_")):
                        diff[name] = diff.get(name, 0) + v - b.get((name, own), 0)
            rows = ((name, round(v / (n * per))) for name, v in diff.items())
            res[table] = sorted((r for r in rows if r[1] > 0), key=lambda r: -r[1])
    return res


def run(calls: int) -> dict[str, float]:
    res = {}
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR", "/tmp")) as workdir:
        for name, (what, per) in SCENARIOS.items():
            n = _iterations(calls, per)
            base, full = count(what, 0, workdir, n), count(what, n, workdir)
            res[name] = round((full - base) / (n * per))
    return res


def run_cold(calls: int) -> dict[str, dict[str, float]]:
    """Per scenario and call, its caches cold: each of COLD_EVENTS."""
    res = {}
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR", "/tmp")) as workdir:
        for name, (what, per) in SCENARIOS.items():
            n = _iterations(calls, per)
            base, full = _events(_profile(what, 0, workdir, n, True)), _events(_profile(what, n, workdir, cold=True))
            res[name] = {e: round((full[e] - base[e]) / (n * per), 1) for e in COLD_EVENTS}
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=3000, help="iterations per scenario (rounds of 100: a hundredth)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--where", metavar="SCENARIO", choices=sorted(SCENARIOS),
                    help="where one scenario's instructions go, by function")
    ap.add_argument("--top", type=int, default=20, help="with --where: functions shown per table")
    ap.add_argument("--cold", action="store_true",
                    help="the cache lines each call fetches after its caches are cold (simulated caches)")
    args = ap.parse_args(argv)
    if shutil.which("valgrind") is None:
        print("bench_instructions: valgrind is not installed (apt-get install valgrind); skipped")
        return 0
    if args.where is not None:
        return _print_where(args)
    if args.cold:
        cold = run_cold(args.calls)
        if args.json:
            print(json.dumps({"calls": args.calls, "caches": CACHES, "cold": cold}, indent=2))
            return 0
        print(f"per call of the calling thread, its caches cold (callgrind {' '.join(CACHES)}; "
              f"{args.calls:,} calls per scenario): instructions, lines fetched into the first level, "
              "lines fetched from memory")
        print(f"  {'':16s} {'instr':>8s} {'L1 instr':>9s} {'L1 data':>8s} {'mem instr':>10s} {'mem data':>9s}")
        for name, v in cold.items():
            print(f"  {name:16s} {v['Ir']:8,.0f} {v['I1mr']:9,.1f} {v['D1mr'] + v['D1mw']:8,.1f} "
                  f"{v['ILmr']:10,.1f} {v['DLmr'] + v['DLmw']:9,.1f}")
        return 0
    res = run(args.calls)
    if args.json:
        print(json.dumps({"calls": args.calls, "instructions": res}, indent=2))
    else:
        print(f"instructions of the calling thread per call (callgrind; {args.calls:,} calls per scenario)")
        for name, v in res.items():
            print(f"  {name:16s} {v:10,}")
    return 0


def _print_where(args: argparse.Namespace) -> int:
    res = where(args.where, args.calls, args.cold)
    if args.json:
        print(json.dumps({"scenario": args.where, "calls": args.calls, "cold": args.cold, **res}, indent=2))
        return 0
    total = res["total"]
    assert isinstance(total, int)
    what = "the lines it fetches from memory, its caches cold" if args.cold else "its instructions"
    print(f"where {args.where!r} spends {what}, per call (callgrind, {args.calls:,} calls): {total:,} in all")
    for table, title in (("inclusive", "the package's functions, with their callees"),
                         ("exclusive", "all functions, their own code only")):
        print(f"  {title}:")
        rows = res[table]
        assert isinstance(rows, list)
        for name, v in rows[: args.top]:
            print(f"    {v:8,} {100.0 * v / max(total, 1):5.1f}%  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
