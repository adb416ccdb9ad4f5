"""One test per verdict and per token rule of SPEC section 3.

This is also the conformance suite of the shared service: every test that takes
the ``authority`` fixture runs three times, against the embedded ``DedupStore``,
a ``DedupClient`` and an ``AsyncDedupClient`` of a server over the same store
(tests/conftest.py), so "the same verdicts embedded and shared" is checked, not
claimed. ``store`` is the store itself, for what only the embedded API has
(``ensure_namespace``, eviction).
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest
from conftest import FakeClock

from dedupstore import (
    BatchResult,
    DedupStore,
    EffectNotRunError,
    LeaseLostError,
    RecordState,
    Status,
    UnknownNamespaceError,
    _native,
)

NS = "orders"


def test_new_then_duplicate_returns_recorded_outcome(authority: Any) -> None:
    first = authority.claim(NS, "order-1:v1", {"amount": 100})
    assert first.status is Status.NEW
    assert first.token is not None and first.outcome is None
    authority.complete(NS, "order-1:v1", first.token, b"credited:100")
    again = authority.claim(NS, "order-1:v1", {"amount": 100})
    assert again.status is Status.DUPLICATE
    assert again.outcome == b"credited:100"
    assert again.token is None


def test_conflict_shows_stored_record_and_mutates_nothing(authority: Any) -> None:
    first = authority.claim(NS, "k", {"amount": 100})
    assert first.token is not None
    authority.complete(NS, "k", first.token, b"ok")
    before = authority.lookup(NS, "k")
    res = authority.claim(NS, "k", {"amount": 101}, event_id="evt-2", claimant="other")
    assert res.status is Status.CONFLICT
    assert res.token is None
    assert res.record == before
    assert authority.lookup(NS, "k") == before


def test_conflict_against_a_pending_record(authority: Any) -> None:
    authority.claim(NS, "k", b"intent-a")
    assert authority.claim(NS, "k", b"intent-b").status is Status.CONFLICT


def test_none_intent_skips_the_check(authority: Any) -> None:
    res = authority.claim(NS, "k", {"amount": 1})
    assert res.token is not None
    authority.complete(NS, "k", res.token)
    assert authority.claim(NS, "k").status is Status.DUPLICATE
    res2 = authority.claim(NS, "k2")
    assert res2.token is not None
    authority.complete(NS, "k2", res2.token)
    assert authority.claim(NS, "k2", {"anything": True}).status is Status.DUPLICATE


def test_in_progress_carries_retry_after(authority: Any, clock: FakeClock) -> None:
    authority.claim(NS, "k", lease="20s")
    clock.advance(5)
    res = authority.claim(NS, "k")
    assert res.status is Status.IN_PROGRESS
    assert res.retry_after == pytest.approx(15.0)
    assert res.token is None


def test_expired_lease_is_unknown_with_a_new_fenced_token(authority: Any, clock: FakeClock) -> None:
    first = authority.claim(NS, "k")
    clock.advance(31)
    res = authority.claim(NS, "k")
    assert res.status is Status.UNKNOWN
    assert res.token is not None and res.token != first.token
    assert res.record is not None and res.record.attempts == 2
    # The old holder is fenced out; the reconciler completes.
    assert first.token is not None
    with pytest.raises(LeaseLostError):
        authority.complete(NS, "k", first.token, b"late")
    authority.complete(NS, "k", res.token, b"reconciled")
    assert authority.claim(NS, "k").outcome == b"reconciled"


def test_unknown_lease_also_expires_into_unknown(authority: Any, clock: FakeClock) -> None:
    authority.claim(NS, "k")
    clock.advance(31)
    assert authority.claim(NS, "k").status is Status.UNKNOWN
    clock.advance(31)
    assert authority.claim(NS, "k").status is Status.UNKNOWN


def test_same_claimant_gets_its_own_lease_back(authority: Any, clock: FakeClock) -> None:
    first = authority.claim(NS, "k", claimant="worker-1")
    clock.advance(1)
    retry = authority.claim(NS, "k", claimant="worker-1")
    assert retry.status is Status.NEW
    assert retry.token == first.token
    other = authority.claim(NS, "k", claimant="worker-2")
    assert other.status is Status.IN_PROGRESS


def test_same_claimant_after_unknown_gets_unknown_again(authority: Any, clock: FakeClock) -> None:
    authority.claim(NS, "k", claimant="w1")
    clock.advance(31)
    rec = authority.claim(NS, "k", claimant="w2")
    assert rec.status is Status.UNKNOWN
    again = authority.claim(NS, "k", claimant="w2")
    assert again.status is Status.UNKNOWN and again.token == rec.token


def test_same_claimant_after_expiry_is_unknown_not_new(authority: Any, clock: FakeClock) -> None:
    authority.claim(NS, "k", claimant="w1")
    clock.advance(31)
    assert authority.claim(NS, "k", claimant="w1").status is Status.UNKNOWN


def test_stale_token_raises_and_changes_nothing(authority: Any) -> None:
    res = authority.claim(NS, "k")
    assert res.token is not None
    before = authority.lookup(NS, "k")
    wrong = res.token + 1
    with pytest.raises(LeaseLostError):
        authority.complete(NS, "k", wrong, b"x")
    with pytest.raises(LeaseLostError):
        authority.release(NS, "k", wrong)
    with pytest.raises(LeaseLostError):
        authority.renew(NS, "k", wrong)
    assert authority.lookup(NS, "k") == before


def test_token_of_a_released_incarnation_is_stale(authority: Any) -> None:
    old = authority.claim(NS, "k")
    assert old.token is not None
    authority.release(NS, "k", old.token)
    new = authority.claim(NS, "k")
    assert new.status is Status.NEW and new.token != old.token
    with pytest.raises(LeaseLostError):
        authority.complete(NS, "k", old.token)


def test_repeated_complete_is_a_noop(authority: Any, clock: FakeClock) -> None:
    res = authority.claim(NS, "k")
    assert res.token is not None
    rec1 = authority.complete(NS, "k", res.token, b"out")
    clock.advance(3)
    rec2 = authority.complete(NS, "k", res.token, b"out")
    assert rec1 == rec2 == authority.lookup(NS, "k")
    with pytest.raises(LeaseLostError, match="different outcome"):
        authority.complete(NS, "k", res.token, b"other")
    assert authority.lookup(NS, "k") == rec1


def test_complete_after_expiry_while_nobody_else_claimed(authority: Any, clock: FakeClock) -> None:
    res = authority.claim(NS, "k")
    assert res.token is not None
    clock.advance(60)
    authority.complete(NS, "k", res.token, b"done")
    assert authority.claim(NS, "k").status is Status.DUPLICATE


def test_release_lets_the_effect_be_claimed_again(authority: Any) -> None:
    res = authority.claim(NS, "k", {"a": 1})
    assert res.token is not None
    authority.release(NS, "k", res.token)
    assert authority.lookup(NS, "k") is None
    assert authority.claim(NS, "k", {"a": 2}).status is Status.NEW
    with pytest.raises(LeaseLostError):
        authority.release(NS, "k", res.token)


def test_renew_extends_the_lease(authority: Any, clock: FakeClock) -> None:
    res = authority.claim(NS, "k")
    assert res.token is not None
    clock.advance(25)
    rec = authority.renew(NS, "k", res.token, lease="60s")
    assert rec.lease_expires == pytest.approx(clock.now + 60)
    clock.advance(40)
    assert authority.claim(NS, "k").status is Status.IN_PROGRESS
    clock.advance(21)
    assert authority.claim(NS, "k").status is Status.UNKNOWN
    with pytest.raises(LeaseLostError):
        authority.renew(NS, "k", res.token)


def test_lookup_states(authority: Any, clock: FakeClock) -> None:
    assert authority.lookup(NS, "k") is None
    res = authority.claim(NS, "k", event_id="evt-1", event_time=clock.now - 5, claimant="w")
    rec = authority.lookup(NS, "k")
    assert rec is not None and rec.state is RecordState.PENDING
    assert rec.event_id == b"evt-1" and rec.claimant == b"w"
    assert rec.event_time == pytest.approx(clock.now - 5)
    assert rec.first_seen == pytest.approx(clock.now)
    clock.advance(31)
    rec = authority.lookup(NS, "k")
    assert rec is not None and rec.state is RecordState.UNKNOWN
    assert res.token is not None
    authority.complete(NS, "k", res.token, b"o")
    rec = authority.lookup(NS, "k")
    assert rec is not None and rec.state is RecordState.COMPLETED and rec.outcome == b"o"
    assert rec.completed_at == pytest.approx(clock.now)
    json.dumps(rec.to_dict())


def test_event_id_evidence_counts_other_events(authority: Any) -> None:
    res = authority.claim(NS, "settle:w42:r91", event_id="evt-1")
    assert res.token is not None
    authority.complete(NS, "settle:w42:r91", res.token, b"ok")
    assert authority.claim(NS, "settle:w42:r91", event_id="evt-1").status is Status.DUPLICATE
    # A producer publishing the same effect under a second event id: still a
    # duplicate, but counted apart and kept as evidence on the record.
    assert authority.claim(NS, "settle:w42:r91", event_id="evt-2").status is Status.DUPLICATE
    rec = authority.lookup(NS, "settle:w42:r91")
    assert rec is not None and rec.other_events == 1 and rec.event_id == b"evt-1"
    stats = authority.stats()
    assert stats["duplicates_same_event"] == 1
    assert stats["repeats_other_event"] == 1


def test_event_time_accepts_aware_datetime(authority: Any, clock: FakeClock) -> None:
    when = dt.datetime.fromtimestamp(clock.now - 60, tz=dt.UTC)
    authority.claim(NS, "k", event_time=when)
    rec = authority.lookup(NS, "k")
    assert rec is not None and rec.event_time == pytest.approx(clock.now - 60)


def test_beyond_horizon_before_the_frontier(authority: Any, store: DedupStore, clock: FakeClock) -> None:
    # The frontier starts at the namespace's creation: evidence of anything
    # first requested earlier may never have been recorded here.
    store.ensure_namespace("payments", horizon="1h")
    res = authority.claim("payments", "p1", event_time=clock.now - 3600)
    assert res.status is Status.BEYOND_HORIZON and res.token is not None
    assert authority.claim("payments", "p2", event_time=clock.now + 1).status is Status.NEW
    assert authority.claim("payments", "p3").status is Status.NEW  # no event_time: answers on evidence held
    authority.complete("payments", "p1", res.token, b"reconciled")
    assert authority.claim("payments", "p1", event_time=clock.now - 3600).status is Status.DUPLICATE
    store.ensure_namespace("fresh", horizon="1h", empty_history=True)
    assert authority.claim("fresh", "p1", event_time=clock.now - 3600).status is Status.NEW


def test_claim_many_in_input_order(authority: Any) -> None:
    done = authority.claim(NS, "b")
    assert done.token is not None
    authority.complete(NS, "b", done.token, b"B")
    keys = [f"key-{i}" for i in range(50)] + ["b", "key-3"]
    batch = authority.claim_many(NS, keys)
    assert isinstance(batch, BatchResult) and len(batch) == len(keys)
    assert [r.key for r in batch] == [k.encode() for k in keys]
    assert batch[50].status is Status.DUPLICATE and batch[50].outcome == b"B"
    assert batch[3].status is Status.NEW
    # The repeated key in the same batch sees the first one's lease.
    assert batch[51].status is Status.IN_PROGRESS
    assert batch.counts()[Status.NEW] == 50
    assert authority.claim_many(NS, []).statuses == []


@pytest.mark.parametrize("durability", ["sync", "flush"])
def test_a_read_only_claim_batch_leaves_what_needs_a_write(tmp_path: Any, durability: str) -> None:
    # _native.claim_batch without ``write``: a duplicate is decided from the
    # snapshot; a key that needs a write (and a later claim of the same key
    # in the batch) is left as None and listed; with ``write`` none is left.
    with DedupStore.open(tmp_path / "s", partitions=1, durability=durability, eviction_rate=0) as store:
        store.ensure_namespace(NS)
        done = store.claim(NS, "d")
        assert done.token is not None
        store.complete(NS, "d", done.token, b"D")
        store.flush()
        space, part = store._namespace(NS).spaces[0], store._parts[0]
        keys = [b"n1", b"d", b"n2", b"n1"]
        results: list[Any] = [None] * len(keys)
        with part.reader() as txn:
            todo = _native.claim_batch(space, [0, 1, 2, 3], keys, [None] * 4, store._now_us(), 30_000_000,
                                       None, None, results, False, txn)
        assert todo == [0, 2, 3]
        assert results[0] is None and results[2] is None and results[3] is None
        assert results[1][0] == _native.DUPLICATE
        assert store.lookup(NS, "n1") is None  # nothing was written
        with part.reader() as txn:
            # Writing but finding only a duplicate: an empty list, not None.
            one: list[Any] = [None]
            assert _native.claim_batch(space, [0], [b"d"], [None], store._now_us(), 30_000_000,
                                       None, None, one, True, txn) == []
        assert one[0][0] == _native.DUPLICATE
        # Writing, in the partition's own transaction: nothing is left.
        batch = store.claim_many(NS, [k.decode() for k in keys])
        assert batch.statuses == [Status.NEW, Status.DUPLICATE, Status.NEW, Status.IN_PROGRESS]


def test_claim_many_with_intents_and_claimant(authority: Any) -> None:
    batch = authority.claim_many(NS, ["x", "y"], [{"a": 1}, None], claimant="w")
    assert batch.statuses == [Status.NEW, Status.NEW]
    again = authority.claim_many(NS, ["x", "y"], [{"a": 2}, None], claimant="w")
    assert again.statuses == [Status.CONFLICT, Status.NEW]
    assert again[1].token == batch[1].token


def test_unknown_namespace(authority: Any) -> None:
    with pytest.raises(UnknownNamespaceError, match="ensure_namespace"):
        authority.claim("nope", "k")


def test_unresolved_lists_pending_and_unknown(authority: Any, clock: FakeClock) -> None:
    a = authority.claim(NS, "a")
    clock.advance(1)
    authority.claim(NS, "b")
    c = authority.claim(NS, "c")
    assert c.token is not None and a.token is not None
    authority.complete(NS, "c", c.token)
    clock.advance(29.5)
    recs = authority.unresolved(NS)
    assert [r.key for r in recs] == [b"a", b"b"]
    assert [r.state for r in recs] == [RecordState.UNKNOWN, RecordState.PENDING]
    assert [r.key for r in authority.unresolved(NS, limit=1)] == [b"a"]
    authority.release(NS, "a", a.token)
    assert [r.key for r in authority.unresolved(NS)] == [b"b"]
    assert authority.stats()["namespaces"][NS]["unresolved"] == 1


@pytest.mark.parametrize("authority", ["embedded", "sync"], indirect=True)  # async: test_service.py
def test_idempotent_decorator(authority: Any) -> None:
    calls: list[int] = []

    @authority.idempotent(
        NS, key=lambda order, amount: f"credit:{order}", intent=lambda order, amount: {"amount": amount}
    )
    def credit(order: str, amount: int) -> dict[str, int]:
        calls.append(amount)
        return {"credited": amount}

    assert credit("o1", 100) == {"credited": 100}
    assert credit("o1", 100) == {"credited": 100}
    assert calls == [100]
    with pytest.raises(EffectNotRunError) as info:
        credit("o1", 200)
    assert info.value.result.status is Status.CONFLICT


@pytest.mark.parametrize("authority", ["embedded", "sync"], indirect=True)  # async: test_service.py
def test_idempotent_keeps_the_lease_on_error_unless_declared(authority: Any, clock: FakeClock) -> None:
    attempts: list[str] = []

    @authority.idempotent(NS, key=lambda k: k, release_on=(ConnectionRefusedError,))
    def effect(k: str) -> None:
        attempts.append(k)
        raise TimeoutError("the provider did not answer") if k == "ambiguous" else ConnectionRefusedError()

    with pytest.raises(TimeoutError):
        effect("ambiguous")
    with pytest.raises(EffectNotRunError) as info:
        effect("ambiguous")
    assert info.value.result.status is Status.IN_PROGRESS
    clock.advance(31)
    with pytest.raises(EffectNotRunError) as info:
        effect("ambiguous")
    assert info.value.result.status is Status.UNKNOWN
    with pytest.raises(ConnectionRefusedError):
        effect("refused")
    with pytest.raises(ConnectionRefusedError):
        effect("refused")  # released: runs again
    assert attempts == ["ambiguous", "refused", "refused"]


def test_stats_counts_verdicts(authority: Any) -> None:
    res = authority.claim(NS, "k")
    authority.claim(NS, "k")
    stats = authority.stats()
    assert stats["verdicts"]["NEW"] == 1 and stats["verdicts"]["IN_PROGRESS"] == 1
    assert sum(p["records"] for p in stats["partition_stats"]) == 1
    assert res.token is not None
    json.dumps(stats)


def test_complete_many_applies_valid_items_and_reports_stale_ones(authority: Any) -> None:
    batch = authority.claim_many(NS, [f"k{i}" for i in range(20)])
    items: list[tuple[bytes | str, int, bytes | str]] = [
        (r.key, r.token, f"out{i}") for i, r in enumerate(batch) if r.token is not None
    ]
    items.append(("k0", 12345, b"stale"))
    results = authority.complete_many(NS, items)
    assert len(results) == 21
    assert results[:20] == [None] * 20
    assert isinstance(results[20], LeaseLostError) and "12345" in str(results[20])
    assert authority.claim(NS, "k7").outcome == b"out7"
    assert authority.claim(NS, "k0").outcome == b"out0"
    assert authority.complete_many(NS, items[:3]) == [None] * 3  # the same completion again: a no-op


def test_release_many(authority: Any) -> None:
    batch = authority.claim_many(NS, ["a", "b", "c"])
    results = authority.release_many(NS, [(r.key, r.token) for r in batch if r.token is not None] + [("a", 99)])
    assert results[:3] == [None, None, None]
    assert isinstance(results[3], LeaseLostError)
    assert [authority.lookup(NS, k) for k in "abc"] == [None, None, None]
