"""BatchResult: a lazy sequence of ClaimResult whose columns need no objects."""

from __future__ import annotations

import pytest

from dedupstore import BatchResult, ClaimResult, DedupStore, Status


def _lazy(n: int, built: list[int]) -> BatchResult:
    statuses = [Status.NEW if i % 2 == 0 else Status.DUPLICATE for i in range(n)]
    tokens: list[int | None] = [i + 100 if i % 2 == 0 else None for i in range(n)]

    def make(i: int) -> ClaimResult:
        built.append(i)
        return ClaimResult.from_record(statuses[i], tokens[i], None, "ns", f"k{i}".encode(), None)

    return BatchResult(statuses=statuses, tokens=tokens, retry_after=[None] * n, make=make)


def test_columns_and_counts_build_no_results() -> None:
    built: list[int] = []
    b = _lazy(5, built)
    assert len(b) == 5
    assert b.counts()[Status.NEW] == 3 and b.counts()[Status.DUPLICATE] == 2
    assert b.tokens == [100, None, 102, None, 104]
    assert b.statuses[1] is Status.DUPLICATE
    assert built == []


def test_items_are_built_once_on_access_with_python_indexing() -> None:
    built: list[int] = []
    b = _lazy(5, built)
    assert b[-1].key == b"k4" and b[-1] is b[4]
    assert [r.key for r in b[1:4:2]] == [b"k1", b"k3"]
    assert [r.token for r in b] == b.tokens
    assert sorted(built) == [0, 1, 2, 3, 4]  # each once
    for bad in (5, -6):
        with pytest.raises(IndexError):
            b[bad]


def test_a_partial_constructor_is_refused() -> None:
    with pytest.raises(TypeError, match="statuses, tokens, retry_after and make"):
        BatchResult(statuses=[Status.NEW])


@pytest.mark.parametrize("durability", ["sync", "flush"])
def test_claim_many_columns_match_its_results(tmp_path, durability: str) -> None:  # type: ignore[no-untyped-def]
    # claim_many's BatchResult is made in C (_native's _batch_result), its
    # ClaimResults on first access.
    with DedupStore.open(tmp_path / "s", eviction_rate=0, durability=durability) as store:
        store.ensure_namespace("ns", lease="30s")
        store.claim_many("ns", ["a", "b"])
        batch = store.claim_many("ns", ["a", "c", "c"])
        assert isinstance(batch, BatchResult) and batch._results == [None] * 3  # noqa: SLF001 - none made yet
        assert batch[1] is batch[-2] and isinstance(batch[1], ClaimResult) and batch[1].key == b"c"
        assert batch.statuses == [r.status for r in batch] == [Status.IN_PROGRESS, Status.NEW, Status.IN_PROGRESS]
        assert batch.tokens == [r.token for r in batch]
        assert batch.retry_after == [r.retry_after for r in batch]
        assert batch.retry_after[0] is not None and 0 < batch.retry_after[0] <= 30


def test_a_claim_result_pickles_with_its_record(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # A verdict may be handed to another process (multiprocessing pickles it).
    import pickle

    with DedupStore.open(tmp_path / "s", durability="flush") as store:
        store.ensure_namespace("ns")
        first = store.claim("ns", "k", b"intent")
        store.complete("ns", "k", first.token, b"done")
        dup = store.claim("ns", "k", b"intent")
        for res in (first, dup, ClaimResult.from_record(Status.NEW, 7, None, "ns", b"x", None)):
            back = pickle.loads(pickle.dumps(res))
            assert type(back) is ClaimResult and repr(back) == repr(res)
            assert (back.status, back.token, back.key, back.outcome) == (res.status, res.token, res.key, res.outcome)
            assert back.record == res.record
        assert pickle.loads(pickle.dumps(dup)).outcome == b"done"
