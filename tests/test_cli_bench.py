"""`dedupstore bench`: the documented JSON schema and a sane short run."""

from __future__ import annotations

import functools
import json
import os
import platform
import sys
from pathlib import Path

import pytest
from _cli import rows, run, run_json

from dedupstore import _native
from dedupstore.cli import bench
from dedupstore.cli.main import main


@pytest.mark.parametrize("durability", ["sync", "flush"])
def test_bench_json_schema(capsys: pytest.CaptureFixture[str], tmp_path: Path, durability: str) -> None:
    nice = "3" if durability == "sync" else "idle"
    code = main(
        ["bench", "--rate", "2000", "--duration", "1s", "--durability", durability,
         "--path", str(tmp_path / "s"), "--floor", "300ms", "--thread-nice", nice, "--json"]
    )
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["thread_nice"] == (3 if nice == "3" else "idle")
    assert doc["thread_slice_seconds"] == 0.01  # the store's default, DEFAULT_THREAD_SLICE
    for key in ("achieved_rate", "p50_us", "p99_us", "p999_us", "cpu_share", "verdicts", "bytes_on_disk", "events"):
        assert key in doc
    assert doc["events"] == 2000 == doc["claimed"] and doc["unclaimed"] == 0
    assert sum(doc["verdicts"].values()) == 2000
    assert doc["verdicts"]["NEW"] > 1500 and doc["verdicts"]["BEYOND_HORIZON"] > 0
    assert 0 < doc["p50_us"] <= doc["p99_us"] <= doc["p999_us"] <= doc["max_us"]
    assert doc["achieved_rate"] > 0 and doc["cpu_share"] > 0 and doc["bytes_on_disk"] > 0
    assert 0 <= doc["cpu_system_share"] <= doc["cpu_share"]
    assert doc["written_bytes"] >= 0 and doc["written_bytes_per_event"] >= 0
    # One thread makes the calls: their CPU time is at most their wall time.
    assert 0 < doc["store_call_share"] <= 1 and 0 < doc["store_call_cpu_us"] <= doc["store_call_us"] + 1
    # The store's part of the CPU: its calls in the consumer's thread, and
    # its own threads (the flusher applied the windows, at least); all of it
    # within the process's CPU time (measured over a slightly longer span).
    calls_share = doc["store_call_cpu_us"] * doc["batches"] / 1e6 / (doc["events"] / doc["achieved_rate"])
    assert 0 < doc["store_background_cpu_share"] < doc["store_cpu_share"] <= doc["cpu_share"] + 0.02
    assert doc["store_cpu_share"] - doc["store_background_cpu_share"] == pytest.approx(calls_share, abs=0.01)
    # The windows were applied; only flush-mode calls make slices of an apply's puts.
    ap = doc["applies"]
    assert ap["count"] > 0 and ap["mean_us"] > 0 and 0 <= ap["helped"] <= ap["count"]
    assert ap["slices_in_calls"] >= ap["helped"]  # a helped apply had at least one slice made by a call
    assert 0 < ap["commit_mean_us"] <= ap["mean_us"]  # the commit is part of the transaction's time
    assert 0 <= ap["in_calls_share"] <= doc["store_call_share"]
    # A second of 2,000 events/s fills no 4 MiB log segment: none rotated, none recycled.
    assert ap["recycled_segments"] == 0
    if durability == "sync":
        assert ap["helped"] == ap["slices_in_calls"] == 0 and ap["slice_mean_us"] == 0
    # Where the latency comes from: each round's length, and how late it began.
    for spread in (doc["rounds"], doc["late_starts"]):
        assert set(spread) == {"p50_us", "p99_us", "p999_us", "max_us"}
        assert 0 <= spread["p50_us"] <= spread["p99_us"] <= spread["p999_us"] <= spread["max_us"]
    # No event is answered before its round began late. (A round may outlast
    # every event's latency: its completes come after its claims' answer,
    # and may run an apply.)
    assert doc["rounds"]["p50_us"] > 0 and doc["max_us"] >= doc["late_starts"]["max_us"]
    # The same schedule with no store first: 300 ms of it at 2,000/s.
    floor = doc["machine_floor"]
    assert set(floor) == {"seconds", "events", "cpu_share", "p50_us", "p99_us", "p999_us", "max_us"}
    assert floor["seconds"] == 0.3 and floor["events"] == 600 and 0 < floor["cpu_share"] <= 1
    assert 0 <= floor["p50_us"] <= floor["p99_us"] <= floor["p999_us"] <= floor["max_us"]
    # What the figures depend on besides the store: the CPUs, the Python, the native core's build.
    assert doc["machine"] == {
        "cpus": len(os.sched_getaffinity(0)),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "python_executable": os.path.realpath(sys.executable),
        "native_build": _native.NATIVE_BUILD,
    }


