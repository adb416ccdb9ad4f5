"""The verdict table of SPEC section 3, checked against a dict model.

A Hypothesis state machine drives one store (two partitions, an injected clock)
with claims (with and without an old ``event_time``), batches, complete/release/
renew with current, stale and bogus tokens, clock jumps around the lease length
and past the horizon, eviction, prefilter refreshes and close-and-reopen, and
after every step compares each key's stored record, the unresolved set and the
eviction frontier with the model (SPEC sections 3 and 5).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from dedupstore import ClaimResult, DedupStore, LeaseLostError, Record, RecordState, Status
from dedupstore._native import UNRESOLVED_GEN

NS = "sm"
LEASE_S = 10.0
LEASE_US = 10_000_000
# A one-hour horizon has 450-second generations: the clock steps below cross
# generations, and a few of them cross the horizon, so records age out.
HORIZON_S = 3600
HORIZON_US = HORIZON_S * 1_000_000
GEN_US = HORIZON_US // 8
PARTITIONS = 2
KEYS = ["k0", "k1", "k2", "k3"]
# (label, value): values with the same label are the same intent after
# canonicalisation (key order and 1 == 1.0 must not matter), so the model
# compares labels while the store sees the raw values.
INTENTS: list[tuple[str | None, Any]] = [
    (None, None),
    ("a", "a"),
    ("b", b"b"),
    ("m", {"n": 1, "m": [1, 2]}),
    ("m", {"m": [1, 2], "n": 1.0}),
]
CLAIMANTS = [None, "c1", "c2"]
OUTCOMES = [b"", b"ok", b"other"]
# Per-call leases (None: the namespace's 10 s) and clock steps straddle the
# lease length, including exact expiry (a lease is live while until > now);
# the longer steps cross generations and the horizon, so records are found in
# older generations, after reopening, and then evicted.
LEASES: list[float | None] = [None, None, 3.0, 20.0]
STEPS = [0.5, 1.0, 2.5, 3.0, 9.5, 10.0, 10.5, 20.0, 45.0, 450.0, 1800.0, 3600.0]
# event_time as an offset from now (None: no event_time). The older ones fall
# before the namespace's creation, or before what eviction has removed.
EVENT_OFFSETS: list[float | None] = [None, None, None, 0.0, -900.0, -5400.0, -86400.0]
# A well-formed token no claim will ever hand out (tokens are random 63-bit).
BOGUS_TOKEN = 0x5EED_5EED_5EED


class Clock:
    """A settable store clock; steps are multiples of 0.5 s so seconds -> microseconds is exact."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Model:
    intent: str | None  # label of the intent of the claim that created the record
    completed: bool
    token: int
    until_us: int  # lease expiry while pending, completion time once completed
    claimant: str | None
    origin: Status  # what the current holder was granted: NEW, UNKNOWN or BEYOND_HORIZON
    first_seen_us: int
    attempts: int
    outcome: bytes | None = None


GRANTS = (Status.NEW, Status.UNKNOWN, Status.BEYOND_HORIZON)


