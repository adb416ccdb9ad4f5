"""Every input limit of SPEC section 7, checked on both sides of its edge."""

from __future__ import annotations

import datetime as _dt
import enum
import warnings
from pathlib import Path

import pytest
from conftest import FakeClock
from hypothesis import given, settings
from hypothesis import strategies as st

from dedupstore import (
    DedupStore,
    InvalidDurationError,
    InvalidInputError,
    InvalidIntentError,
    InvalidKeyError,
    InvalidNamespaceError,
    InvalidTokenError,
    LeaseLostError,
    OutcomeTooLargeError,
    ReplayWindowError,
    ReplayWindowWarning,
    Status,
    StoreFullError,
    _native,
)
from dedupstore import store as store_module

NS = "orders"


@pytest.mark.parametrize("name", ["a", "a" * 64, "orders.v1", "tenant-7_payments", "0abc"])
def test_namespace_names_accepted(store: DedupStore, name: str) -> None:
    store.ensure_namespace(name)


@pytest.mark.parametrize("name", ["", "a" * 65, "Orders", "-orders", ".x", "a b", "ns/1", "é"])
def test_namespace_names_refused(store: DedupStore, name: str) -> None:
    with pytest.raises(InvalidNamespaceError, match=r"\[a-z0-9\]"):
        store.ensure_namespace(name)


def test_key_length_edges(store: DedupStore) -> None:
    assert store.claim(NS, b"k" * 400).status is Status.NEW
    assert store.claim(NS, "é" * 200).status is Status.NEW  # 400 UTF-8 bytes
    with pytest.raises(InvalidKeyError, match="1..400 bytes; got 401"):
        store.claim(NS, b"k" * 401)
    with pytest.raises(InvalidKeyError, match="1..400 bytes; got 0"):
        store.claim(NS, b"")
    with pytest.raises(InvalidKeyError, match="bytes or str"):
        store.claim(NS, 12345)  # type: ignore[arg-type]
    with pytest.raises(InvalidKeyError, match="UTF-8"):
        store.claim(NS, "\udc80")


def test_key_limit_applies_to_every_method(store: DedupStore) -> None:
    for call in (
        lambda: store.lookup(NS, b"k" * 401),
        lambda: store.complete(NS, b"k" * 401, 1),
        lambda: store.release(NS, b"k" * 401, 1),
        lambda: store.renew(NS, b"k" * 401, 1),
        lambda: store.claim_many(NS, [b"ok", b"k" * 401]),
    ):
        with pytest.raises(InvalidKeyError, match="400"):
            call()


def test_intent_limits_through_the_store(store: DedupStore) -> None:
    with pytest.raises(InvalidIntentError, match="finite"):
        store.claim(NS, "k", {"amount": float("nan")})
    with pytest.raises(InvalidIntentError, match="65536"):
        store.claim(NS, "k", b"x" * 65536)
    assert store.claim(NS, "k", b"x" * 65535).status is Status.NEW
    with pytest.raises(InvalidIntentError, match="str, int, float, bool, None, list or dict"):
        store.claim(NS, "k2", {"when": object()})
    assert store.lookup(NS, "k2") is None


@pytest.mark.parametrize(
    ("value", "ok"),
    [("1s", True), (1, True), ("0.5s", False), (0, False), (-1, False), ("12h", True), ("7d", True),
     ("12 hours", False), ("", False), ("1e400s", False), (float("inf"), False), (True, False), ("100y", False)],
)
def test_horizon_edges(store: DedupStore, value: object, ok: bool) -> None:
    if ok:
        store.ensure_namespace("h", horizon=value)
    else:
        with pytest.raises(InvalidDurationError, match="horizon"):
            store.ensure_namespace("h", horizon=value)


def test_lease_edges(store: DedupStore) -> None:
    assert store.claim(NS, "a", lease="1ms").status is Status.NEW
    assert store.claim(NS, "b", lease="7d").status is Status.NEW
    with pytest.raises(InvalidDurationError, match="at least 1ms"):
        store.claim(NS, "c", lease="0.9ms")
    with pytest.raises(InvalidDurationError, match="at most 1w"):
        store.claim(NS, "d", lease=7 * 86400 + 1)
    with pytest.raises(InvalidDurationError, match="lease"):
        store.ensure_namespace("x", lease="soon")
    assert store.lookup(NS, "c") is None and store.lookup(NS, "d") is None


