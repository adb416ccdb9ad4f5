"""`dedupstore bench`: the documented JSON schema and a sane short run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dedupstore.cli.main import main


@pytest.mark.parametrize("durability", ["sync", "flush"])
def test_bench_json_schema(capsys: pytest.CaptureFixture[str], tmp_path: Path, durability: str) -> None:
    code = main(
        ["bench", "--rate", "2000", "--duration", "1s", "--durability", durability,
         "--path", str(tmp_path / "s"), "--json"]
    )
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    for key in ("achieved_rate", "p50_us", "p99_us", "p999_us", "cpu_share", "verdicts", "bytes_on_disk", "events"):
        assert key in doc
    assert doc["events"] == 2000
    assert sum(doc["verdicts"].values()) == 2000
    assert doc["verdicts"]["NEW"] > 1500 and doc["verdicts"]["BEYOND_HORIZON"] > 0
    assert 0 < doc["p50_us"] <= doc["p99_us"] <= doc["p999_us"] <= doc["max_us"]
    assert doc["achieved_rate"] > 0 and doc["cpu_share"] > 0 and doc["bytes_on_disk"] > 0


def test_bench_table_and_bad_input(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["bench", "--rate", "1k", "--duration", "500ms", "--path", str(tmp_path / "s")]) == 0
    out = capsys.readouterr().out
    assert "achieved" in out and "p99" in out and "of one core" in out
    assert main(["bench", "--rate", "fast"]) == 2
    assert "dedupstore: error:" in capsys.readouterr().err
