"""The planning verbs of the ``dedupstore`` command line: ``size``, ``plan checkpoint``, ``plan backfill``.

The seed's worked figures (event-processing-idempotent-effects.txt) are the oracle: they must come
out exactly, in the table and in JSON.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _cli import rows, run, run_json

from dedupstore import planning

SIZE = ["size", "--rate", "18000", "--horizon", "12h", "--entry-bytes", "96"]
CHECKPOINT = ["plan", "checkpoint", "--rate", "18000", "--interval", "30s", "--recovery-rate", "24000"]
BACKFILL = [
    "plan", "backfill", "--events", "1.2e9", "--capacity", "25000",
    "--live-reserve", "20000", "--control-reserve", "1000",
]  # fmt: skip

SIZE_KEYS = {
    "command", "rate", "horizon_seconds", "entry_bytes", "replicas", "amplification", "replay_windows",
    "entries", "logical_bytes", "storage_bytes", "storage_gb", "violations", "valid",
}  # fmt: skip
CHECKPOINT_KEYS = {
    "command", "rate", "interval_seconds", "recovery_rate", "restore_seconds", "hot_key_slowdown_percent",
    "replayed_average", "replayed_worst", "net_catch_up_rate", "ideal_catch_up_average_seconds",
    "ideal_catch_up_worst_seconds", "restore_backlog", "catch_up_average_seconds", "catch_up_worst_seconds",
}  # fmt: skip
BACKFILL_KEYS = {
    "command", "events", "capacity", "live_reserve", "control_reserve", "rate_cap", "duration_seconds",
    "duration_hours",
}  # fmt: skip




def assert_one_line_error(err: str, kind: str = "error") -> str:
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"dedupstore: {kind}: "), err
    return lines[0]


# --- size ------------------------------------------------------------------------------------------


def test_size_reproduces_the_seed_figures(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, *SIZE)
    assert (code, err) == (0, "")
    table = rows(out)
    assert table["entries"] == "777,600,000"
    assert table["storage"] == "74.6496 GB (74,649,600,000 bytes)"
    assert table["horizon"] == "12h (43,200 s)"
    # With one replica and no amplification there is nothing to say about multipliers.
    assert "replicas" not in table and "amplification" not in table


def test_size_entry_bytes_defaults_to_the_seed_model(capsys: pytest.CaptureFixture[str]) -> None:
    document = run_json(capsys, "size", "--rate", "18k", "--horizon", "12h")
    assert document["entry_bytes"] == 96
    assert document["storage_bytes"] == 74_649_600_000


def test_size_json(capsys: pytest.CaptureFixture[str]) -> None:
    document = run_json(capsys, *SIZE)
    assert set(document) == SIZE_KEYS
    assert document["command"] == "size"
    assert document["entries"] == 777_600_000
    assert isinstance(document["entries"], int)
    assert document["storage_bytes"] == 74_649_600_000
    assert document["storage_gb"] == 74.6496
    assert document["rate"] == 18000 and document["horizon_seconds"] == 43200
    assert (document["replicas"], document["amplification"]) == (1, 1)
    assert document["replay_windows"] == [] and document["violations"] == []
    assert document["valid"] is True


def test_size_replicas_and_amplification_multiply_and_say_so(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [*SIZE, "--replicas", "3", "--amplification", "1.5"]
    code, out, _ = run(capsys, *argv)
    assert code == 0
    table = rows(out)
    assert table["logical size"].startswith("74.6496 GB (74,649,600,000 bytes)")
    assert table["replicas"] == "3 (multiplies storage)"
    assert table["amplification"] == "1.5 (multiplies storage)"
    assert table["storage"] == (
        "335.9232 GB (335,923,200,000 bytes) = logical size x 3 replicas x 1.5 amplification"
    )
    document = run_json(capsys, *argv)
    assert document["logical_bytes"] == 74_649_600_000
    assert document["storage_bytes"] == 335_923_200_000
    assert (document["replicas"], document["amplification"]) == (3, 1.5)


def test_size_window_longer_than_horizon_is_invalid_and_named(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [*SIZE, "--replay-window", "producer-retry=5m", "--replay-window", "approved-replay=7d"]
    code, out, err = run(capsys, *argv)
    assert code == 3
    table = rows(out)
    assert table["window approved-replay"] == (
        "1w (604,800 s), LONGER than the horizon 12h (43,200 s): invalid"
    )
    assert table["window producer-retry"] == "5m (300 s), within the horizon"
    line = assert_one_line_error(err, "plan invalid")
    assert "approved-replay 1w (604,800 s)" in line and "12h (43,200 s)" in line
    assert "producer-retry" not in line

    document = run_json(capsys, *argv, expect=3)
    assert document["valid"] is False
    assert document["replay_windows"] == [
        {"name": "producer-retry", "seconds": 300},
        {"name": "approved-replay", "seconds": 604800},
    ]
    assert document["violations"] == [
        {"name": "approved-replay", "window_seconds": 604800, "horizon_seconds": 43200}
    ]


def test_size_window_exactly_the_horizon_is_covered(capsys: pytest.CaptureFixture[str]) -> None:
    # The edge: an event replayed exactly one horizon late still finds its evidence (SPEC section 5).
    assert run(capsys, *SIZE, "--replay-window", "broker-retention=12h")[0] == 0
    code, _, err = run(capsys, *SIZE, "--replay-window", "broker-retention=43201s")
    assert code == 3
    assert "broker-retention" in assert_one_line_error(err, "plan invalid")


def test_size_accepts_any_window_name(capsys: pytest.CaptureFixture[str]) -> None:
    document = run_json(capsys, *SIZE, "--replay-window", "nightly reconciliation=1h")
    assert document["replay_windows"] == [{"name": "nightly reconciliation", "seconds": 3600}]


# --- plan checkpoint -------------------------------------------------------------------------------


def test_checkpoint_reproduces_the_seed_figures(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, *CHECKPOINT)
    assert (code, err) == (0, "")
    table = rows(out)
    assert table["replayed, average"].startswith("270,000 events")
    assert table["replayed, worst case"].startswith("540,000 events")
    assert table["net catch-up"].startswith("6,000 events/s")
    assert table["ideal catch-up"].startswith("45 s average, 90 s worst case")
    # Without a restore time or a slowdown, the ideal figures are the whole story.
    assert "catch-up" not in table


def test_checkpoint_json(capsys: pytest.CaptureFixture[str]) -> None:
    document = run_json(capsys, *CHECKPOINT)
    assert set(document) == CHECKPOINT_KEYS
    assert document == {
        "command": "plan checkpoint",
        "rate": 18000,
        "interval_seconds": 30,
        "recovery_rate": 24000,
        "restore_seconds": 0,
        "hot_key_slowdown_percent": 0,
        "replayed_average": 270000,
        "replayed_worst": 540000,
        "net_catch_up_rate": 6000,
        "ideal_catch_up_average_seconds": 45,
        "ideal_catch_up_worst_seconds": 90,
        "restore_backlog": 0,
        "catch_up_average_seconds": 45,
        "catch_up_worst_seconds": 90,
    }


def test_checkpoint_restore_time_and_hot_key_slowdown(capsys: pytest.CaptureFixture[str]) -> None:
    # The seed's drill: a measured restore (here 20 s) and a 25% hot-key slowdown. During the restore
    # 18,000 x 20 = 360,000 more events arrive; the drain of (replayed + those) at 6,000 events/s
    # takes 25% longer: average 20 + 630,000 / 6,000 x 1.25 = 151.25 s, worst 20 + 900,000 / 6,000
    # x 1.25 = 207.5 s.
    argv = [*CHECKPOINT, "--restore-time", "20s", "--hot-key-slowdown", "25%"]
    code, out, _ = run(capsys, *argv)
    assert code == 0
    table = rows(out)
    assert table["restore time"] == "20 s; 360,000 events arrive meanwhile"
    assert table["hot-key slowdown"] == "25%: catch-up x 1.25"
    assert table["catch-up"].startswith("151.25 s average, 207.5 s worst case")
    document = run_json(capsys, *argv)
    assert document["restore_backlog"] == 360000
    assert document["catch_up_average_seconds"] == 151.25
    assert document["catch_up_worst_seconds"] == 207.5
    # The ideal figures stay the seed's.
    assert (document["ideal_catch_up_average_seconds"], document["ideal_catch_up_worst_seconds"]) == (45, 90)
    assert run_json(capsys, *CHECKPOINT, "--hot-key-slowdown", "25")["catch_up_worst_seconds"] == 112.5


@pytest.mark.parametrize("recovery_rate", ["18000", "17999", "1"])
def test_checkpoint_refuses_a_recovery_rate_that_never_catches_up(
    capsys: pytest.CaptureFixture[str], recovery_rate: str
) -> None:
    argv = ["plan", "checkpoint", "--rate", "18000", "--interval", "30s", "--recovery-rate", recovery_rate]
    code, out, err = run(capsys, *argv)
    assert (code, out) == (3, "")
    line = assert_one_line_error(err, "plan invalid")
    assert "18,000 events/s" in line and "never drain" in line


# --- plan backfill ---------------------------------------------------------------------------------


def test_backfill_reproduces_the_seed_figures(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, *BACKFILL)
    assert (code, err) == (0, "")
    table = rows(out)
    assert table["backfill cap"].startswith("4,000 events/s")
    assert table["duration"].startswith("300,000 s = 83.33 h")
    assert table["events"] == "1,200,000,000"


def test_backfill_json(capsys: pytest.CaptureFixture[str]) -> None:
    document = run_json(capsys, *BACKFILL)
    assert set(document) == BACKFILL_KEYS
    assert document["command"] == "plan backfill"
    assert (document["events"], document["capacity"]) == (1_200_000_000, 25000)
    assert (document["live_reserve"], document["control_reserve"]) == (20000, 1000)
    assert document["rate_cap"] == 4000
    assert document["duration_seconds"] == 300000
    assert document["duration_hours"] == pytest.approx(83.3333333333)


@pytest.mark.parametrize(
    ("live", "control", "verdict"),
    [("20000", "6000", "26,000 events/s exceed"), ("24000", "1000", "25,000 events/s use up")],
)
def test_backfill_refuses_reserves_that_leave_nothing(
    capsys: pytest.CaptureFixture[str], live: str, control: str, verdict: str
) -> None:
    argv = ["plan", "backfill", "--events", "1.2e9", "--capacity", "25000"]
    code, out, err = run(capsys, *argv, "--live-reserve", live, "--control-reserve", control)
    assert (code, out) == (3, "")
    line = assert_one_line_error(err, "plan invalid")
    assert verdict in line and "the capacity 25,000 events/s" in line


# --- bad input -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        (["size", "--rate", "18000", "--horizon", "12 hours"], "--horizon"),
        (["size", "--rate", "18000", "--horizon", "-1h"], "--horizon"),
        (["size", "--rate", "lots", "--horizon", "12h"], "--rate"),
        (["size", "--rate", "0", "--horizon", "12h"], "--rate"),
        (["size", "--rate", "nan", "--horizon", "12h"], "--rate"),
        (["size", "--rate", "18000", "--horizon", "12h", "--replicas", "2.5"], "--replicas"),
        (["size", "--rate", "18000", "--horizon", "12h", "--replica", "2"], "--replica"),
        (["size", "--rate", "18000", "--horizon", "12h", "--replay-window", "7d"], "NAME=DURATION"),
        (["size", "--rate", "18000", "--horizon", "12h", "--replay-window", "dlq=soon"], "'dlq'"),
        (
            ["size", "--rate", "1", "--horizon", "1h", "--replay-window", "a=1h", "--replay-window", "a=2h"],
            "more than once",
        ),
        (["size", "--rate", "1e300", "--horizon", "36500d"], "overflow"),
        (["size", "--horizon", "12h"], "--rate"),
        ([*CHECKPOINT[:-1], "24k/s"], "--recovery-rate"),
        ([*CHECKPOINT, "--hot-key-slowdown", "a lot"], "--hot-key-slowdown"),
        ([*BACKFILL[:3], "1.2 billion", *BACKFILL[4:]], "--events"),
        ([*BACKFILL[:-1], "-5"], "--control-reserve"),
        (["plan"], "PLAN"),
        (["plan", "rollout"], "rollout"),
        ([], "VERB"),
        (["sizes"], "sizes"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], names: str
) -> None:
    code, out, err = run(capsys, *argv)
    assert (code, out) == (2, "")
    assert names in assert_one_line_error(err)


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "plan", "backfill", "--help")
    assert code == 0
    assert "--control-reserve" in out


# --- the module itself, as people run it -----------------------------------------------------------


def python_m(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    # cwd elsewhere so that the source tree does not shadow the package under test; PYTHONPATH is
    # inherited, so this runs the installed package, or a scratch copy named on PYTHONPATH.
    return subprocess.run(
        [sys.executable, "-m", "dedupstore", *argv],
        cwd=tmp_path,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_python_m_dedupstore_size(tmp_path: Path) -> None:
    done = python_m(tmp_path, *SIZE)
    assert (done.returncode, done.stderr) == (0, "")
    table = rows(done.stdout)
    assert table["entries"] == "777,600,000"
    assert table["storage"] == "74.6496 GB (74,649,600,000 bytes)"

    done = python_m(tmp_path, "size", "--rate", "18000", "--horizon", "twelve hours")
    assert (done.returncode, done.stdout) == (2, "")
    assert "--horizon" in assert_one_line_error(done.stderr)


# --- the arithmetic, without the command line -----------------------------------------------------


def test_planning_functions_return_frozen_records() -> None:
    sizing = planning.size(rate=18000, horizon_seconds=43200)
    assert (sizing.entries, sizing.storage_bytes, sizing.storage_gb) == (777_600_000, 74_649_600_000, 74.6496)
    with pytest.raises(dataclasses.FrozenInstanceError):
        sizing.entries = 0  # type: ignore[misc]
    replay = planning.checkpoint(rate=18000, interval_seconds=30, recovery_rate=24000)
    assert (replay.replayed_average, replay.replayed_worst) == (270000, 540000)
    assert replay.net_catch_up_rate == 6000
    assert (replay.ideal_catch_up_average_seconds, replay.ideal_catch_up_worst_seconds) == (45, 90)
    fill = planning.backfill(events=1.2e9, capacity=25000, live_reserve=20000, control_reserve=1000)
    assert (fill.rate_cap, fill.duration_seconds) == (4000, 300000)


def test_planning_refusals_are_value_errors() -> None:
    # Library callers catch ValueError; the CLI tells a broken plan (exit 3) from bad input (exit 2).
    with pytest.raises(planning.InfeasiblePlanError):
        planning.checkpoint(rate=18000, interval_seconds=30, recovery_rate=18000)
    with pytest.raises(ValueError, match="27,000 events/s exceed the capacity 25,000"):
        planning.backfill(events=1, capacity=25000, live_reserve=26000, control_reserve=1000)
    with pytest.raises(ValueError, match="replicas"):
        planning.size(rate=1, horizon_seconds=1, replicas=0)
    with pytest.raises(ValueError, match="rate"):
        planning.size(rate=float("nan"), horizon_seconds=1)
