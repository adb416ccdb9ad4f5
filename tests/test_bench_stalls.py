"""benches/bench_stalls.py: a short run of its instrumented load, so that the
diagnostic does not rot as the store's steps change shape (it wraps some of
them by name). No figure is judged."""

from __future__ import annotations

import argparse

import _benches


def test_a_short_run_times_the_steps_and_places_the_late_events() -> None:
    bench = _benches.load("bench_stalls")
    args = argparse.Namespace(rate=2000.0, duration=1.5, durability="flush", apply_interval=0.05, threshold=0.0,
                              mode="poll", batch=100, json=False)
    res = bench.run(args)
    assert res["events"] == 3000
    # Every event is late at a threshold of 0, and is put down to some steps
    # (or "none").
    assert res["late_events"] == res["events"]
    assert sum(res["late_events_by_steps"].values()) == res["events"]
    assert any(name.startswith("apply (background)") for name in res["steps"]), res["steps"]
    assert "latency :" in bench.show(res)


def test_batch_mode_runs_and_an_event_is_due_with_its_batch() -> None:
    bench = _benches.load("bench_stalls")
    args = argparse.Namespace(rate=4000.0, duration=1.0, durability="flush", apply_interval=0.05, threshold=0.0,
                              mode="batch", batch=50, json=False)
    res = bench.run(args)
    assert res["events"] == 4000 and res["rounds"] == 80
    assert "batches of 50" in bench.show(res)
    # Event 3 of a batch of 4 due at t=0 and answered 1 ms later: a step
    # from 0.5 to 0.9 ms overlapped it; with each event due on its own
    # (3 ms later) the step would have ended before it was due.
    spans = [(0.0005, 0.0009, "apply (background)")]
    latencies = [1000.0, 1000.0, 1000.0, 1000.0]
    assert bench.attribute(latencies, 0.0, 0.001, spans, 500.0, step=4) == {"apply (background)": 4}
    assert bench.attribute(latencies, 0.0, 0.001, spans, 500.0, step=1) == {"apply (background)": 1, "none": 3}
