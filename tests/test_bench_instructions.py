"""benches/bench_instructions.py: its child runs every scenario against the
installed package under callgrind, more calls count more instructions, and
``--where`` finds the package's functions by their source names. No count
is judged against a figure."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import ModuleType

import _benches
import pytest

#: The tests that run valgrind: slow, and skipped where it is not installed.
under_valgrind = pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return _benches.load("bench_instructions")


@pytest.mark.parametrize(
    ("mangled", "name"),
    [
        ("__pyx_f_10dedupstore_7_native_5Space__claim", "Space._claim"),
        ("__pyx_pw_10dedupstore_7_native_9StoreCore_1claim", "StoreCore.claim"),
        ("__pyx_pw_10dedupstore_7_native_9StoreCore_23claim_many", "StoreCore.claim_many"),
        ("__pyx_f_10dedupstore_7_native__canon'2", "_canon"),
        ("siphash.isra.0", "siphash"),
        ("PyObject_Hash", "PyObject_Hash"),
    ],
)
def test_readable_names_cython_functions_as_the_source_does(bench: ModuleType, mangled: str, name: str) -> None:
    assert bench.readable(mangled) == name


@pytest.mark.slow
@under_valgrind
def test_where_a_claim_goes_names_the_claim_path(bench: ModuleType) -> None:
    res = bench.where("claim", 300)
    assert res["total"] > 5_000, res["total"]
    inclusive = dict(res["inclusive"])
    # The package's own functions on a claim's path, each with at least one
    # instruction a call; none of the glue Cython generates.
    for name in ("StoreCore.claim", "Space._claim", "Hasher._intent_digest", "_canon_into"):
        assert inclusive.get(name, 0) > 0, (name, sorted(inclusive))
    assert not any(n.startswith("__Pyx_") for n in inclusive)
    # A function's own code is part of what it and its callees take, and no
    # function takes more than the call in all.
    exclusive = dict(res["exclusive"])
    assert 0 < exclusive["siphash"] <= inclusive["siphash"] <= res["total"]
    assert inclusive["StoreCore.claim"] <= res["total"]


@pytest.mark.slow
@under_valgrind
@pytest.mark.parametrize("scenario", ["claim", "claim, in flight", "claim+complete", "round(100)/key"])
def test_more_calls_count_more_instructions(bench: ModuleType, scenario: str, tmp_path: Path) -> None:
    what, per = bench.SCENARIOS[scenario]
    calls = 5 if per > 1 else 300
    none, some = bench.count(what, 0, str(tmp_path), calls), bench.count(what, calls, str(tmp_path))
    # A key costs over 20,000 instructions here, so these calls add
    # millions, well above how much two runs' start-ups differ; 5,000 a key
    # is a floor no working bench falls under.
    assert some - none > calls * per * 5_000, (none, some)


@pytest.mark.slow
@under_valgrind
def test_counting_by_verdict_counts_each_key(bench: ModuleType, tmp_path: Path) -> None:
    what, per = bench.SCENARIOS["count by verdict"]
    calls = 100
    none, some = bench.count(what, 0, str(tmp_path), calls), bench.count(what, calls, str(tmp_path))
    # 10,000 keys' op codes counted in C (about 20 instructions a key) and
    # 100 dicts of every Status (an Enum hash each, a few hundred
    # instructions): 20 a key, 200,000 in all (ten times what two runs'
    # start-ups differ by), is a floor no working bench falls under.
    assert some - none > calls * per * 20, (none, some)


@pytest.mark.slow
@under_valgrind
def test_a_cold_claim_fetches_lines_and_names_who_fetched_them(bench: ModuleType, tmp_path: Path) -> None:
    what, _ = bench.SCENARIOS["claim"]
    calls = 100
    none = bench._events(bench._profile(what, 0, str(tmp_path), calls, True))
    some = bench._events(bench._profile(what, calls, str(tmp_path), cold=True))
    assert set(bench.COLD_EVENTS) <= set(some), sorted(some)
    # A cold claim runs through tens of kilobytes of code: a hundred lines
    # from memory a call is a floor no working bench falls under, and the
    # buffer's writes, as many in both runs, must have cancelled (over
    # 65,000 lines a write of 4 MiB).
    fetched = sum(some[e] - none[e] for e in bench.MEMORY) / calls
    assert 100 < fetched < 20_000, fetched
    assert some["Ir"] - none["Ir"] > calls * 5_000
    res = bench.where("claim", calls, cold=True)
    assert dict(res["inclusive"]).get("StoreCore.claim", 0) > 0, res["inclusive"][:10]
