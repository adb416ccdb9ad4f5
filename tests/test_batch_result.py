"""BatchResult: a lazy sequence of ClaimResult whose columns need no objects."""

from __future__ import annotations

import pytest
from conftest import FakeClock

from dedupstore import BatchResult, ClaimResult, DedupStore, Record, RecordState, Status, _native


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
        assert isinstance(batch, BatchResult) and batch._results is None  # noqa: SLF001 - none made yet
        assert batch[1] is batch[-2] and isinstance(batch[1], ClaimResult) and batch[1].key == b"c"
        assert batch.statuses == [r.status for r in batch] == [Status.IN_PROGRESS, Status.NEW, Status.IN_PROGRESS]
        assert batch.tokens == [r.token for r in batch]
        assert batch.retry_after == [r.retry_after for r in batch]
        assert batch.retry_after[0] is not None and 0 < batch.retry_after[0] <= 30
        assert len(batch) == 3 and batch.counts() == {s: batch.statuses.count(s) for s in Status}
        # Each column read is the reader's own copy.
        for column in ("statuses", "tokens", "retry_after"):
            got = getattr(batch, column)
            got.clear()
            assert len(getattr(batch, column)) == 3, column
        # No column is kept, and with no key IN_PROGRESS it reads as None
        # for each key all the same.
        fresh = store.claim_many("ns", ["d", "e"])
        assert fresh._retry is None and fresh._statuses is None and fresh._tokens is None  # noqa: SLF001
        assert fresh.retry_after == [None, None] == [r.retry_after for r in fresh]
        assert [r.key for r in fresh] == [b"d", b"e"] and fresh._results == [fresh[0], fresh[1]]  # noqa: SLF001
        for bad in (2, -1):  # the C method checks its index itself
            with pytest.raises(IndexError, match="out of range"):
                fresh._verdict(bad)  # noqa: SLF001


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


def _record_by_init(namespace: str, key: bytes, generation: int, raw: bytes, now_us: int) -> Record:
    # The dataclass's own constructor, from the decoded fields: what the
    # native Record.from_raw must build without calling it.
    (state, _flags, attempts, first_seen, until, token, intent, event_time, other_events, claimant, event_id,
     outcome) = _native.decode_record(raw)
    done = state == _native.STATE_COMPLETED
    return Record(
        namespace=namespace, key=key,
        state=RecordState.COMPLETED if done else RecordState.PENDING if until > now_us else RecordState.UNKNOWN,
        intent_digest=intent, first_seen=first_seen / 1e6, lease_expires=None if done else until / 1e6,
        completed_at=until / 1e6 if done else None, token=token, attempts=attempts,
        event_time=None if event_time == _native.NO_TIME else event_time / 1e6, event_id=event_id,
        claimant=claimant, outcome=outcome if done else None, other_events=other_events, generation=generation,
    )


