"""benches/bench_cold.py: a quick run, so that the bench does not rot. No
figure is judged: only that every call and condition was timed."""

from __future__ import annotations

from pathlib import Path

import _benches
import pytest


def test_a_quick_run_times_every_call_in_every_condition(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bench = _benches.load("bench_cold")
    res = bench.measure(keys=200, calls=20, evict_mib=1, directory=str(tmp_path), idle_us=50.0)
    assert list(res["rows"]) == ["claim new", "claim dup", "round(1)", "round(2)", "python"]
    for row in res["rows"].values():
        assert set(row) == {f"{c}_{s}_us" for c in ("warm", "cold", "idle") for s in ("median", "mean")}
        assert all(v > 0 for v in row.values())
    assert res["bloom_filters"] >= 12
    assert bench.main(["--quick", "--idle-us", "10", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "idle p50" in out and "idle/warm" in out
    with pytest.raises(SystemExit):
        bench.main(["--idle-us", "-1"])


def test_fewer_generations_mean_fewer_filters_and_none_leaves_out_the_repeat(tmp_path: Path) -> None:
    bench = _benches.load("bench_cold")
    two = bench.measure(keys=200, calls=10, evict_mib=1, directory=str(tmp_path), idle_us=10.0, generations=2)
    assert 2 <= two["bloom_filters"] < 12 and "claim dup" in two["rows"]
    none = bench.measure(keys=200, calls=10, evict_mib=1, directory=str(tmp_path), idle_us=10.0, generations=0)
    assert none["bloom_filters"] == 0 and "claim dup" not in none["rows"]
    with pytest.raises(SystemExit):
        bench.main(["--generations", "49"])