def test_bench_table_and_bad_input(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    args = ["bench", "--rate", "1k", "--duration", "500ms", "--floor", "200ms", "--path", str(tmp_path / "s")]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "achieved" in out and "p99" in out and "of one core" in out and "in store calls" in out
    assert "with no store" in rows(out)["floor"]
    assert "in its calls" in rows(out)["store cpu"] and "schedule alone took" in rows(out)["store cpu"]
    assert "begun late" in rows(out)["rounds"]
    cpus = len(os.sched_getaffinity(0))
    assert rows(out)["machine"] == (
        f"{cpus} CPU{'s' if cpus != 1 else ''}, {platform.python_implementation()} {platform.python_version()} "
        f"({os.path.realpath(sys.executable)}), native core {_native.NATIVE_BUILD}"
    )
    assert main(["bench", "--rate", "fast"]) == 2
    assert "dedupstore: error:" in capsys.readouterr().err
    for bad in ("-1s", "11m", "soon"):
        code, _, err = run(capsys, "bench", "--floor", bad)
        assert code == 2 and "--floor" in err
    for nice in ("-1", "20", "lowest"):
        code, _, err = run(capsys, "bench", "--thread-nice", nice)
        assert code == 2 and "--thread-nice must be 0..19 (nice steps below the opening thread) or idle" in err
    for slice_ in ("50us", "1s", "long"):
        code, _, err = run(capsys, "bench", "--thread-slice", slice_)
        assert code == 2 and "--thread-slice" in err, err
        if slice_ != "long":
            assert "--thread-slice must be 0 (the kernel's own) or 100us..100ms" in err, err
    for interval in ("0.1ms", "2s"):
        code, _, err = run(capsys, "bench", "--apply-interval", interval)
        assert code == 2 and "--apply-interval must be 0 (no write-behind) or 500us..1s" in err, err
    for flag in ("--thread-cpus", "--consumer-cpus"):
        for cpus, message in (("x", "must be a CPU list such as"), ("3-1", "must be a CPU list such as"),
                              ("100000", "are not among the CPUs this process may run on")):
            code, _, err = run(capsys, "bench", flag, cpus)
            assert code == 2 and f"{flag} " in err and message in err, err


def test_bench_floor_zero_skips_it(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    doc = run_json(capsys, "bench", "--rate", "500", "--duration", "200ms", "--floor", "0",
                   "--path", str(tmp_path / "s"))
    assert "machine_floor" not in doc
    code, out, _ = run(capsys, "bench", "--rate", "500", "--duration", "200ms", "--floor", "0s",
                       "--path", str(tmp_path / "t"))
    assert code == 0 and "floor" not in rows(out)


def test_bench_reports_retention(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    doc = run_json(capsys, "bench", "--rate", "1000", "--duration", "1s", "--durability", "flush",
                   "--time-scale", "86400", "--mode", "batch", "--batch", "50", "--path", str(tmp_path / "s"),
                   "--floor", "0")
    assert doc["mode"] == "batch" and doc["batch"] == 50 and doc["time_scale"] == 86400
    assert doc["horizon_seconds"] == 43200 and doc["store_seconds"] > 43200
    assert set(doc["eviction"]) == {"enabled", "evicted", "lag_seconds_max", "lag_seconds_end",
                                    "frontier_advance_seconds"}
    assert set(doc["bloom"]) == {"enabled", "filters", "probe_reads", "probe_reads_per_event"}
    assert doc["bloom"]["probe_reads"] >= 0 and doc["bloom"]["probe_reads_per_event"] >= 0
    code, out, _ = run(capsys, "bench", "--rate", "500", "--duration", "300ms", "--no-eviction", "--no-bloom",
                       "--path", str(tmp_path / "t"), "--floor", "0")
    assert code == 0 and "eviction off" in rows(out)["retention"] and rows(out)["prefilter"] == "off"


def test_find_max_json_shape(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    # Two real (tiny) steps per ramp: the shape and the logic, not the figures.
    monkeypatch.setattr(bench, "find_max_rate", functools.partial(bench.find_max_rate, max_steps=2, refine=0))
    monkeypatch.setattr(bench, "RAMP_START", {"single": 200.0, "batch": 2000.0})
    doc = run_json(capsys, "bench", "--find-max", "--step", "300ms", "--durability", "flush", "--p99-limit", "5ms")
    assert doc["durability"] == "flush" and doc["p99_limit_us"] == 5000 and doc["step_seconds"] == 0.3
    assert set(doc["find_max"]) == {"single", "batch"}
    assert doc["machine"]["native_build"] == _native.NATIVE_BUILD
    for mode, res in doc["find_max"].items():
        assert res["mode"] == mode and res["batch"] == (1 if mode == "single" else 100)
        assert 1 <= len({s["rate"] for s in res["steps"]}) <= 2 and len(res["steps"]) <= 4  # a failed rate twice
        for step in res["steps"]:
            assert set(step) == {"rate", "achieved_rate", "p50_us", "p99_us", "cpu_share", "ok", "retry"}
            assert step["ok"] == (step["p99_us"] <= 5000 and step["achieved_rate"] >= 0.95 * step["rate"])
        passed = [s["rate"] for s in res["steps"] if s["ok"]]
        assert res["max_rate"] == (max(passed) if passed else None)
        assert res["capped"] == all(s["rate"] in passed for s in res["steps"])
    code, out, _ = run(capsys, "bench", "--find-max", "--step", "300ms", "--durability", "flush")
    assert code == 0 and set(rows(out)) == {"single claims", "batches of 100"}
    for row in rows(out).values():
        # Two steps each: a ramp whose steps all passed found only a lower bound, and says so.
        # ("2,000!, 2,000 again": a rate not sustained, then sustained at its second try.)
        tried = [t.replace(" again", "") for t in row.split("(tried ")[1].split(";")[0].split(", ")]
        failed = {t[:-1] for t in tried if t.endswith("!")} - {t for t in tried if not t.endswith("!")}
        assert row.startswith("at least ") == (not failed and not row.startswith("none"))
    # A limit no step can meet: the row says what the slowest step saw.
    code, out, _ = run(capsys, "bench", "--find-max", "--step", "300ms", "--durability", "flush", "--p99-limit", "1us")
    assert code == 0
    for label, row in rows(out).items():
        assert row.startswith("none sustained; at ") and " p50 " in row and " achieved  (tried " in row, (label, row)


def test_find_max_refuses_path_and_histogram(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    for extra in (["--path", str(tmp_path)], ["--histogram", str(tmp_path / "x.png")]):
        code, _, err = run(capsys, "bench", "--find-max", *extra)
        assert code == 2 and "--find-max" in err


def test_histogram_png(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "pics" / "latency.png"
    doc = run_json(capsys, "bench", "--rate", "1000", "--duration", "500ms", "--durability", "flush",
                   "--histogram", str(png), "--floor", "0")
    assert Path(doc["histogram"]) == png.resolve()
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_histogram_without_matplotlib_fails_first(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import raises ImportError
    code, out, err = run(capsys, "bench", "--duration", "10m", "--histogram", str(tmp_path / "x.png"))
    assert code == 2 and out == "" and "matplotlib" in err and "dedupstore[plot]" in err


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="CPU affinity is Linux's")
def test_bench_keeps_its_threads_on_the_cpus_given(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    allowed = os.sched_getaffinity(0)
    cpu = min(allowed)
    code = main(["bench", "--rate", "2000", "--duration", "1s", "--durability", "flush", "--path",
                 str(tmp_path / "s"), "--floor", "300ms", "--thread-cpus", str(max(allowed)),
                 "--consumer-cpus", str(cpu)])
    out = capsys.readouterr().out
    assert code == 0
    assert f"pinned      store's threads on CPU {max(allowed)}, consumer on CPU {cpu}" in out, out
    assert os.sched_getaffinity(0) == allowed  # the consumer's CPUs are given back after the run
    code = main(["bench", "--rate", "2000", "--duration", "1s", "--floor", "0", "--path", str(tmp_path / "t"),
                 "--thread-cpus", f"{cpu}-{max(allowed)}", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["thread_cpus"] == sorted(range(cpu, max(allowed) + 1)) and doc["consumer_cpus"] is None
