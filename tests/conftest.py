"""Shared fixtures: a store in a temporary directory with an injectable clock, and the
authorities the conformance tests run against (the store, and sync/async clients of it)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _service import KINDS
from _service import authority as _authority

from dedupstore import DedupStore, _native


class FakeClock:
    """A settable clock (seconds since the epoch), for leases and horizons."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture(params=["direct", "py-lmdb"])
def lmdb_way(request: pytest.FixtureRequest) -> Iterator[str]:
    """Applies and eviction by LMDB's own calls (the default) or py-lmdb's
    (where the direct way is not available: dedupstore/_lmdb.pxi)."""
    _native.set_lmdb_direct(request.param == "direct")
    assert _native.lmdb_direct()[0] == (request.param == "direct")
    yield request.param
    _native.set_lmdb_direct(True)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def store(store_path: Path, clock: FakeClock) -> Iterator[DedupStore]:
    s = DedupStore.open(store_path, clock=clock, partitions=2)
    s.ensure_namespace("orders", horizon="1h", lease="30s")
    try:
        yield s
    finally:
        s.close()


@pytest.fixture(params=KINDS)
def authority(request: pytest.FixtureRequest, store: DedupStore) -> Iterator[Any]:
    """The ``store`` fixture itself, or a sync or async client of a server over it (same clock)."""
    with _authority(request.param, store) as auth:
        yield auth