def generation_end_us(at_us: int) -> int:
    return (at_us // GEN_US + 1) * GEN_US


@dataclass
class Expect:
    status: Status
    token: int | None = None  # None with a lease-holding status: a fresh token
    retry_after: float | None = None
    outcome: bytes | None = None


class VerdictMachine(RuleBasedStateMachine):
    def __init__(self, base: Path) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(dir=base))
        self.path = self.dir / "store"
        self.clock = Clock()
        # No background eviction: the evict rule decides when it happens.
        self.store = DedupStore.open(self.path, clock=self.clock, partitions=PARTITIONS, eviction_rate=0)
        self.store.ensure_namespace(NS, horizon=HORIZON_S, lease=LEASE_S)
        self.model: dict[str, Model] = {}
        # The eviction frontier of each partition: the namespace's creation
        # time, raised to the end of the generation of each record evicted.
        self.frontier = [self.now_us()] * PARTITIONS
        self.evicted = 0
        # Every token ever handed out per key: the pool of stale tokens.
        self.issued: dict[str, set[int]] = {k: set() for k in KEYS}
        self.digests: dict[str, bytes] = {}

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # ----------------------------------------------------------------- helpers

    def now_us(self) -> int:
        # The same conversion the store applies to its clock.
        return int(self.clock() * 1_000_000)

    def partition(self, key: str) -> int:
        # White-box: the frontier is kept per partition, so the model asks the
        # store's own keyed routing which partition a key lives in.
        store = self.store
        return store._hasher.route(store._namespace(NS).prefix, key.encode(), PARTITIONS)

    def event_time(self, offset: float | None) -> float | None:
        return None if offset is None else self.clock() + offset

    def expect_claim(self, key: str, label: str | None, claimant: str | None, event_time: float | None) -> Expect:
        rec = self.model.get(key)
        now = self.now_us()
        if rec is None:
            if event_time is not None and int(event_time * 1_000_000) < self.frontier[self.partition(key)]:
                # Its evidence may have been evicted (or predates the namespace).
                return Expect(Status.BEYOND_HORIZON)
            return Expect(Status.NEW)
        if label is not None and rec.intent is not None and label != rec.intent:
            return Expect(Status.CONFLICT)
        if rec.completed:
            return Expect(Status.DUPLICATE, outcome=rec.outcome)
        if rec.until_us > now:
            if claimant is not None and claimant == rec.claimant:
                return Expect(rec.origin, token=rec.token)
            return Expect(Status.IN_PROGRESS, retry_after=(rec.until_us - now) / 1e6)
        return Expect(Status.UNKNOWN)

    def check_and_apply_claim(
        self,
        key: str,
        label: str | None,
        claimant: str | None,
        event_time: float | None,
        lease_us: int,
        res: ClaimResult,
        before: Record | None,
    ) -> None:
        exp = self.expect_claim(key, label, claimant, event_time)
        assert res.status is exp.status, (key, label, claimant, event_time, res, exp, self.model.get(key))
        event(f"verdict {res.status.name}")
        now = self.now_us()
        if exp.status in GRANTS:
            assert res.token is not None
            if exp.token is not None:
                # The holder retrying gets its own lease back, unchanged.
                assert res.token == exp.token
                return
            assert 1 <= res.token < 2**63
            assert res.token not in self.issued[key], "a fresh lease reused an old token"
            self.issued[key].add(res.token)
            rec = self.model.get(key)
            if rec is None:
                self.model[key] = Model(
                    intent=label, completed=False, token=res.token, until_us=now + lease_us, claimant=claimant,
                    origin=exp.status, first_seen_us=now, attempts=1,
                )
            else:
                rec.token = res.token
                rec.until_us = now + lease_us
                rec.claimant = claimant
                rec.origin = Status.UNKNOWN
                rec.attempts += 1
            return
        assert res.token is None
        if exp.status is Status.IN_PROGRESS:
            assert res.retry_after == exp.retry_after
            assert res.retry_after > 0
        else:
            assert res.retry_after is None
        if exp.status is Status.DUPLICATE:
            assert res.outcome == exp.outcome
        else:
            assert res.outcome is None
        # A verdict answered from the stored record shows that record.
        assert before is not None
        assert res.record is not None
        assert res.record == before

    def pick_token(self, data: st.DataObject, key: str, which: str) -> int:
        rec = self.model.get(key)
        if which == "current" and rec is not None:
            return rec.token
        stale = sorted(t for t in self.issued[key] if rec is None or t != rec.token)
        if which == "stale" and stale:
            return data.draw(st.sampled_from(stale), label="stale token")
        return BOGUS_TOKEN

    def holds(self, key: str, token: int) -> bool:
        # The token is the fence, not the clock: an expired lease nobody took
        # over still completes, releases and renews.
        rec = self.model.get(key)
        return rec is not None and not rec.completed and rec.token == token

    # ------------------------------------------------------------------- rules

    @rule(
        key=st.sampled_from(KEYS),
        intent=st.sampled_from(INTENTS),
        claimant=st.sampled_from(CLAIMANTS),
        lease=st.sampled_from(LEASES),
        offset=st.sampled_from(EVENT_OFFSETS),
    )
    def claim(
        self, key: str, intent: tuple[str | None, Any], claimant: str | None, lease: float | None, offset: float | None
    ) -> None:
        label, value = intent
        before = self.store.lookup(NS, key)
        event_time = self.event_time(offset)
        res = self.store.claim(NS, key, value, claimant=claimant, lease=lease, event_time=event_time)
        lease_us = LEASE_US if lease is None else int(lease * 1_000_000)
        self.check_and_apply_claim(key, label, claimant, event_time, lease_us, res, before)
        after = self.store.lookup(NS, key)
        if res.status in (Status.CONFLICT, Status.DUPLICATE, Status.IN_PROGRESS):
            assert after == before, "a read-only verdict changed the record"
        else:
            assert res.record == after

    @rule(key=st.sampled_from(KEYS), intent=st.sampled_from(INTENTS), offset=st.sampled_from(EVENT_OFFSETS))
    def perform(self, key: str, intent: tuple[str | None, Any], offset: float | None) -> None:
        # The consumer's usual path: claim, and on a grant do the effect and
        # complete at once (so completed records pile up for eviction).
        label, value = intent
        before = self.store.lookup(NS, key)
        event_time = self.event_time(offset)
        res = self.store.claim(NS, key, value, event_time=event_time)
        self.check_and_apply_claim(key, label, None, event_time, LEASE_US, res, before)
        if res.token is not None:
            got = self.store.complete(NS, key, res.token, b"done")
            rec = self.model[key]
            rec.completed, rec.outcome, rec.until_us = True, b"done", self.now_us()
            self.check_record(key, got)

    @rule(data=st.data(), claimant=st.sampled_from(CLAIMANTS))
    def claim_many(self, data: st.DataObject, claimant: str | None) -> None:
        keys = data.draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=6), label="keys")
        intents = data.draw(
            st.none() | st.lists(st.sampled_from(INTENTS), min_size=len(keys), max_size=len(keys)), label="intents"
        )
        offsets = data.draw(
            st.none() | st.lists(st.sampled_from(EVENT_OFFSETS), min_size=len(keys), max_size=len(keys)),
            label="event time offsets",
        )
        event_times = None if offsets is None else [self.event_time(o) for o in offsets]
        befores = {k: self.store.lookup(NS, k) for k in set(keys)}
        values = None if intents is None else [v for _, v in intents]
        batch = self.store.claim_many(NS, keys, values, claimant=claimant, event_times=event_times)
        assert len(batch) == len(keys)
        assert [r.key for r in batch] == [k.encode() for k in keys]
        # One batch must answer exactly what the same claims would, one after another.
        for i, (key, res) in enumerate(zip(keys, batch, strict=True)):
            label = None if intents is None else intents[i][0]
            event_time = None if event_times is None else event_times[i]
            before = befores[key]
            self.check_and_apply_claim(key, label, claimant, event_time, LEASE_US, res, before)
            if res.status in GRANTS:
                befores[key] = res.record
        for key, res in zip(keys, batch, strict=True):
            if res.status in GRANTS:
                # Nothing later in a batch rewrites a lease it just granted.
                assert res.record == self.store.lookup(NS, key)

    @rule(
        data=st.data(),
        key=st.sampled_from(KEYS),
        which=st.sampled_from(["current", "current", "stale", "bogus"]),
        outcome=st.sampled_from(OUTCOMES),
    )
    def complete(self, data: st.DataObject, key: str, which: str, outcome: bytes) -> None:
        token = self.pick_token(data, key, which)
        rec = self.model.get(key)
        before = self.store.lookup(NS, key)
        if rec is not None and rec.completed and rec.token == token:
            if rec.outcome == outcome:
                # A repeated complete (lost reply) succeeds and changes nothing.
                got = self.store.complete(NS, key, token, outcome)
                assert got == before
            else:
                with pytest.raises(LeaseLostError):
                    self.store.complete(NS, key, token, outcome)
            assert self.store.lookup(NS, key) == before
            return
        if not self.holds(key, token):
            with pytest.raises(LeaseLostError):
                self.store.complete(NS, key, token, outcome)
            assert self.store.lookup(NS, key) == before
            return
        assert rec is not None
        got = self.store.complete(NS, key, token, outcome)
        rec.completed = True
        rec.outcome = outcome
        rec.until_us = self.now_us()
        self.check_record(key, got)

    @rule(data=st.data(), key=st.sampled_from(KEYS), which=st.sampled_from(["current", "stale", "bogus"]))
    def release(self, data: st.DataObject, key: str, which: str) -> None:
        token = self.pick_token(data, key, which)
        before = self.store.lookup(NS, key)
        if not self.holds(key, token):
            with pytest.raises(LeaseLostError):
                self.store.release(NS, key, token)
            assert self.store.lookup(NS, key) == before
            return
        assert self.store.release(NS, key, token) is None
        del self.model[key]

    @rule(
        data=st.data(),
        key=st.sampled_from(KEYS),
        which=st.sampled_from(["current", "stale", "bogus"]),
        lease=st.sampled_from(LEASES),
    )
    def renew(self, data: st.DataObject, key: str, which: str, lease: float | None) -> None:
        token = self.pick_token(data, key, which)
        before = self.store.lookup(NS, key)
        if not self.holds(key, token):
            with pytest.raises(LeaseLostError):
                self.store.renew(NS, key, token, lease)
            assert self.store.lookup(NS, key) == before
            return
        got = self.store.renew(NS, key, token, lease)
        rec = self.model[key]
        rec.until_us = self.now_us() + (LEASE_US if lease is None else int(lease * 1_000_000))
        self.check_record(key, got)

    @rule(seconds=st.sampled_from(STEPS))
    def advance(self, seconds: float) -> None:
        self.clock.now += seconds

    @rule()
    def age_past_horizon(self) -> None:
        # A horizon and a generation: whatever existed is now due for eviction.
        self.clock.now += HORIZON_S + GEN_US / 1e6

    @rule(budget=st.sampled_from([None, None, 1]), age=st.booleans())
    def evict(self, budget: int | None, age: bool) -> None:
        # A completed record lives in the generation of its completion (the
        # clock only moves forward here), which goes once its end is a horizon
        # behind the clock: the record is deleted and its partition's frontier
        # raised to the generation's end. Unresolved records are never evicted.
        if age:
            self.age_past_horizon()
        now = self.now_us()
        due = sorted(
            (generation_end_us(rec.until_us), key)
            for key, rec in self.model.items()
            if rec.completed and generation_end_us(rec.until_us) + HORIZON_US <= now
        )
        if budget is not None:
            # Oldest generation first; which record of a generation goes first
            # is the store's business, so a budget of one is checked for its
            # count and then the rest are swept before comparing.
            counts = self.store.evict(budget)
            assert counts == {"deleted": min(budget, len(due))}
        counts = self.store.evict()
        for end, key in due:
            del self.model[key]
            part = self.partition(key)
            self.frontier[part] = max(self.frontier[part], end)
        if budget is None:
            assert counts == {"deleted": len(due)}
        self.evicted += len(due)
        unresolved = sum(not r.completed for r in self.model.values())
        event(f"evict deleted={min(len(due), 2)}+ unresolved kept={min(unresolved, 2)}+")

    @rule()
    def refresh_prefilter(self) -> None:
        # Seals the generations that ended a generation ago and builds their
        # filters; no verdict may change (the invariant looks every key up).
        self.store.refresh_prefilter()

    @rule()
    def reopen(self) -> None:
        self.store.close()
        # No partitions and no ensure_namespace: both must come back from disk.
        self.store = DedupStore.open(self.path, clock=self.clock, eviction_rate=0)
        assert self.store.partitions == 2

    # --------------------------------------------------------------- invariant

    def check_record(self, key: str, got: Record | None) -> None:
        rec = self.model.get(key)
        if rec is None:
            assert got is None, (key, got)
            return
        assert got is not None, (key, rec)
        now = self.now_us()
        assert got.key == key.encode()
        assert got.token == rec.token
        assert got.first_seen == rec.first_seen_us / 1e6
        assert got.attempts == rec.attempts
        if rec.completed:
            assert got.state is RecordState.COMPLETED
            assert got.outcome == rec.outcome
            assert got.completed_at == rec.until_us / 1e6
            assert got.lease_expires is None
        else:
            assert got.state is (RecordState.PENDING if rec.until_us > now else RecordState.UNKNOWN)
            assert got.outcome is None
            assert got.lease_expires == rec.until_us / 1e6
            assert got.claimant == (None if rec.claimant is None else rec.claimant.encode())
        if rec.intent is None:
            assert got.intent_digest is None
        else:
            assert got.intent_digest is not None
            known = self.digests.setdefault(rec.intent, got.intent_digest)
            assert got.intent_digest == known, "one intent, two digests"
            assert list(self.digests.values()).count(known) == 1, "two intents, one digest"

    @invariant()
    def records_match_model(self) -> None:
        for key in KEYS:
            self.check_record(key, self.store.lookup(NS, key))
        unresolved = {r.key.decode() for r in self.store.unresolved(NS)}
        assert unresolved == {k for k, r in self.model.items() if not r.completed}

    @invariant()
    def frontier_and_counts_match_model(self) -> None:
        ns = self.store.stats()["namespaces"][NS]
        assert ns["frontier"] == max(self.frontier) / 1e6
        assert ns["evicted"] == self.evicted
        assert ns["unresolved"] == sum(not r.completed for r in self.model.values())


