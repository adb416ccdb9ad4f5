"""The Bloom prefilter's binding, BloomFilter (its C unit tests,
csrc/tests/test_bloom.c, run from test_csrc.py).

The filter is a negative prefilter only (SPEC section 6): what must never happen
is a false negative, a filter that is much worse than its configured rate, or a
corrupt or foreign file read as a filter. The serialised form and the hash scheme
reach disk, so they are pinned here against an independent Python rendering of
the layout documented in csrc/ds_bloom.h.
"""

from __future__ import annotations

import math
import os
import struct
from array import array
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dedupstore._native import LIVE_FP_RATE, BloomFilter, Hasher, bloom_sizing
from dedupstore.errors import StoreFormatError
from dedupstore.store import BLOOM_FP_RATE

MASK64 = (1 << 64) - 1
HEADER = 32
TRAILER = 8


# --------------------------------------------------------------------------
# Helpers


@pytest.fixture
def hasher() -> Hasher:
    # A fresh secret per test: the statistical checks below hold for any secret.
    return Hasher(os.urandom(16))


def _keys(prefix: bytes, n: int, start: int = 0) -> list[bytes]:
    return [b"%s-%012d" % (prefix, i) for i in range(start, start + n)]


def _filled(hasher: Hasher, n: int, rate: float, prefix: bytes = b"in") -> BloomFilter:
    bf = BloomFilter(n, rate)
    bf.add_keys(hasher, _keys(prefix, n))
    return bf


# --------------------------------------------------------------------------
# No false negatives


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    keys=st.lists(st.binary(min_size=1, max_size=64), max_size=300),
    rate=st.sampled_from([0.5, 0.1, 0.01, 0.001, 1e-6]),
    capacity_factor=st.sampled_from([0.0, 0.1, 1.0, 4.0]),
)
def test_no_false_negatives(hasher: Hasher, keys: list[bytes], rate: float, capacity_factor: float) -> None:
    # Sized below, at and above the real count: overfilling raises the FP rate, never loses a key.
    bf = BloomFilter(int(len(keys) * capacity_factor), rate)
    for key in keys:
        bf.add(hasher, key)
    assert all(bf.maybe(hasher, key) for key in keys)
    assert bf.count == len(keys)
    reloaded = BloomFilter.from_bytes(bf.to_bytes())
    assert all(reloaded.maybe(hasher, key) for key in keys)


@settings(max_examples=60, deadline=None)
@given(hashes=st.lists(st.integers(min_value=0, max_value=MASK64), max_size=500))
def test_no_false_negatives_raw_hashes(hashes: list[int]) -> None:
    bf = BloomFilter(len(hashes), 0.01)
    for h in hashes:
        bf.add_hash(h)
    assert all(bf.maybe_hash(h) for h in hashes)
    bulk = BloomFilter(len(hashes), 0.01)
    bulk.add_hashes(array("Q", hashes))
    assert bulk.to_bytes() == bf.to_bytes()
    assert bulk.maybe_hashes(hashes) == b"\x01" * len(hashes)


def test_no_false_negatives_100k(hasher: Hasher) -> None:
    keys = _keys(b"present", 100_000)
    bf = BloomFilter(len(keys), 0.01)
    bf.add_keys(hasher, keys)
    hashes = array("Q", (hasher.hash64(k) for k in keys))
    assert bf.maybe_hashes(hashes).count(1) == len(keys)


# --------------------------------------------------------------------------
# The measured false-positive rate against the configured one


def _fp_bound(rate: float, probes: int) -> float:
    """Allowed |measured - rate|: 6 binomial standard deviations of the sampling
    noise (a correct filter falls outside with probability ~2e-9) plus 5% of the
    rate for the sizing model's own error (measured: under 2%)."""
    return 6.0 * math.sqrt(rate * (1 - rate) / probes) + 0.05 * rate


@pytest.mark.parametrize(("rate", "n_keys", "probes"), [(0.01, 100_000, 200_000), (0.001, 100_000, 1_000_000)])
def test_fp_rate_matches_configuration(hasher: Hasher, rate: float, n_keys: int, probes: int) -> None:
    bf = _filled(hasher, n_keys, rate)
    absent = array("Q", (hasher.hash64(k) for k in _keys(b"out", probes)))
    measured = bf.maybe_hashes(absent).count(1) / probes
    bound = _fp_bound(rate, probes)
    assert abs(measured - rate) <= bound, f"measured {measured:.5f} vs configured {rate} (+-{bound:.5f})"
    # The model's figure for the filled filter is the configured one (it is sized to it).
    assert rate * 0.9 <= bf.expected_fp_rate <= rate


