"""The Bloom prefilter: a negative filter only, complete for every live record."""

from __future__ import annotations

from pathlib import Path

import lmdb
from conftest import FakeClock

from dedupstore import DedupStore, Status, _native
from dedupstore.store import BLOOM_FP_RATE

HORIZON = "1h"  # generations of 450 s
GEN = 450.0


def _open(path: Path, clock: FakeClock, **kw: object) -> DedupStore:
    kw.setdefault("eviction_rate", 0)
    kw.setdefault("partitions", 2)
    s = DedupStore.open(path, clock=clock, **kw)  # type: ignore[arg-type]
    s.ensure_namespace("n", horizon=HORIZON, lease="30s")
    return s


def _fill(s: DedupStore, clock: FakeClock, gens: int, per_gen: int = 300) -> list[str]:
    keys = []
    for g in range(gens):
        batch = [f"g{g}-k{i}" for i in range(per_gen)]
        res = s.claim_many("n", batch)
        s.complete_many("n", [(r.key, r.token, b"done") for r in res if r.token is not None])
        keys += batch
        clock.advance(GEN)
    return keys


def test_no_false_negatives_and_absent_keys_skip_probes(store_path: Path, clock: FakeClock) -> None:
    with _open(store_path, clock) as s:
        keys = _fill(s, clock, gens=6)
        done = s.refresh_prefilter()
        assert done["built"] > 0
        pre = s.stats()["namespaces"]["n"]["prefilter"]
        assert pre["filters"] > 0
        blooms = [bf for sp in s._namespace("n").spaces for bf in sp.blooms.values()]
        assert pre["bytes"] == sum(bf.nbytes for bf in blooms) > 0
        # Sized for BLOOM_FP_RATE (0.1%): the k bloom_sizing gives it.
        assert {bf.k for bf in blooms} == {_native.bloom_sizing(BLOOM_FP_RATE)[1]}
        # Every stored key is still found through its generation's filter.
        assert all(r.status is Status.DUPLICATE for r in s.claim_many("n", keys))
        before = s.stats()["namespaces"]["n"]["prefilter"]
        fresh = [f"absent-{i}" for i in range(4000)]
        assert all(s.lookup("n", k) is None for k in fresh)
        after = s.stats()["namespaces"]["n"]["prefilter"]
        skipped = after["probes_skipped"] - before["probes_skipped"]
        confirmed = after["probes_confirmed"] - before["probes_confirmed"]
        # Configured at 0.1%: the share of absent-key probes a filter lets
        # through (about 20 of some 20,000 expected; 1% would give 200).
        assert skipped > 0 and confirmed / (skipped + confirmed) < 0.004
        # Read in LMDB: each maybe, and for every key each generation no
        # filter answers for (the unsealed ones: at least the current).
        unfiltered = after["probes_read"] - before["probes_read"] - confirmed
        assert unfiltered >= len(fresh) and unfiltered % len(fresh) == 0


