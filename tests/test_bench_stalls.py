"""benches/bench_stalls.py: a short run of its instrumented load, so that the
diagnostic does not rot as the store's steps change shape (it wraps some of
them by name). No figure is judged."""

from __future__ import annotations

import argparse

import _benches


def test_a_short_run_times_the_steps_and_places_the_late_events() -> None:
    bench = _benches.load("bench_stalls")
    args = argparse.Namespace(rate=2000.0, duration=1.5, durability="flush", apply_interval=0.05, threshold=0.0,
                              json=False)
    res = bench.run(args)
    assert res["events"] == 3000
    # Every event is late at a threshold of 0, and is put down to some steps
    # (or "none").
    assert res["late_events"] == res["events"]
    assert sum(res["late_events_by_steps"].values()) == res["events"]
    assert any(name.startswith("apply (background)") for name in res["steps"]), res["steps"]
    assert "latency :" in bench.show(res)