@pytest.mark.parametrize("token", [0, -1, -(2**63), -(2**63) - 1, 2**63, 2**64, "123", 1.0, True, None])
def test_invalid_tokens(store: DedupStore, token: object) -> None:
    store.claim(NS, "k")
    before = store.lookup(NS, "k")
    with pytest.raises(InvalidTokenError, match=r"1..2\*\*63-1"):
        store.complete(NS, "k", token)  # type: ignore[arg-type]
    assert store.lookup(NS, "k") == before


class _TokenInt(int):
    pass


@pytest.mark.parametrize("token", [1, 2**63 - 1, _TokenInt(7), _TokenInt(2**63 - 1)])
def test_tokens_at_the_edges_are_taken_as_given(token: int) -> None:
    assert _native.check_token(token) is token


@pytest.mark.parametrize("token", [_TokenInt(0), _TokenInt(2**63)])
def test_an_int_subclass_token_out_of_range_is_refused(token: int) -> None:
    with pytest.raises(InvalidTokenError, match=r"1..2\*\*63-1"):
        _native.check_token(token)


@pytest.mark.parametrize("token", [0, -1, -(2**63), -(2**63) - 1, 2**63, 2**64, "123", 1.0, True, None])
def test_invalid_tokens_in_a_batch_change_nothing(store: DedupStore, token: object) -> None:
    good = store.claim(NS, "a")
    store.claim(NS, "k")
    before = store.lookup(NS, "a")
    with pytest.raises(InvalidTokenError, match=r"1..2\*\*63-1"):
        store.complete_many(NS, [("a", good.token, b"ok"), ("k", token, b"ok")])  # type: ignore[list-item]
    with pytest.raises(InvalidTokenError, match=r"1..2\*\*63-1"):
        store.release_many(NS, [("a", good.token), ("k", token)])  # type: ignore[list-item]
    assert store.lookup(NS, "a") == before  # the valid item before it was not applied either


def test_batch_items_of_the_wrong_shape_are_named(store: DedupStore) -> None:
    res = store.claim(NS, "k")
    with pytest.raises(InvalidInputError, match=r"\(key, token, outcome\); item 0 has 2 fields"):
        store.complete_many(NS, [("k", res.token)])  # type: ignore[list-item]
    with pytest.raises(InvalidInputError, match=r"\(key, token\); item 0 has 3 fields"):
        store.release_many(NS, [("k", res.token, b"x")])  # type: ignore[list-item]
    with pytest.raises(InvalidInputError, match=r"\(key, token\); item 1 is a str"):
        store.release_many(NS, [("k", res.token), "k"])  # type: ignore[list-item]
    with pytest.raises(InvalidInputError, match="outcome must be bytes or str; got int"):
        store.complete_many(NS, [["k", res.token, 7]])  # type: ignore[list-item]
    assert store.complete_many(NS, [["k", res.token, "done"]]) == [None]  # type: ignore[list-item]
    assert store.claim(NS, "k").outcome == b"done"


def test_largest_token_is_well_formed_but_stale(store: DedupStore) -> None:
    store.claim(NS, "k")
    with pytest.raises(LeaseLostError):
        store.complete(NS, "k", 2**63 - 1)
    # An int subclass (not a bool) is a token too.
    with pytest.raises(LeaseLostError):
        store.complete(NS, "k", enum.IntEnum("T", {"BIG": 2**63 - 1}).BIG)


def test_outcome_size_edges(store: DedupStore) -> None:
    store.ensure_namespace("small", max_outcome_bytes=16)
    res = store.claim("small", "k")
    assert res.token is not None
    with pytest.raises(OutcomeTooLargeError, match="max_outcome_bytes=16"):
        store.complete("small", "k", res.token, b"x" * 17)
    rec = store.lookup("small", "k")
    assert rec is not None and rec.state.name == "PENDING"  # the lease is still held
    store.complete("small", "k", res.token, b"x" * 16)
    assert store.claim("small", "k").outcome == b"x" * 16


def test_outcome_size_edges_in_a_batch(store: DedupStore) -> None:
    store.ensure_namespace("small", max_outcome_bytes=16)
    a, b = store.claim("small", "a"), store.claim("small", "b")
    with pytest.raises(OutcomeTooLargeError, match="namespace 'small' allows at most max_outcome_bytes=16"):
        store.complete_many("small", [("a", a.token, b"x" * 16), ("b", b.token, "x" * 17)])
    assert all(store.lookup("small", k).state.name == "PENDING" for k in "ab")  # type: ignore[union-attr]
    assert store.complete_many("small", [("a", a.token, b"x" * 16), ("b", b.token, "y" * 16)]) == [None, None]
    assert store.claim("small", "b").outcome == b"y" * 16


