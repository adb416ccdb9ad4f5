#!/usr/bin/env python3
"""Where the flush p99 comes from: the main job's load, with the store's
slow steps timed and each late event matched to the steps that overlapped it.

It runs ``dedupstore.loadgen.run_load`` (the reference stream, poll mode unless
``--mode`` says otherwise, the accelerated clock, eviction and filters
running, as ``dedupstore bench`` does) with the store's steps that can hold a consumer up wrapped in timers:

    apply (call)         an apply run by a call (Window.apply_if_due;
                         before 558c588)
    apply (background)   one run by the flusher or the maintenance thread
    slice (call)         a call's slice of the puts of the flusher's apply
                         (Window._help)
    apply, blocking      Window._apply: segment rotation, closing (calls wait)
    maintenance          a transaction beside the window (Window.beside:
                         an eviction step, a filter's write)
    commit               a group-commit transaction (GroupCommitter._attempt;
                         beside a window it holds the window's calls up)
    evict, refresh       DedupStore.evict / refresh_prefilter, whole
    checkpoint, trickle  the flusher's checkpoint (an fdatasync) and its
                         writeback starts between them
    gc0/gc1/gc2          the cyclic collector, whichever thread ran it

An event is late when its latency (from its scheduled time, as the bench
measures it) is over ``--threshold``; it is put down to every step longer than
50 us that overlapped the span from its scheduled time to its answer ("none":
no such step). Each consumer round is also classed: a long call (the round's
own length over the threshold) or a late start (it began that much after it
could have).

The wrappers cost a few microseconds a call, so the percentiles here run a
little above ``dedupstore bench``'s; compare the shares, not the figures. A
diagnostic, not a benchmark of record: it never asserts anything.

    cd /tmp && /path/to/.venv/bin/python /path/to/benches/bench_stalls.py [--duration 20] [--threshold 250] [--json]
    ... bench_stalls.py --rate 180000 --duration 10 --mode batch --threshold 1000
"""

from __future__ import annotations

import argparse
import bisect
import collections
import functools
import gc
import json
import threading
import time
from collections.abc import Callable
from typing import Any

from dedupstore import checkpoint, commit, loadgen, store, window
from dedupstore.loadgen import LoadConfig, run_load

#: Steps shorter than this are not counted against a late event.
MIN_SPAN_S = 50e-6
THRESHOLDS_US = (250, 500, 1000, 2000, 4000)


