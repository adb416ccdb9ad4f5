"""benches/bench_live_seed.py: every size rolls the filter once per rep, the JSON has
the documented shape, and a size past LIVE_PENDING_MAX is not read into the
filter. No timing is judged."""

from __future__ import annotations

import json
from types import ModuleType

import _benches
import pytest

from dedupstore import _native


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return _benches.load("bench_live_seed")


def test_every_size_is_seeded(bench: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["--sizes", "0,50", "--reps", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["reps"] == 2 and out["live_pending_max"] == _native.LIVE_PENDING_MAX
    assert [r["unresolved"] for r in out["rows"]] == [0, 50]
    for row in out["rows"]:
        assert row["read_into_filter"] is True
        assert row["seeding_claim_ms"] > 0 and row["next_claim_us"] > 0


def test_too_many_are_not_read(
    bench: ModuleType, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_native, "LIVE_PENDING_MAX", 10)
    assert bench.main(["--sizes", "30", "--reps", "1"]) == 0
    line = capsys.readouterr().out.splitlines()[-1].split()
    assert line[:2] == ["30", "no"], line


@pytest.mark.parametrize("args", [["--sizes", "a"], ["--sizes", "-1"], ["--reps", "0"]])
def test_bad_arguments_are_refused(bench: ModuleType, args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        bench.main(args)
    assert exc.value.code == 2
    assert "--" in capsys.readouterr().err