@pytest.mark.parametrize("value", [-1, 16 * 1024 * 1024 + 1, 1.5, "10"])
def test_max_outcome_bytes_config_edges(store: DedupStore, value: object) -> None:
    with pytest.raises(InvalidNamespaceError, match="max_outcome_bytes"):
        store.ensure_namespace("x", max_outcome_bytes=value)  # type: ignore[arg-type]


def test_claimant_and_event_id_edges(store: DedupStore) -> None:
    assert store.claim(NS, "a", claimant="c" * 128, event_id="e" * 128).status is Status.NEW
    with pytest.raises(InvalidInputError, match="claimant must be 1..128 bytes; got 129"):
        store.claim(NS, "b", claimant="c" * 129)
    with pytest.raises(InvalidInputError, match="event_id must be 1..128 bytes; got 129"):
        store.claim(NS, "b", event_id="e" * 129)
    with pytest.raises(InvalidInputError, match="event_time"):
        store.claim(NS, "b", event_time=float("nan"))


@settings(max_examples=500, deadline=None)
@given(
    st.lists(
        st.none()
        | st.floats(min_value=-1.2e11, max_value=1.2e11)
        | st.floats(allow_nan=True, allow_infinity=True)
        | st.integers(min_value=-(10**12), max_value=10**12)
        | st.booleans()
        | st.datetimes(timezones=st.just(_dt.UTC)),
        max_size=5,
    )
)
def test_batch_event_times_convert_as_single_ones(values: list[object]) -> None:
    # claim_many and claim() convert event times in C (_native.times_us and
    # time_us), store._time_us being the reference they hand the rest to.
    # Same microseconds for each value, the same error for the first bad one.
    want: list[object] = []
    error: Exception | None = None
    for v in values:
        try:
            want.append(None if v is None else store_module._time_us(v, "event_time"))
        except InvalidInputError as exc:
            error = exc
            break
    singles = [None if v is None else _native.time_us(v, store_module._time_us) for v in values[: len(want)]]
    assert singles == want
    if error is None:
        assert _native.times_us(values, store_module._time_us) == want
    else:
        with pytest.raises(InvalidInputError) as got:
            _native.times_us(values, store_module._time_us)
        assert str(got.value) == str(error)


def test_claims_event_time_converts_in_c_with_no_value_taken_for_an_error(store: DedupStore) -> None:
    # claim() converts its event_time to a C integer (_time_us_c) whose
    # error marker is -1 µs: a time of -1 µs is a time (1970: beyond the
    # horizon), the slow path's answers and errors come through too.
    res = store.claim(NS, "minus-one", event_time=-1e-6)
    assert res.status is Status.BEYOND_HORIZON
    store.complete(NS, "minus-one", res.token, b"")
    rec = store.lookup(NS, "minus-one")
    assert rec is not None and rec.event_time == -1e-6
    when = _dt.datetime(2026, 12, 7, 12, 0, tzinfo=_dt.UTC)
    store.claim(NS, "aware", event_time=when)
    rec = store.lookup(NS, "aware")
    assert rec is not None and rec.event_time == when.timestamp()
    with pytest.raises(InvalidInputError, match="event_time must be seconds since the epoch"):
        store.claim(NS, "text", event_time="yesterday")
    assert store.lookup(NS, "text") is None


def test_claim_many_shape_errors(store: DedupStore) -> None:
    with pytest.raises(InvalidInputError, match="one entry per key"):
        store.claim_many(NS, ["a", "b"], [None])
    with pytest.raises(InvalidInputError, match="one entry per key"):
        store.claim_many(NS, ["a"], event_times=[])
    with pytest.raises(InvalidInputError, match="at most 100000 keys"):
        store.claim_many(NS, [b"k"] * 100_001)
    assert store.lookup(NS, "a") is None


@pytest.mark.parametrize("partitions", [0, 257, -1, True, 2.0])
def test_partition_count_edges(tmp_path: Path, partitions: object) -> None:
    with pytest.raises(InvalidInputError, match="1..256"):
        DedupStore.open(tmp_path / "s", partitions=partitions)  # type: ignore[arg-type]


