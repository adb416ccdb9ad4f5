"""benches/bench_calls.py: every call it names is measured, in both modes,
and its JSON has the documented shape. No timing is judged."""

from __future__ import annotations

import gc
import json
from types import ModuleType

import _benches
import pytest


@pytest.fixture(scope="module")
def calls() -> ModuleType:
    return _benches.load("bench_calls")


@pytest.mark.parametrize("durability", ["flush", "sync"])
def test_every_call_is_measured(calls: ModuleType, durability: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert calls.main(["--quick", "--json", "--durability", durability]) == 0
    assert gc.isenabled()  # paused while the calls ran, not left off
    out = json.loads(capsys.readouterr().out)
    assert out["durability"] == durability and out["repeat"] == 1
    labels = [row["call"] for row in out["calls"]]
    expected = [
        label
        for n in calls.SIZES
        for label in (f"claim_many({n}) new", f"complete_many({n})", f"claim_many({n}) duplicate")
    ] + ["claim() new", "complete()"] + [f"consumer round of {n}" for n in calls.ROUNDS]
    assert labels == expected
    for row in out["calls"]:
        assert row["cpu_us_per_call"] > 0 and row["cpu_us_per_key"] > 0, row
        assert row["cpu_us_per_key"] <= row["cpu_us_per_call"], row
