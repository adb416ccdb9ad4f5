"""The store's keyed hash: SipHash-2-4 (64- and 128-bit) and partition routing.

Intent digests and routes reach disk (docs/format.md), so the native hash is
checked against an independent pure-Python SipHash written here from the paper,
which is itself pinned to the published reference vectors.
"""

from __future__ import annotations

import os
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dedupstore._native import Hasher

MASK = (1 << 64) - 1


def _rotl(x: int, b: int) -> int:
    return ((x << b) | (x >> (64 - b))) & MASK


def _sipround(v0: int, v1: int, v2: int, v3: int) -> tuple[int, int, int, int]:
    v0 = (v0 + v1) & MASK
    v1 = _rotl(v1, 13) ^ v0
    v0 = _rotl(v0, 32)
    v2 = (v2 + v3) & MASK
    v3 = _rotl(v3, 16) ^ v2
    v0 = (v0 + v3) & MASK
    v3 = _rotl(v3, 21) ^ v0
    v2 = (v2 + v1) & MASK
    v1 = _rotl(v1, 17) ^ v2
    v2 = _rotl(v2, 32)
    return v0, v1, v2, v3


def siphash24(key: bytes, msg: bytes, outlen: int = 8) -> bytes:
    """Reference SipHash-2-4 (Aumasson & Bernstein), output as little-endian bytes."""
    assert len(key) == 16 and outlen in (8, 16)
    k0, k1 = struct.unpack("<QQ", key)
    v0 = 0x736F6D6570736575 ^ k0
    v1 = 0x646F72616E646F6D ^ k1
    v2 = 0x6C7967656E657261 ^ k0
    v3 = 0x7465646279746573 ^ k1
    if outlen == 16:
        v1 ^= 0xEE
    # The last block carries the message length (mod 256) in its top byte.
    tail = len(msg) - len(msg) % 8
    blocks = [int.from_bytes(msg[i : i + 8], "little") for i in range(0, tail, 8)]
    blocks.append(int.from_bytes(msg[tail:], "little") | (len(msg) & 0xFF) << 56)
    for m in blocks:
        v3 ^= m
        v0, v1, v2, v3 = _sipround(v0, v1, v2, v3)
        v0, v1, v2, v3 = _sipround(v0, v1, v2, v3)
        v0 ^= m
    v2 ^= 0xEE if outlen == 16 else 0xFF
    for _ in range(4):
        v0, v1, v2, v3 = _sipround(v0, v1, v2, v3)
    out = (v0 ^ v1 ^ v2 ^ v3).to_bytes(8, "little")
    if outlen == 8:
        return out
    v1 ^= 0xDD
    for _ in range(4):
        v0, v1, v2, v3 = _sipround(v0, v1, v2, v3)
    return out + (v0 ^ v1 ^ v2 ^ v3).to_bytes(8, "little")


REF_KEY = bytes(range(16))

# From vectors.h of the SipHash reference implementation (github.com/veorq/SipHash):
# key 00..0f, message 00..(len-1).
VECTORS_64 = {
    0: "310e0edd47db6f72",
    1: "fd67dc93c539f874",
    7: "37d1018bf50002ab",
    8: "6224939a79f5f593",
    15: "e545be4961ca29a1",
    16: "db9bc2577fcc2a3f",
    63: "724506eb4c328a95",
}
VECTORS_128 = {
    0: "a3817f04ba25a8e66df67214c7550293",
    1: "da87c1d86b99af44347659119b22fc45",
    7: "a1f1ebbed8dbc153c0b84aa61ff08239",
    8: "3b62a9ba6258f5610f83e264f31497b4",
    15: "5493e99933b0a8117e08ec0f97cfc3d9",
    16: "6ee2a4ca67b054bbfd3315bf85230577",
    63: "5150d1772f50834a503e069a973fbd7c",
}


@pytest.mark.parametrize("length", sorted(VECTORS_64))
def test_python_reference_matches_published_vectors(length: int) -> None:
    msg = bytes(range(length))
    assert siphash24(REF_KEY, msg, 8).hex() == VECTORS_64[length]
    assert siphash24(REF_KEY, msg, 16).hex() == VECTORS_128[length]


@pytest.mark.parametrize("length", sorted(VECTORS_64))
def test_native_matches_published_vectors(length: int) -> None:
    msg = bytes(range(length))
    h = Hasher(REF_KEY)
    assert h.digest(msg).hex() == VECTORS_128[length]
    assert h.hash64(msg) == int.from_bytes(bytes.fromhex(VECTORS_64[length]), "little")


@settings(max_examples=500, deadline=None)
@given(secret=st.binary(min_size=16, max_size=16), data=st.binary(min_size=0, max_size=100))
def test_native_matches_reference(secret: bytes, data: bytes) -> None:
    h = Hasher(secret)
    assert h.digest(data) == siphash24(secret, data, 16)
    assert h.hash64(data) == int.from_bytes(siphash24(secret, data, 8), "little")


def test_every_length_up_to_100_matches_reference() -> None:
    # Hypothesis favours small sizes; walk every length (each tail and block
    # count) explicitly with a fresh random secret and message.
    for length in range(101):
        secret = os.urandom(16)
        data = os.urandom(length)
        h = Hasher(secret)
        case = (length, secret.hex(), data.hex())
        assert h.digest(data) == siphash24(secret, data, 16), case
        assert h.hash64(data) == int.from_bytes(siphash24(secret, data, 8), "little"), case