@pytest.mark.parametrize("partitions", [1, 256])
def test_partition_count_accepted(tmp_path: Path, partitions: int) -> None:
    with DedupStore.open(tmp_path / "s", partitions=partitions, map_size=1 << 24) as s:
        s.ensure_namespace("n")
        assert s.claim("n", "k").status is Status.NEW


def test_replay_window_longer_than_horizon_is_refused_with_figures(store: DedupStore) -> None:
    with pytest.raises(ReplayWindowError, match="approved_replay reaches 1w but the horizon is 12h"):
        store.ensure_namespace("pay", horizon="12h", replay_windows={"approved_replay": "7d"})
    store.ensure_namespace("pay", horizon="7d", replay_windows={"approved_replay": "7d", "producer_retry": "1h"})


def test_insisting_on_a_short_horizon_warns_and_is_recorded(store: DedupStore) -> None:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        cfg = store.ensure_namespace(
            "pay", horizon="12h", replay_windows={"approved_replay": "7d"}, allow_short_horizon=True
        )
    assert any(issubclass(w.category, ReplayWindowWarning) for w in seen)
    assert cfg.allow_short_horizon
    assert store.namespaces()["pay"].allow_short_horizon


def test_fixed_namespace_fields_cannot_change(store: DedupStore) -> None:
    store.ensure_namespace("n", intent_fields=["amount"])
    with pytest.raises(InvalidInputError, match="intent_fields is fixed"):
        store.ensure_namespace("n", intent_fields=["amount", "currency"])
    cfg = store.ensure_namespace("n", horizon="2h", intent_fields=["amount"])
    assert cfg.horizon == 7200


def test_full_map_raises_and_keeps_what_was_committed(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "s"
    committed: list[bytes] = []
    # The group-commit path (a write-behind window's full map: the test below).
    with DedupStore.open(path, partitions=1, map_size=1 << 20, clock=clock, apply_interval=0) as s:
        s.ensure_namespace("n", max_outcome_bytes=1 << 16)
        with pytest.raises(StoreFullError, match="map size"):
            for i in range(100_000):
                key = f"key-{i:06d}".encode()
                res = s.claim("n", key)
                assert res.token is not None
                s.complete("n", key, res.token, b"o" * 2000)
                committed.append(key)
        assert len(committed) > 100
    with DedupStore.open(path, clock=clock) as s:
        for key in committed:
            assert s.claim("n", key).status is Status.DUPLICATE


@pytest.mark.parametrize("durability", ["sync", "flush"])
def test_full_map_with_a_write_behind_window_raises_and_loses_no_acknowledged_call(
    tmp_path: Path, clock: FakeClock, durability: str
) -> None:
    # Calls go to the window's overlay and reach LMDB when it is applied; a
    # full map turns up there, after the calls were acknowledged (they are in
    # the journal or the window's log). The handle then refuses writes, and a
    # reopen with a larger map applies them.
    path = tmp_path / "s"
    acknowledged: dict[bytes, bytes] = {}
    s = DedupStore.open(path, durability=durability, partitions=1, map_size=1 << 20, clock=clock)
    s.ensure_namespace("n", max_outcome_bytes=1 << 16)
    with pytest.raises(StoreFullError, match="map size") as full:
        for i in range(100_000):
            key = f"key-{i:06d}".encode()
            res = s.claim("n", key)
            assert res.token is not None
            outcome = b"%06d" % i + b"o" * 2000
            s.complete("n", key, res.token, outcome)
            acknowledged[key] = outcome
            if i % 50 == 0:
                s.flush()  # applies the window (and, in flush mode, is what makes calls durable)
    assert len(acknowledged) > 100
    assert "larger map_size" in str(full.value)
    with pytest.raises(StoreFullError):
        s.claim("n", b"one more")
    for key in list(acknowledged)[-5:]:
        assert s.lookup("n", key) is not None  # still answered, from the unapplied calls
    with pytest.raises(StoreFullError):
        s.close()  # cannot apply them either: says so, and leaves them where the reopen finds them
    with DedupStore.open(path, durability=durability, map_size=1 << 26, clock=clock) as s:
        for key, outcome in acknowledged.items():
            res = s.claim("n", key)
            assert (res.status, res.outcome) == (Status.DUPLICATE, outcome)