def test_records_made_natively_equal_the_dataclass_constructor(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import dataclasses
    import pickle

    clock = FakeClock()
    with DedupStore.open(tmp_path / "s", durability="flush", clock=clock) as store:
        store.ensure_namespace("ns", lease="30s")
        # Every optional field both set and unset; the completed record also
        # counts a redelivery under another event id.
        bare = store.claim("ns", "bare")
        full = store.claim("ns", "full", {"a": 1}, event_time=clock() - 60, event_id="e-1", claimant="w-1")
        store.complete("ns", "full", full.token, b"outcome")
        store.claim("ns", "full", {"a": 1}, event_id="e-2")
        dup = store.claim("ns", "full", {"a": 1})
        assert dup.status is Status.DUPLICATE
        now = int(clock() * 1e6)
        cases = [(res, at) for res in (bare, full, dup) for at in (now, now + 31_000_000)]
    made = [Record.from_raw("ns", res.key, 7, res._raw, at) for res, at in cases]
    assert {rec.state for rec in made} == set(RecordState)
    assert made[-1].outcome == b"outcome" and made[-1].other_events == 1
    for (res, at), rec in zip(cases, made, strict=True):
        want = _record_by_init("ns", res.key, 7, res._raw, at)
        assert type(rec) is Record and rec == want
        for f in dataclasses.fields(Record):
            assert type(getattr(rec, f.name)) is type(getattr(want, f.name)), f.name
        assert hash(rec) == hash(want) and repr(rec) == repr(want)
        assert pickle.loads(pickle.dumps(rec)) == rec
        with pytest.raises(dataclasses.FrozenInstanceError):
            rec.token = 1  # type: ignore[misc]


def test_bind_record_refuses_a_class_it_cannot_fill_and_keeps_the_bound_one(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # make_record writes each field straight into its slot, at offsets
    # bind_record takes from the class: a class without those slots is
    # refused, and the refusal leaves the bound class and its offsets.
    import dataclasses

    fields = [(name, object) for name in _native.RECORD_FIELDS]
    no_slots = dataclasses.make_dataclass("NoSlots", fields, frozen=True)
    with pytest.raises(TypeError, match="slots=True"):
        _native.bind_record(no_slots, RecordState.PENDING, RecordState.UNKNOWN, RecordState.COMPLETED)
    # Slots (after a base's own, so at other offsets than Record's), but the
    # third a member of another kind (complex.real, a C double): refused
    # after the first two were looked at.
    pad = type("Pad", (), {"__slots__": ("pad",)})
    odd = dataclasses.make_dataclass("Odd", fields, bases=(pad,), frozen=True, slots=True)
    odd.state = complex.__dict__["real"]  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match="'state' to be a plain object slot"):
        _native.bind_record(odd, RecordState.PENDING, RecordState.UNKNOWN, RecordState.COMPLETED)
    with DedupStore.open(tmp_path / "s", durability="flush") as store:
        store.ensure_namespace("ns")
        res = store.claim("ns", "k", {"a": 1}, claimant="w")
        rec = store.complete("ns", "k", res.token, b"done")
    assert type(rec) is Record and (rec.namespace, rec.key, rec.claimant, rec.outcome) == ("ns", b"k", b"w", b"done")
    assert rec.state is RecordState.COMPLETED and rec.token == res.token and rec.other_events == 0


def test_statuses_key_dicts_and_sets_across_pickling() -> None:
    # Status hashes by identity (verdicts.py): a member unpickled or copied
    # is the same object, so it finds the entries the original made.
    import copy
    import pickle

    counts = dict.fromkeys(Status, 0)
    for st in (pickle.loads(pickle.dumps(Status.NEW)), copy.deepcopy(Status.NEW), Status("NEW"), Status["NEW"]):
        counts[st] += 1
    assert counts[Status.NEW] == 4 and sum(counts.values()) == 4
    assert {s for s in Status if s.holds_lease} == {Status.NEW, Status.UNKNOWN, Status.BEYOND_HORIZON}
    assert len({hash(s) for s in Status}) == len(Status)


@pytest.mark.parametrize("durability", ["sync", "flush"])
def test_claim_many_verdicts_are_counted_in_stats(tmp_path, durability: str) -> None:  # type: ignore[no-untyped-def]
    # The batch path's counters (C, beside claim()'s) are what stats() reads.
    with DedupStore.open(tmp_path / "s", eviction_rate=0, durability=durability) as store:
        store.ensure_namespace("ns", lease="30s")
        first = store.claim_many("ns", ["a", "b", "c"], [{"x": 1}] * 3)
        store.complete("ns", "a", first.tokens[0], b"ok")
        second = store.claim_many("ns", ["a", "b", "c", "d"], [{"x": 1}, {"x": 1}, {"x": 2}, {"x": 1}])
        assert second.statuses == [Status.DUPLICATE, Status.IN_PROGRESS, Status.CONFLICT, Status.NEW]
        stats = store.stats()
        assert {k: v for k, v in stats["verdicts"].items() if v} == {
            "NEW": 4, "DUPLICATE": 1, "IN_PROGRESS": 1, "CONFLICT": 1,
        }
        assert stats["duplicates_same_event"] == 1 and stats["repeats_other_event"] == 0