@pytest.mark.parametrize("bad", [b"", bytes(15), bytes(17), bytes(32)])
def test_secret_must_be_16_bytes(bad: bytes) -> None:
    with pytest.raises(ValueError, match="16 bytes"):
        Hasher(bad)


# ---------------------------------------------------------------------------
# Routing

N_KEYS = 100_000
# Chi-square critical values at p = 1e-9 for (partitions - 1) degrees of freedom:
# a correct keyed hash exceeds them about once in a billion runs, while a router
# that puts 20% more than its share on one partition scores 267 (16) to 1333 (4).
CHI2_CRITICAL = {4: 44.85, 7: 53.35, 16: 73.63}


def _chi_square(counts: list[int]) -> float:
    expected = sum(counts) / len(counts)
    return sum((c - expected) ** 2 / expected for c in counts)


@pytest.mark.parametrize("partitions", sorted(CHI2_CRITICAL))
def test_route_spreads_keys_evenly(partitions: int) -> None:
    h = Hasher(os.urandom(16))
    counts = [0] * partitions
    # Sequential, highly similar keys: the realistic worst case for a weak mix.
    for i in range(N_KEYS):
        counts[h.route(b"\x00\x01", b"order-%d" % i, partitions)] += 1
    assert sum(counts) == N_KEYS  # route never answers outside [0, partitions)
    chi2 = _chi_square(counts)
    assert chi2 < CHI2_CRITICAL[partitions], (chi2, counts)


def test_route_stays_in_range_for_odd_partition_counts() -> None:
    h = Hasher(os.urandom(16))
    for partitions in (1, 2, 3, 5, 31, 64, 255):
        seen = {h.route(b"\x00\x07", i.to_bytes(4, "big"), partitions) for i in range(5000)}
        assert seen <= set(range(partitions)), partitions
        # With 5000 keys every partition is hit (misses are ~e^-20 at 255).
        assert len(seen) == partitions, partitions


def test_route_is_stable_for_one_secret() -> None:
    secret = os.urandom(16)
    a, b = Hasher(secret), Hasher(bytes(secret))
    keys = [b"key-%d" % i for i in range(10_000)]
    assert [a.route(b"\x00\x01", k, 16) for k in keys] == [b.route(b"\x00\x01", k, 16) for k in keys]
    # And the route is the documented reduction of the 64-bit hash of prefix + key.
    for k in keys[:100]:
        assert a.route(b"\x00\x01", k, 16) == ((a.hash64(b"\x00\x01" + k) >> 32) * 16) >> 32


def test_route_differs_across_secrets_and_namespaces() -> None:
    keys = [b"key-%d" % i for i in range(10_000)]
    a, b = Hasher(os.urandom(16)), Hasher(os.urandom(16))
    ra = [a.route(b"\x00\x01", k, 16) for k in keys]
    rb = [b.route(b"\x00\x01", k, 16) for k in keys]
    rns = [a.route(b"\x00\x02", k, 16) for k in keys]
    # Independent routes agree on ~1/16 of keys (625 of 10k, sd ~24); a router
    # that ignored the secret or the namespace would agree on all of them.
    assert sum(x == y for x, y in zip(ra, rb, strict=True)) < 1000
    assert sum(x == y for x, y in zip(ra, rns, strict=True)) < 1000


def test_route_rejects_bad_arguments() -> None:
    h = Hasher(os.urandom(16))
    with pytest.raises(ValueError):
        h.route(b"\x00", b"k", 4)
    with pytest.raises(ValueError):
        h.route(b"\x00\x01", b"k" * 401, 4)


@pytest.mark.parametrize("n", [0, 1, 2, 63, 64, 65, 1000])
@pytest.mark.parametrize("partitions", [1, 4, 256])
def test_a_batch_is_grouped_by_partition_in_input_order(n: int, partitions: int) -> None:
    # route_keys and route_leased group a batch as the calls do (on the
    # stack up to 64 keys, else in arrays of their own): each partition's
    # indexes in input order, the partitions in the order of their first key.
    h = Hasher(os.urandom(16))
    keys = [f"key-{i % max(1, n // 2)}" for i in range(n)]  # repeats too
    expected: dict[int, list[int]] = {}
    for i, k in enumerate(keys):
        expected.setdefault(h.route(b"\x00\x01", k.encode(), partitions), []).append(i)
    kbs, groups = h.route_keys(b"\x00\x01", keys, partitions)
    assert kbs == [k.encode() for k in keys]
    assert list(groups.items()) == list(expected.items())
    assert h.route_keys(b"\x00\x01", iter(keys), partitions) == (kbs, groups)  # any iterable
    items = [(k, i + 1, b"out") for i, k in enumerate(keys)]
    lkbs, toks, outs, lgroups = h.route_leased(b"\x00\x01", items, partitions, 10, "ns")
    assert (lkbs, toks, outs) == (kbs, [i + 1 for i in range(n)], [b"out"] * n)
    assert list(lgroups.items()) == list(expected.items())


def test_routing_a_batch_past_the_largest_store_is_refused() -> None:
    with pytest.raises(ValueError, match="more partitions than a store may have"):
        Hasher(os.urandom(16)).route_keys(b"\x00\x01", ["a"], 257)