class Spans:
    """(start, end, label) of every timed step, from any thread."""

    def __init__(self) -> None:
        self.items: list[tuple[float, float, str]] = []
        self._gc_start: dict[int, float] = {}

    def wrap(self, cls: type, name: str, label: Callable[..., str]) -> Callable[[], None]:
        real = getattr(cls, name, None)
        if real is None:  # an older tree (run against one to compare): nothing to time
            return lambda: None

        @functools.wraps(real)
        def timed(obj: Any, *args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return real(obj, *args, **kwargs)
            finally:
                self.items.append((t0, time.perf_counter(), label(*args, **kwargs)))

        setattr(cls, name, timed)
        return lambda: setattr(cls, name, real)

    def gc_callback(self, phase: str, info: dict[str, Any]) -> None:
        ident = threading.get_ident()
        if phase == "start":
            self._gc_start[ident] = time.perf_counter()
        elif ident in self._gc_start:
            self.items.append((self._gc_start.pop(ident), time.perf_counter(), f"gc{info['generation']}"))


def _caller() -> str:
    return "call" if threading.current_thread() is threading.main_thread() else "background"


def _op_names(batch: list[Any]) -> str:
    names = sorted({getattr(getattr(w.op, "func", w.op), "__name__", "op") for w in batch})
    return ",".join(names)


def instrument(spans: Spans) -> list[Callable[[], None]]:
    def behind(op: Any = None, helped: bool = False) -> str:
        if op is None:
            return f"apply ({_caller()})"
        return f"maintenance ({getattr(getattr(op, 'func', op), '__name__', 'op')})"

    # Before Window.beside (3321e08) applies went
    # through Window._apply_behind alone.
    behind_name = "_behind" if hasattr(window.Window, "_behind") else "_apply_behind"
    return [
        spans.wrap(window.Window, behind_name, behind),
        spans.wrap(window.Window, "_apply", lambda closing=False: "apply, blocking" + (" (close)" if closing else "")),
        # A call's slice of the puts of an apply under way (558c588 on).
        spans.wrap(window.Window, "_help", lambda claim: "slice (call)"),
        spans.wrap(commit.GroupCommitter, "_attempt", lambda batch: f"commit ({_op_names(batch)})"),
        spans.wrap(store.DedupStore, "evict", lambda *a, **k: "evict"),
        # The refresh: the background thread calls the private one (the
        # public one calls it too); older trees have only the public one.
        spans.wrap(store.DedupStore, "_refresh_prefilter" if hasattr(store.DedupStore, "_refresh_prefilter")
                   else "refresh_prefilter", lambda *a, **k: "refresh"),
        spans.wrap(checkpoint.Checkpointer, "checkpoint", lambda *a, **k: "checkpoint"),
        spans.wrap(checkpoint.Checkpointer, "trickle", lambda *a, **k: "trickle"),
    ]


def attribute(
    latencies: list[float], t0: float, interval: float, spans: list[tuple[float, float, str]], threshold_us: float,
    step: int = 1,
) -> collections.Counter[str]:
    """How many late events each combination of overlapping steps saw
    (``step``: events are due in groups of that many, as the load's)."""
    spans = sorted(s for s in spans if s[1] - s[0] >= MIN_SPAN_S)
    starts = [s[0] for s in spans]
    longest = max((s[1] - s[0] for s in spans), default=0.0)
    out: collections.Counter[str] = collections.Counter()
    for i, lat in enumerate(latencies):
        if lat <= threshold_us:
            continue
        due = t0 + (i - i % step) * interval
        answered = due + lat / 1e6
        lo = bisect.bisect_left(starts, due - longest)
        hi = bisect.bisect_right(starts, answered)
        labels = sorted({s[2] for s in spans[lo:hi] if s[1] >= due})
        out[" + ".join(labels) or "none"] += 1
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    config = LoadConfig(
        rate=args.rate, duration=args.duration, durability=args.durability,
        apply_interval=args.apply_interval, mode=args.mode, batch=args.batch,
    )
    spans = Spans()
    started: dict[str, float] = {}
    real_paced = loadgen._paced

    def paced(*a: Any, **k: Any) -> Any:
        res = real_paced(*a, **k)
        started["t0"] = res[0]
        return res

    undo = instrument(spans)
    loadgen._paced = paced
    gc.callbacks.append(spans.gc_callback)
    try:
        report = run_load(config)
    finally:
        gc.callbacks.remove(spans.gc_callback)
        loadgen._paced = real_paced
        for u in undo:
            u()
    t0 = started["t0"]
    end = t0 + report.wall_seconds
    measured = [s for s in spans.items if t0 <= s[1] and s[0] <= end]
    step = loadgen._shape(config)[0]
    late = attribute(report.latencies_us, t0, 1.0 / config.rate, measured, args.threshold, step)
    steps: dict[str, list[float]] = collections.defaultdict(list)
    for s in measured:
        steps[s[2]].append((s[1] - s[0]) * 1e6)
    out = report.to_dict()
    return {
        "rate": config.rate,
        "duration_seconds": config.duration,
        "durability": config.durability,
        "mode": config.mode,
        "batch": config.batch,
        "apply_interval_seconds": config.apply_interval,
        "threshold_us": args.threshold,
        "events": len(report.latencies_us),
        "p50_us": out["p50_us"],
        "p99_us": out["p99_us"],
        "p999_us": out["p999_us"],
        "late_events": sum(late.values()),
        "late_events_by_steps": dict(late.most_common()),
        "rounds": len(report.call_us),
        "rounds_over": {
            str(t): {
                "long_calls": sum(1 for x in report.call_us if x > t),
                "late_starts": sum(1 for x in report.late_us if x > t),
            }
            for t in THRESHOLDS_US
        },
        "steps": {
            name: {"count": len(v), **loadgen._quantiles(sorted(v))} for name, v in sorted(steps.items())
        },
    }


def show(res: dict[str, Any]) -> str:
    shape = f"batches of {res['batch']}" if res["mode"] == "batch" else res["mode"]
    lines = [
        f"load    : {res['rate']:,.0f} events/s for {res['duration_seconds']:g} s, {res['durability']}, "
        f"{shape}, "
        f"apply_interval {res['apply_interval_seconds'] * 1000:g} ms (instrumented: figures run a little high)",
        f"latency : p50 {res['p50_us']:,.0f} us, p99 {res['p99_us']:,.0f} us, p99.9 {res['p999_us']:,.0f} us",
        f"late    : {res['late_events']:,} of {res['events']:,} events over {res['threshold_us']:g} us, "
        f"by the steps that overlapped them:",
    ]
    for steps, n in res["late_events_by_steps"].items():
        lines.append(f"  {n:8,}  {n / max(1, res['late_events']):6.1%}  {steps}")
    lines.append(f"rounds  : {res['rounds']:,}; over each threshold, long calls / late starts:")
    over = res["rounds_over"].items()
    lines.append("  " + "   ".join(f">{t} us: {v['long_calls']:,}/{v['late_starts']:,}" for t, v in over))
    lines.append("steps   : count, p50 / p99 / max us")
    for name, q in res["steps"].items():
        lines.append(f"  {name:34s} {q['count']:7,}  {q['p50_us']:8,.0f} {q['p99_us']:8,.0f} {q['max_us']:8,.0f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=18_000.0)
    ap.add_argument("--duration", type=float, default=20.0, help="seconds of load")
    ap.add_argument("--durability", default="flush", choices=["flush", "sync"])
    ap.add_argument("--mode", default="poll", choices=loadgen.MODES, help="how the consumer takes events")
    ap.add_argument("--batch", type=int, default=100, help="events per batch in --mode batch")
    ap.add_argument("--apply-interval", type=float, default=store.DEFAULT_APPLY_INTERVAL, help="seconds")
    ap.add_argument("--threshold", type=float, default=250.0, help="an event later than this (us) is late")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    res = run(args)
    print(json.dumps(res, indent=2) if args.json else show(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