def test_fp_rate_per_op_path_agrees(hasher: Hasher) -> None:
    bf = _filled(hasher, 20_000, 0.01)
    keys = _keys(b"out", 50_000)
    per_op = bytes(bf.maybe(hasher, k) for k in keys)
    hashes = [hasher.hash64(k) for k in keys]
    assert per_op == bf.maybe_hashes(hashes) == bf.maybe_hashes(array("Q", hashes))
    assert per_op == bytes(bf.maybe_hash(h) for h in hashes)


def test_sizing() -> None:
    # The figures csrc/ds_bloom.h documents: a blocked filter's premium over the
    # textbook 9.59 / 14.38 bits per key is small.
    bf = BloomFilter(1_000_000, 0.01)
    assert bf.k == 6
    assert 9.8 <= bf.nbytes * 8 / 1e6 <= 10.0
    bf = BloomFilter(1_000_000, 0.001)
    assert bf.k == 9
    assert 15.4 <= bf.nbytes * 8 / 1e6 <= 15.7
    for n in (0, 1):
        small = BloomFilter(n, 0.01)
        assert small.nblocks == 1 and small.nbytes == 64
        assert small.expected_fp_rate == 0.0
    assert BloomFilter(10, 0.01).k == BloomFilter(10**7, 0.01).k  # k depends on the rate only


def test_sizing_does_not_depend_on_the_rate_before() -> None:
    # The load that meets a rate is searched once and kept for the next
    # filters of that rate: alternating rates must still size each for its own.
    first = {rate: (BloomFilter(50_000, rate).k, BloomFilter(50_000, rate).nblocks) for rate in (0.01, 0.001)}
    for rate in (0.001, 0.01, 0.001, 0.005, 0.01):
        bf = BloomFilter(50_000, rate)
        if rate in first:
            assert (bf.k, bf.nblocks) == first[rate]
        bf.add_hashes(range(50_000))
        # The model at the designed load: at the rate, and not far under it.
        assert rate * 0.95 <= bf.expected_fp_rate <= rate
    with pytest.raises(ValueError, match="fp_rate"):
        BloomFilter(10, 1e-300)  # refused: and the next filter is still sized for its own rate
    assert (BloomFilter(50_000, 0.01).k, BloomFilter(50_000, 0.01).nblocks) == first[0.01]


def test_bloom_sizing_is_what_filters_are_sized_with() -> None:
    # The store's rates are sized at import (no claim pays for the search):
    # what bloom_sizing says is what a filter of that rate is built with.
    for rate in (LIVE_FP_RATE, BLOOM_FP_RATE, 0.0123):
        load, k = bloom_sizing(rate)
        bf = BloomFilter(1_000_000, rate)
        assert bf.k == k
        assert bf.nblocks == math.ceil(1_000_000 / load)
    for bad in (0.0, 1.0, -0.5, float("nan")):
        with pytest.raises(ValueError, match=r"fp_rate must be in \(0, 1\)"):
            bloom_sizing(bad)
    with pytest.raises(ValueError, match="fp_rate 1e-300"):
        bloom_sizing(1e-300)


def test_empty_filter_says_absent(hasher: Hasher) -> None:
    bf = BloomFilter(1000, 0.01)
    assert not any(bf.maybe(hasher, k) for k in _keys(b"x", 1000))
    assert bf.count == 0


# --------------------------------------------------------------------------
# Bulk and convenience paths


def test_bulk_and_convenience_paths_agree(hasher: Hasher) -> None:
    keys = _keys(b"k", 5000)
    hashes = [hasher.hash64(k) for k in keys]
    a, b, c, d = (BloomFilter(5000, 0.01) for _ in range(4))
    for k in keys:
        a.add(hasher, k)
    for h in hashes:
        b.add_hash(h)
    c.add_hashes(array("Q", hashes))
    d.add_hashes(iter(hashes))
    e = BloomFilter(5000, 0.01)
    e.add_keys(hasher, iter(keys))
    assert a.to_bytes() == b.to_bytes() == c.to_bytes() == d.to_bytes() == e.to_bytes()
    assert a.count == 5000
    assert b.maybe_hashes(array("Q")) == b"" and b.maybe_hashes([]) == b""
    assert b.maybe_hashes(iter(hashes[:3])) == b"\x01\x01\x01"


