"""``dedupstore size --measure``: a sample store of our own format, measured, projected beside the model."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from _cli import rows, run, run_json

from dedupstore.cli.size import sample_keys

SIZE = ["size", "--rate", "18000", "--horizon", "12h", "--entry-bytes", "96"]
MEASURE = [*SIZE, "--measure", "--sample-keys", "5000"]
MEASURED_KEYS = {
    "sample_keys", "sample_key_bytes", "sample_outcome_bytes", "measured_entry_bytes", "measured_method",
    "measured_used_page_bytes", "measured_live_page_bytes", "measured_file_block_bytes", "measured_storage_bytes",
    "measured_storage_gb",
}  # fmt: skip


@pytest.fixture(autouse=True)
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The sample store's temporary directory goes under tmp_path, so a leftover would show."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    return scratch




def test_measure_json(capsys: pytest.CaptureFixture[str], private_tmp: Path) -> None:
    document = run_json(capsys, *MEASURE)
    assert set(document) >= MEASURED_KEYS
    # The model's figures are untouched.
    assert (document["entry_bytes"], document["storage_bytes"]) == (96, 74_649_600_000)
    assert (document["sample_keys"], document["sample_key_bytes"], document["sample_outcome_bytes"]) == (5000, 55, 16)
    measured = document["measured_entry_bytes"]
    assert 60 < measured < 2000
    assert document["measured_method"] == "used_pages"
    assert measured == round(document["measured_used_page_bytes"] / 5000, 2)
    # Each record alone is 68 + 55 + 16 bytes of value and 61 of key; the pages hold more than that.
    assert document["measured_live_page_bytes"] / 5000 > 68 + 55 + 16 + 6
    assert document["measured_live_page_bytes"] <= document["measured_used_page_bytes"]
    assert document["measured_file_block_bytes"] > 0
    assert document["measured_storage_bytes"] == round(777_600_000 * measured)
    assert document["measured_storage_gb"] == round(777_600_000 * measured / 1e9, 4)
    assert list(private_tmp.iterdir()) == []  # the sample store is gone


def test_measure_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, *MEASURE, "--replicas", "3")
    assert (code, err) == (0, "")
    table = rows(out)
    assert table["entry size"] == "96 bytes (a model: measure the real overhead)"
    assert table["measured sample"].startswith("5,000 keys of 55 bytes, completed with 16-byte outcomes, 4 partitions")
    assert table["measured sample"].endswith("a sample this small overstates the steady state")
    assert table["pages in use"].endswith("bytes per entry (used)")
    assert "reported, not used" in table["live pages"] and "reported, not used" in table["data.mdb blocks"]
    entry = float(table["measured entry"].split()[0].replace(",", ""))
    assert 60 < entry < 2000
    storage = table["measured storage"]
    assert storage.endswith("= entries x measured entry x 3 replicas x 1 amplification")
    stored = int(storage.split("(")[1].split()[0].replace(",", ""))
    assert stored == round(777_600_000 * entry * 3)


def test_measure_follows_key_and_outcome_sizes(capsys: pytest.CaptureFixture[str]) -> None:
    small = run_json(capsys, *MEASURE, "--key-bytes", "20", "--outcome-bytes", "0")
    large = run_json(capsys, *MEASURE, "--key-bytes", "200", "--outcome-bytes", "500")
    per = {name: d["measured_live_page_bytes"] / 5000 for name, d in (("small", small), ("large", large))}
    # 180 more key bytes (stored twice while PENDING, once after) and 500 more outcome bytes per record.
    assert per["large"] - per["small"] > 680
    assert (large["sample_key_bytes"], large["sample_outcome_bytes"]) == (200, 500)


def test_measure_still_judges_replay_windows(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, *MEASURE, "--replay-window", "approved-replay=7d")
    assert code == 3
    assert "measured entry" in rows(out)
    assert err.startswith("dedupstore: plan invalid: ")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--sample-keys", "1000"], "--sample-keys only applies with --measure"),
        (["--key-bytes", "20"], "--key-bytes only applies with --measure"),
        (["--outcome-bytes", "20"], "--outcome-bytes only applies with --measure"),
        (["--measure", "--sample-keys", "0"], "--sample-keys must be a whole number in 1..100,000,000"),
        (["--measure", "--sample-keys", "2.5"], "--sample-keys must be a whole number"),
        (["--measure", "--key-bytes", "0"], "--key-bytes must be a whole number in 1..400"),
        (["--measure", "--key-bytes", "401"], "--key-bytes must be a whole number in 1..400"),
        (["--measure", "--outcome-bytes", "-1"], "--outcome-bytes '-1' is not a number"),
        (["--measure", "--outcome-bytes", "17M"], "--outcome-bytes must be a whole number in 0..16,777,216"),
        (["--measure", "--key-bytes", "1", "--sample-keys", "17"], "allows only 16 distinct sample keys"),
    ],
)
def test_measure_bad_flags_are_exit_2(
    capsys: pytest.CaptureFixture[str], private_tmp: Path, extra: list[str], message: str
) -> None:
    code, out, err = run(capsys, *SIZE, *extra)
    assert (code, out) == (2, "")
    assert "Traceback" not in err and len(err.splitlines()) == 1
    assert err.startswith("dedupstore: error: ") and message in err, err
    assert list(private_tmp.iterdir()) == []  # refused before anything was built


def test_sample_keys_are_distinct_sized_and_scattered() -> None:
    keys = [k for batch in sample_keys(5000, 55) for k in batch]
    assert len(keys) == len(set(keys)) == 5000
    assert {len(k) for k in keys} == {55}
    assert keys != sorted(keys)
    assert [len(b) for b in sample_keys(2500, 8)] == [1000, 1000, 500]
    tiny = [k for batch in sample_keys(16, 1) for k in batch]
    assert sorted(tiny) == [f"{i:x}".encode() for i in range(16)]
