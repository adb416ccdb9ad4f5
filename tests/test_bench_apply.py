"""benches/bench_apply.py: every size is applied and measured, with and
without checkpoints between applies, and its JSON has the documented shape.
No timing is judged."""

from __future__ import annotations

import json
from types import ModuleType

import _benches
import pytest

from dedupstore import _native


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return _benches.load("bench_apply")


@pytest.mark.parametrize(
    "extra",
    [[], ["--complete", "--checkpoint-every", "0"], ["--py-lmdb"]],
    ids=["claims", "completed-pinned", "py-lmdb"],
)
def test_every_size_is_applied(bench: ModuleType, extra: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["--quick", "--json", *extra]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["lmdb_direct"] is ("--py-lmdb" not in extra)
    assert _native.lmdb_direct()[0]  # the default again afterwards
    assert out["base"] == 2000 and out["reps"] == 3 and out["complete"] == ("--complete" in extra)
    assert [row["keys"] for row in out["rows"]] == [1, 16]
    for row in out["rows"]:
        # Every apply wrote pages (LMDB's commit) and took CPU.
        assert row["apply_us"] > 0 and row["per_key_us"] > 0 and row["bytes_per_key"] >= 4096 // row["keys"], row
    assert set(out["page_write_us"]) == {"filled_by_4096", "filled_by_1048576"}
    assert all(v > 0 for v in out["page_write_us"].values())


def test_one_size_has_no_marginal_cost(bench: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    # A marginal cost needs two sizes; one size is still measured and printed.
    assert bench.main(["--base", "100", "--sizes", "4", "--reps", "2"]) == 0
    out = capsys.readouterr().out
    assert "each key past" not in out
    assert any(line.split()[:1] == ["4"] for line in out.splitlines()), out


@pytest.mark.parametrize("sizes", ["16,1", "0,4", "4,4", "a,b"])
def test_bad_sizes_are_refused(bench: ModuleType, sizes: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        bench.main(["--sizes", sizes])
    assert exc.value.code == 2
    assert "--sizes" in capsys.readouterr().err