def test_hash_argument_checks() -> None:
    bf = BloomFilter(10, 0.01)
    with pytest.raises(OverflowError):
        bf.add_hash(-1)
    with pytest.raises(OverflowError):
        bf.maybe_hash(1 << 64)
    with pytest.raises(OverflowError):
        bf.add_hashes([1, -2])
    with pytest.raises(TypeError):
        bf.add_hashes(["a"])
    with pytest.raises(TypeError):
        bf.add(Hasher(b"0" * 16), "text")  # type: ignore[arg-type]  # the binding checks it
    # A buffer of anything but unsigned 64-bit words is refused, not taken one
    # small integer at a time.
    before = bf.count
    for wrong in (b"\x01" * 16, bytearray(16), array("I", [1, 2]), array("q", [1, 2]), memoryview(b"x" * 8)):
        with pytest.raises(TypeError, match="unsigned 64-bit"):
            bf.add_hashes(wrong)
        with pytest.raises(TypeError, match="unsigned 64-bit"):
            bf.maybe_hashes(wrong)
    # A non-contiguous view of the right type is refused too.
    with pytest.raises(BufferError, match="contiguous"):
        bf.add_hashes(memoryview(array("Q", [1, 2, 3, 4]))[::2])
    assert bf.count == before


def test_constructor_refusals() -> None:
    for rate in (0.0, 1.0, -0.5, 2.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="fp_rate"):
            BloomFilter(100, rate)
    with pytest.raises(ValueError, match="n_keys"):
        BloomFilter(-1, 0.01)
    with pytest.raises(ValueError, match="too large"):
        BloomFilter(1 << 62, 0.001)


def test_hasher_tag(hasher: Hasher) -> None:
    tag = BloomFilter.hasher_tag(hasher)
    assert tag == BloomFilter.hasher_tag(hasher)
    assert tag != BloomFilter.hasher_tag(Hasher(os.urandom(16)))
    bf = BloomFilter(10, 0.01, tag=tag)
    assert bf.tag == tag
    assert BloomFilter.from_bytes(bf.to_bytes(), expected_tag=tag).tag == tag


# --------------------------------------------------------------------------
# Serialised form


def _fmix64(h: int) -> int:
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & MASK64
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & MASK64
    h ^= h >> 33
    return h


def _reference_bits(hashes: list[int], nblocks: int, k: int) -> bytes:
    """The bit array of csrc/ds_bloom.h, "Hashing", written from the documentation."""
    words = [0] * (nblocks * 8)
    for h in hashes:
        x = _fmix64(h)
        block = ((x >> 32) * nblocks) >> 32
        p = x & 0xFFFFFFFF
        for _ in range(k):
            words[block * 8 + (p >> 29)] |= 1 << ((p >> 23) & 63)
            p = (p * 0x9E3779B9) & 0xFFFFFFFF
    return struct.pack(f"<{len(words)}Q", *words)


def test_format_is_the_documented_one(hasher: Hasher) -> None:
    hashes = [hasher.hash64(k) for k in _keys(b"fmt", 777)] + [0, 1, 2, MASK64]
    bf = BloomFilter(len(hashes), 0.01, tag=0xDEADBEEF)
    bf.add_hashes(hashes)
    data = bf.to_bytes()
    assert len(data) == HEADER + 64 * bf.nblocks + TRAILER
    magic, version, k, reserved, nblocks, nkeys, tag = struct.unpack_from("<4sHBBQQQ", data)
    assert (magic, version, k, reserved) == (b"DSBF", 1, bf.k, 0)
    assert (nblocks, nkeys, tag) == (bf.nblocks, len(hashes), 0xDEADBEEF)
    assert data[HEADER:-TRAILER] == _reference_bits(hashes, bf.nblocks, bf.k)
    (checksum,) = struct.unpack("<Q", data[-TRAILER:])
    assert checksum == Hasher(b"dedupstore-bloom").hash64(data[:-TRAILER])