def run_machine(base: Path, max_examples: int, steps: int) -> None:
    run_state_machine_as_test(
        lambda: VerdictMachine(base),
        settings=settings(
            max_examples=max_examples,
            stateful_step_count=steps,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )


def test_verdicts_follow_the_model(tmp_path: Path) -> None:
    run_machine(tmp_path, max_examples=60, steps=40)


@pytest.mark.slow
def test_verdicts_follow_the_model_long(tmp_path: Path) -> None:
    run_machine(tmp_path, max_examples=250, steps=80)


# Regressions the machine found, pinned as plain tests.


@pytest.fixture
def sm_store(tmp_path: Path) -> Iterator[tuple[DedupStore, Clock]]:
    clock = Clock()
    store = DedupStore.open(tmp_path / "store", clock=clock, partitions=2)
    store.ensure_namespace(NS, horizon="7d", lease=LEASE_S)  # hour-long generations
    try:
        yield store, clock
    finally:
        store.close()


def test_claim_many_repeated_key_shows_the_record_its_earlier_claim_left(
    sm_store: tuple[DedupStore, Clock],
) -> None:
    # The batch re-grants the expired lease at its first position; the
    # conflicting claim after it must show that new lease, as a claim made
    # after claim_many returned would, not the snapshot from before the batch.
    store, clock = sm_store
    store.claim(NS, "k", "a")
    clock.now += 2 * LEASE_S
    first, second = store.claim_many(NS, ["k", "k"], ["a", "b"])
    assert (first.status, second.status) == (Status.UNKNOWN, Status.CONFLICT)
    assert second.record is not None
    assert second.record == store.lookup(NS, "k")
    assert second.record.token == first.token
    assert second.record.state is RecordState.PENDING


def test_returned_records_name_the_generation_they_live_in(sm_store: tuple[DedupStore, Clock]) -> None:
    # Generations are an hour long under a 7-day horizon. An unresolved record
    # is in no generation; one first seen two hours ago and completed now lives
    # in the current generation, and every record handed back (by claim,
    # claim_many, renew and complete) must say so, as lookup does.
    store, clock = sm_store
    res = store.claim(NS, "k", "a")
    assert res.token is not None and res.record is not None
    assert res.record.generation == store.lookup(NS, "k").generation == UNRESOLVED_GEN  # type: ignore[union-attr]
    old = store.claim(NS, "old")
    assert old.token is not None
    store.complete(NS, "old", old.token)
    clock.now += 2 * 3600
    # Its lease ran out but nobody took over: the token still renews and completes.
    assert store.renew(NS, "k", res.token) == store.lookup(NS, "k")
    assert store.complete(NS, "k", res.token, b"done") == store.lookup(NS, "k")
    assert store.complete(NS, "k", res.token, b"done") == store.lookup(NS, "k")
    stored = store.lookup(NS, "k")
    assert stored is not None
    current = int(clock.now * 1_000_000) // 3_600_000_000
    assert stored.generation == current
    assert store.lookup(NS, "old").generation == current - 2  # type: ignore[union-attr]
    fresh = store.claim(NS, "fresh").record
    assert fresh is not None and fresh.generation == UNRESOLVED_GEN
    for again in (store.claim(NS, "k", "a"), store.claim(NS, "k", "b"), store.claim_many(NS, ["k"])[0]):
        assert again.status in (Status.DUPLICATE, Status.CONFLICT)
        assert again.record == stored
