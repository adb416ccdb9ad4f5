"""scripts/pgo_train.py, the training run of a profile-guided build
(setup.py's BuildExt, which scripts/dev.sh asks for): a build whose training
fails fails, so the script must keep running against the package as it is."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_training_runs_every_shape_against_the_installed_package(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "pgo_train.py"), "--seconds", "0.2"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    trained = re.search(r"pgo_train: training (\S+) \((\S+) build\)", proc.stderr)
    assert trained is not None, proc.stderr
    import dedupstore._native

    assert Path(trained.group(1)).resolve() == Path(dedupstore._native.__file__).resolve()
    # Outside a training run the module is never the instrumented build.
    assert trained.group(2) == dedupstore._native.NATIVE_BUILD
    assert trained.group(2) in {"plain", "profile-guided", "debug"}
    runs = re.findall(r"pgo_train: (\w+) (\w+): ([\d,]+) events claimed", proc.stderr)
    assert [(d, m) for d, m, _ in runs] == [
        ("flush", "poll"), ("flush", "single"), ("flush", "batch"), ("sync", "poll"), ("sync", "batch"),
    ]
    assert all(int(n.replace(",", "")) > 0 for _, _, n in runs)
    # Then the default clock's path (time.time, read by the native code),
    # which no load-generator run takes: every event claimed, new and
    # redelivered ones among them.
    default = re.findall(
        r"pgo_train: (\w+), default clock \(([\w.]+)\): ([\d,]+) events claimed, ([\d,]+) new, ([\d,]+) duplicates",
        proc.stderr,
    )
    assert [(d, clock) for d, clock, *_ in default] == [("flush", "time.time"), ("sync", "time.time")], proc.stderr
    for _, _, events, new, dups in default:
        assert int(events.replace(",", "")) == 20_000
        assert int(new.replace(",", "")) > 0 and int(dups.replace(",", "")) > 0


def test_a_bad_argument_is_refused_naming_it(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "pgo_train.py"), "--seconds", "soon"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 2
    assert "--seconds" in proc.stderr