def test_round_trip(hasher: Hasher) -> None:
    bf = _filled(hasher, 3000, 0.001)
    bf2 = BloomFilter(3000, 0.001, tag=7)
    data = bf.to_bytes()
    for blob in (data, bytearray(data), memoryview(data)):
        loaded = BloomFilter.from_bytes(blob)
        assert (loaded.k, loaded.nblocks, loaded.nbytes, loaded.count, loaded.tag) == (
            bf.k,
            bf.nblocks,
            bf.nbytes,
            bf.count,
            bf.tag,
        )
        assert loaded.to_bytes() == data
    probes = [hasher.hash64(k) for k in _keys(b"q", 20_000)] + [hasher.hash64(k) for k in _keys(b"in", 3000)]
    assert loaded.maybe_hashes(probes) == bf.maybe_hashes(probes)
    assert BloomFilter.from_bytes(bf2.to_bytes()).tag == 7
    # A loaded filter is a live filter.
    loaded.add(hasher, b"late")
    assert loaded.maybe(hasher, b"late") and loaded.count == bf.count + 1


@pytest.fixture(scope="module")
def serialised() -> bytes:
    bf = BloomFilter(200, 0.01, tag=99)
    bf.add_hashes(range(200))
    return bf.to_bytes()


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: b"", "truncated"),
        (lambda d: d[:3], "truncated"),
        (lambda d: d[:HEADER], "truncated"),
        (lambda d: d[:-1], "truncated"),
        (lambda d: d + b"\0", "longer than its header says"),
        (lambda d: b"XSBF" + d[4:], "bad magic"),
        (lambda d: b"SQLite format 3\0", "bad magic"),
        (lambda d: d[:4] + struct.pack("<H", 2) + d[6:], "version"),
        (lambda d: d[:4] + struct.pack("<H", 0) + d[6:], "version"),
        (lambda d: d[:6] + b"\0" + d[7:], "corrupt header"),
        (lambda d: d[:6] + b"\x21" + d[7:], "corrupt header"),
        (lambda d: d[:7] + b"\1" + d[8:], "corrupt header"),
        (lambda d: d[:8] + struct.pack("<Q", 0) + d[16:], "corrupt header"),
        (lambda d: d[:8] + struct.pack("<Q", 1 << 40) + d[16:], "corrupt header"),
        (lambda d: d[:8] + struct.pack("<Q", struct.unpack_from("<Q", d, 8)[0] + 1) + d[16:], "truncated"),
        (lambda d: d[:8] + struct.pack("<Q", struct.unpack_from("<Q", d, 8)[0] - 1) + d[16:], "longer than"),
        (lambda d: d[:6] + bytes([d[6] + 1]) + d[7:], "checksum"),
        (lambda d: d[:16] + bytes([d[16] ^ 1]) + d[17:], "checksum"),
        (lambda d: d[: HEADER + 5] + bytes([d[HEADER + 5] ^ 0x40]) + d[HEADER + 6 :], "checksum"),
        (lambda d: d[:-1] + bytes([d[-1] ^ 1]), "checksum"),
    ],
)
def test_from_bytes_refusals(serialised: bytes, mutate: Callable[[bytes], bytes], message: str) -> None:
    bad = mutate(serialised)
    with pytest.raises(StoreFormatError, match=message):
        BloomFilter.from_bytes(bad)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_any_bit_flip_or_truncation_is_refused(serialised: bytes, data: st.DataObject) -> None:
    buf = bytearray(serialised)
    if data.draw(st.booleans(), label="truncate"):
        cut = data.draw(st.integers(min_value=0, max_value=len(buf) - 1), label="length")
        bad = bytes(buf[:cut])
    else:
        pos = data.draw(st.integers(min_value=0, max_value=len(buf) - 1), label="byte")
        buf[pos] ^= 1 << data.draw(st.integers(min_value=0, max_value=7), label="bit")
        bad = bytes(buf)
    with pytest.raises(StoreFormatError):
        BloomFilter.from_bytes(bad)


def test_from_bytes_foreign_tag(serialised: bytes) -> None:
    assert BloomFilter.from_bytes(serialised, expected_tag=99).tag == 99
    with pytest.raises(StoreFormatError, match="another hash key"):
        BloomFilter.from_bytes(serialised, expected_tag=100)


def test_from_bytes_needs_bytes_like() -> None:
    with pytest.raises(TypeError):
        BloomFilter.from_bytes("DSBF")  # type: ignore[arg-type]