def test_filters_built_or_dropped_after_a_lookup_are_seen_by_the_next(store_path: Path, clock: FakeClock) -> None:
    # The Space keeps its filters in a list by generation for its probes,
    # made again whenever the set of filters changed size.
    with _open(store_path, clock) as s:
        keys = _fill(s, clock, gens=6)
        fresh = [f"absent-{i}" for i in range(200)]

        def reads() -> int:
            before = s.stats()["namespaces"]["n"]["prefilter"]["probes_read"]
            assert all(s.lookup("n", k) is None for k in fresh)
            return int(s.stats()["namespaces"]["n"]["prefilter"]["probes_read"] - before)

        unfiltered = reads()  # no filter yet: every generation read for every key
        assert s.refresh_prefilter()["built"] > 0
        assert reads() < unfiltered / 2  # the filters just built are used at once
        assert all(r.status is Status.DUPLICATE for r in s.claim_many("n", keys))
        for sp in s._live_namespace("n").spaces:  # noqa: SLF001 - as eviction does
            sp.advance_oldest(sp.oldest + 2)
        assert reads() < unfiltered / 2
        assert all(r.status is Status.DUPLICATE for r in s.claim_many("n", keys[len(keys) // 2 :]))


def test_filters_are_complete_for_generations_sealed_under_the_write_behind_window(
    store_path: Path, clock: FakeClock
) -> None:
    # Flush mode seals through the window, like a call's write. The keys of
    # the generations it seals are still in the overlay then; the filters are
    # built from LMDB after they are applied (Partition.reader applies first),
    # so none of them is missing.
    with _open(store_path, clock, durability="flush", partitions=1, apply_interval=1.0) as s:
        keys = _fill(s, clock, gens=6)
        window = s._parts[0].window
        assert window is not None and len(window.overlay or ()) > 0  # nothing applied yet
        assert s.refresh_prefilter()["built"] > 0
        assert s.stats()["namespaces"]["n"]["prefilter"]["filters"] > 0
        assert all(r.status is Status.DUPLICATE for r in s.claim_many("n", keys))


def test_the_background_refresh_builds_from_lmdb_as_it_stands(store_path: Path, clock: FakeClock) -> None:
    # The background thread's refresh applies no window: a generation sealed
    # in the overlay gets its filter once the window's next apply has put the
    # seal in LMDB, with every write made before it.
    with _open(store_path, clock, durability="flush", partitions=1, apply_interval=1.0) as s:
        keys = _fill(s, clock, gens=6)
        window = s._parts[0].window
        assert window is not None and len(window.overlay or ()) > 0
        assert s._refresh_prefilter(None, current=False)["built"] == 0  # sealed in the overlay only
        assert len(window.overlay or ()) > 0  # and nothing applied from here
        window.apply()
        assert s._refresh_prefilter(None, current=False)["built"] > 0
        assert all(r.status is Status.DUPLICATE for r in s.claim_many("n", keys))


def test_a_generation_too_large_to_gather_in_one_pass_gets_the_same_filter(
    store_path: Path, clock: FakeClock, lmdb_way: str
) -> None:
    # build_bloom gathers at most max_gathered hashes in its one pass; past
    # that it counts, then reads the generation again: the filter is the same,
    # read by LMDB's own cursor or by py-lmdb's.
    with _open(store_path, clock, partitions=1) as s:
        keys = _fill(s, clock, gens=3)
        s.refresh_prefilter()
        space = s._namespace("n").spaces[0]
        gen = space.generation(int((clock.now - 3 * GEN) * 1_000_000))
        with s._parts[0].reader() as txn:
            one = space.build_bloom(txn, gen, 0.01, 7)
            two = space.build_bloom(txn, gen, 0.01, 7, max_gathered=10)
            tiny = space.build_bloom(txn, gen, 0.01, 7, max_gathered=0)
            # The store's own threads pause every few keys (a call waiting for the GIL gets it): the same filter.
            paused = [space.build_bloom(txn, gen, 0.01, 7, max_gathered=m, pause_every=7) for m in (10_000, 10)]
            _native.set_lmdb_direct(lmdb_way != "direct")  # the other way
            other = space.build_bloom(txn, gen, 0.01, 7)
            _native.set_lmdb_direct(lmdb_way == "direct")
        assert other is not None and other.to_bytes() == one.to_bytes()
        assert one is not None and two is not None and tiny is not None
        assert one.to_bytes() == two.to_bytes() == tiny.to_bytes()
        assert [bf.to_bytes() if bf else None for bf in paused] == [one.to_bytes()] * 2
        assert one.count == 300
        assert all(two.maybe(s._hasher, k.encode()) for k in keys if k.startswith("g0-"))


def test_filters_persist_and_load_in_another_handle(store_path: Path, clock: FakeClock) -> None:
    with _open(store_path, clock) as s:
        keys = _fill(s, clock, gens=5)
        built = s.refresh_prefilter()["built"]
        assert built > 0
    with _open(store_path, clock) as s:
        done = s.refresh_prefilter()
        assert done == {"loaded": built, "built": 0}
        assert all(r.status is Status.DUPLICATE for r in s.claim_many("n", keys))


def test_sealed_generations_take_no_new_keys_even_when_the_clock_steps_back(
    store_path: Path, clock: FakeClock
) -> None:
    with _open(store_path, clock) as s:
        _fill(s, clock, gens=5)
        s.refresh_prefilter()
        clock.advance(-4 * GEN)  # back into a generation that is sealed and filtered
        first = s.claim("n", "late-writer")
        assert first.status is Status.NEW
        rec = s.lookup("n", "late-writer")
        assert rec is not None
        # The clock's own generation is sealed: the record went to a newer one.
        assert rec.generation > int(clock.now / GEN)
        assert s.claim("n", "late-writer").status is Status.IN_PROGRESS
        clock.advance(4 * GEN)
        assert s.claim("n", "late-writer").status is Status.UNKNOWN


def test_a_corrupt_filter_is_rebuilt_not_trusted(store_path: Path, clock: FakeClock) -> None:
    with _open(store_path, clock, partitions=1) as s:
        keys = _fill(s, clock, gens=5)
        assert s.refresh_prefilter()["built"] > 0
    env = lmdb.open(str(store_path / "p000"), max_dbs=4, map_size=1 << 30)
    meta = env.open_db(b"meta")
    with env.begin(write=True) as txn:
        cursor = txn.cursor(db=meta)
        assert cursor.set_range(b"B")
        key, blob = cursor.item()
        txn.put(key, blob[:-1] + bytes([blob[-1] ^ 1]), db=meta)
    env.close()
    with _open(store_path, clock, partitions=1) as s:
        done = s.refresh_prefilter()
        assert done["built"] == 1
        assert all(r.status is Status.DUPLICATE for r in s.claim_many("n", keys))


def test_eviction_drops_filters_of_evicted_generations(store_path: Path, clock: FakeClock) -> None:
    with _open(store_path, clock, partitions=1) as s:
        _fill(s, clock, gens=6)
        s.refresh_prefilter()
        filters = s.stats()["namespaces"]["n"]["prefilter"]["filters"]
        clock.advance(2 * 3600)
        s.evict()
        assert s.stats()["namespaces"]["n"]["prefilter"]["filters"] < filters
        with s._parts[0].env.begin() as txn:
            left = [k for k, _ in txn.cursor(db=s._parts[0].meta) if k.startswith(b"B")]
        oldest = s._parts[0].spaces[1].oldest
        assert all(int.from_bytes(k[3:], "big") >= oldest for k in left)


def test_bloom_off_builds_nothing(store_path: Path, clock: FakeClock) -> None:
    with _open(store_path, clock, bloom=False) as s:
        _fill(s, clock, gens=5)
        assert s.refresh_prefilter() == {"loaded": 0, "built": 0}
        assert s.stats()["namespaces"]["n"]["prefilter"]["filters"] == 0


def test_bloom_key_layout() -> None:
    assert _native.bloom_key(b"\x00\x07", 0x01020304) == b"B\x00\x07\x01\x02\x03\x04"
