"""benches/bench_peers.py: the peer comparison's logic and output shape, on
the peers every test machine has (py-lmdb, sqlite3). Redis and diskcache are
optional: a missing one is skipped with a line saying so. No timing is judged."""

from __future__ import annotations

import json
import os
import platform
import sys
from pathlib import Path
from types import ModuleType

import _benches
import pytest


@pytest.fixture(scope="module")
def peers() -> ModuleType:
    return _benches.load("bench_peers")


@pytest.mark.slow  # thousands of fsynced single commits per side
def test_every_side_sees_the_same_first_claims(
    peers: ModuleType, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # 1,500 events: redeliveries and conflicts start 1,000 events in.
    assert peers.main(["--events", "1500", "--single-events", "1500", "--chunk", "100", "--batch", "50",
                       "--only", "py-lmdb,sqlite3", "--dir", str(tmp_path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) == {"header", "single", "batch", "repeat"}
    for shape, batch in (("single", 1), ("batch", 50), ("repeat", 1)):
        res = doc[shape]
        assert res["events"] == 1500 and res["batch"] == batch
        assert set(res["sides"]) == {"dedupstore", "py-lmdb", "sqlite3"}
        for side in res["sides"].values():
            assert side["agrees"] and side["claims_per_s"] > 0 and side["us_per_claim"] > 0
        firsts = {side["first_seen"] for side in res["sides"].values()}
        assert len(firsts) == 1
        if shape == "repeat":
            assert firsts == {0}
        else:
            assert 1400 < firsts.pop() < 1500  # repeats were answered as such
        assert res["sides"]["dedupstore"]["ours_over_this"] == 1.0
    assert list(tmp_path.iterdir()) == []  # the temporary stores are gone


def test_missing_peers_are_skipped_with_a_line(
    peers: ModuleType, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(peers.shutil, "which", lambda name: None)
    monkeypatch.setitem(sys.modules, "diskcache", None)
    assert peers.main(["--quick", "--events", "200", "--only", "redis,diskcache", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "redis: skipped: redis-server is not installed" in out
    assert "diskcache: skipped: diskcache is not installed" in out
    assert "target vs redis (>= 40x): not measured (redis skipped)" in out
    assert "dedupstore " in out  # our own row is still there
    # What the figures depend on besides the code: the Python and the native core's build.
    assert f"Python {platform.python_version()} ({os.path.realpath(sys.executable)}), native core " in out
