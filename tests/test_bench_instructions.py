"""benches/bench_instructions.py: its child runs every scenario against the
installed package under callgrind, and more calls count more instructions.
No count is judged against a figure."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import ModuleType

import _benches
import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed"),
]


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return _benches.load("bench_instructions")


@pytest.mark.parametrize("scenario", ["claim", "claim, in flight", "claim+complete", "round(100)/key"])
def test_more_calls_count_more_instructions(bench: ModuleType, scenario: str, tmp_path: Path) -> None:
    what, per = bench.SCENARIOS[scenario]
    calls = 5 if per > 1 else 300
    none, some = bench.count(what, 0, str(tmp_path), calls), bench.count(what, calls, str(tmp_path))
    # A key costs over 20,000 instructions here, so these calls add
    # millions, well above how much two runs' start-ups differ; 5,000 a key
    # is a floor no working bench falls under.
    assert some - none > calls * per * 5_000, (none, some)


def test_counting_by_verdict_counts_more_lookups(bench: ModuleType, tmp_path: Path) -> None:
    what, per = bench.SCENARIOS["count by verdict"]
    calls = 20
    none, some = bench.count(what, 0, str(tmp_path), calls), bench.count(what, calls, str(tmp_path))
    # 2,000 lookups of about 800 instructions each (2,600 with Enum's own
    # hash): 200 a lookup is a floor no working bench falls under.
    assert some - none > calls * per * 200, (none, some)
