"""Canonical intents (SPEC section 2): the bytes whose keyed digest decides
DUPLICATE versus CONFLICT, so two intents a caller means as equal must give the
same bytes and two it means as different must not.
"""

from __future__ import annotations

import enum
import json
import math
import types
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dedupstore import DedupStore, InvalidIntentError, Status
from dedupstore._native import MAX_INTENT_BYTES, MAX_INTENT_DEPTH, Hasher, canonical_intent

RAW = b"\x00"
STRUCTURED = b"\x01"


def canon(intent: object, fields: tuple[str, ...] | None = None) -> bytes:
    out = canonical_intent(intent, fields)
    assert out is not None
    return out


class FrozenMapping(Mapping[str, Any]):
    """A Mapping that is not a dict, iterating in reverse insertion order."""

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(reversed(list(self._data)))

    def __len__(self) -> int:
        return len(self._data)


# ---------------------------------------------------------------------------
# Raw intents


def test_none_means_no_intent_check() -> None:
    assert canonical_intent(None) is None
    assert canonical_intent(None, ("amount",)) is None


def test_bytes_and_str_share_one_raw_form() -> None:
    assert canon(b"pay 100") == RAW + b"pay 100"
    assert canon("pay 100") == RAW + b"pay 100"
    assert canon("caf\u00e9 \U0001f600") == RAW + "caf\u00e9 \U0001f600".encode()
    assert canon(bytearray(b"ab")) == canon(memoryview(b"ab")) == canon(b"ab") == canon("ab")
    assert canon(b"") == RAW
    # Raw bytes are not parsed: text that looks like JSON stays apart from the structure.
    assert canon('{"a":1}') != canon({"a": 1})
    assert canon({"a": 1}) == STRUCTURED + b'{"a":1}'


def test_lone_surrogates_are_rejected() -> None:
    for bad in ("\ud800", "ok\udfff", {"a": "\ud83d"}, {"\udc00": 1}, ["x", "\ud800"]):
        with pytest.raises(InvalidIntentError, match="UTF-8"):
            canonical_intent(bad)


# ---------------------------------------------------------------------------
# Structured intents


def test_canonical_json_form() -> None:
    assert canon({"b": 1, "a": [True, False, None], "c": {"y": "", "x": -2}}) == (
        STRUCTURED + b'{"a":[true,false,null],"b":1,"c":{"x":-2,"y":""}}'
    )
    assert canon([]) == STRUCTURED + b"[]"
    assert canon({}) == STRUCTURED + b"{}"
    assert canon([{"k": [[], {}]}]) == STRUCTURED + b'[{"k":[[],{}]}]'


def test_strings_escape_like_json_and_keep_utf8() -> None:
    value = 'q"b\\s/\b\f\n\r\t\x00\x1f\x7f\u00e9\u2028\U0001f600'
    want = ('"q\\"b\\\\s/\\b\\f\\n\\r\\t\\u0000\\u001f\x7f\u00e9\u2028\U0001f600"').encode()
    assert canon([value]) == STRUCTURED + b"[" + want + b"]"
    # Keys are strings too, escaped the same way.
    assert canon({value: 0}) == STRUCTURED + b"{" + want + b":0}"


def test_key_order_and_mapping_type_do_not_matter() -> None:
    data = {"amount": 100, "currency": "EUR", "meta": {"z": 1, "a": 2}}
    reordered = {"meta": {"a": 2, "z": 1}, "currency": "EUR", "amount": 100}
    forms = {
        canon(data),
        canon(reordered),
        canon(OrderedDict(reversed(list(data.items())))),
        canon(types.MappingProxyType(data)),
        canon(FrozenMapping(data)),
        canon({"meta": FrozenMapping({"z": 1, "a": 2}), "currency": "EUR", "amount": 100}),
    }
    assert len(forms) == 1
    # Keys sort by code point (the order of their UTF-8 bytes), not by locale or case.
    want = STRUCTURED + '{"":0,"B":0,"a":0,"b":0,"\u00e9":0}'.encode()
    assert canon({"b": 0, "B": 0, "\u00e9": 0, "a": 0, "": 0}) == want


def test_list_order_matters() -> None:
    assert canon([1, 2]) != canon([2, 1])


def test_numbers() -> None:
    # 100 and 100.0 are one amount; integral floats are written as integers.
    assert canon({"amount": 100}) == canon({"amount": 100.0}) == STRUCTURED + b'{"amount":100}'
    assert canon([-1.0, -0.0, 0.0]) == canon([-1, 0, 0])
    assert canon([2.0**53 - 1]) == canon([2**53 - 1])
    # Non-integral floats use repr: the shortest text that round-trips.
    assert canon([0.1]) == STRUCTURED + b"[0.1]"
    assert canon([1.5, -2.25, 1e-7, 1.7e308]) == STRUCTURED + b"[1.5,-2.25,1e-07,1.7e+308]"
    assert canon([0.1 + 0.2]) != canon([0.3])
    # Integrality is judged on the double itself: a value that only becomes
    # integral when rounded to less precision (2**24 + 1.5 in single precision,
    # a subnormal flushed to zero) must keep its fraction, or two different
    # amounts would share one digest and a CONFLICT would read as a DUPLICATE.
    for fractional in (2.0**24 + 1.5, 16777217.5, 1e15 + 0.5, 2.0**51 + 0.5, 1e-300, 5e-324, -1e-40):
        assert not fractional.is_integer()
        assert canon([fractional]) == STRUCTURED + f"[{fractional!r}]".encode(), fractional
        assert canon([fractional]) != canon([int(fractional)]), fractional
    # Integers of any size are exact.
    assert canon([2**64 + 1, -(2**70)]) == STRUCTURED + f"[{2**64 + 1},{-(2**70)}]".encode()
    # Either side of the 64-bit range (formatted in C within it, by int.__repr__ past it).
    edges = [2**63 - 1, -(2**63), 2**63, -(2**63) - 1, 0, -1]
    assert canon(edges) == STRUCTURED + ("[" + ",".join(map(str, edges)) + "]").encode()


def test_bool_is_not_int() -> None:
    assert canon([True]) != canon([1])
    assert canon([False]) != canon([0])
    assert canon({"paid": True}) == STRUCTURED + b'{"paid":true}'


def test_str_enum_canonicalises_as_its_string() -> None:
    # As keys (whatever their number: a small dict and a large one are
    # written by two different paths) and as values.
    class Currency(enum.StrEnum):
        EUR = "EUR"

    assert canon({Currency.EUR: Currency.EUR}) == canon({"EUR": "EUR"}) == STRUCTURED + b'{"EUR":"EUR"}'
    big = {f"k{i:02d}": i for i in range(30)}
    assert canon({Currency.EUR: 1, **big}) == canon({"EUR": 1, **big})


def test_int_enum_canonicalises_as_its_value() -> None:
    class Code(enum.IntEnum):
        OK = 7

    assert canon({"code": Code.OK}) == canon({"code": 7})


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nan_and_infinities_are_rejected(bad: float) -> None:
    for intent in ([bad], {"amount": bad}, {"nested": [{"x": bad}]}):
        with pytest.raises(InvalidIntentError, match="finite.*NaN and infinities"):
            canonical_intent(intent)


@pytest.mark.parametrize(
    "bad",
    [[(1, 2)], [{1, 2}], [frozenset()], [b"raw"], {"a": bytearray(b"x")}, {"a": object()}, [1 + 2j]],
    ids=["tuple", "set", "frozenset", "bytes", "bytearray", "object", "complex"],
)
def test_other_types_inside_structures_are_rejected(bad: object) -> None:
    with pytest.raises(InvalidIntentError, match="str, int, float, bool, None, list or dict"):
        canonical_intent(bad)


@pytest.mark.parametrize("bad", [(1, 2), 5, 1.5, True, {1, 2}])
def test_top_level_must_be_bytes_str_mapping_or_list(bad: object) -> None:
    with pytest.raises(InvalidIntentError, match="bytes, str, a mapping, a list or None"):
        canonical_intent(bad)


@pytest.mark.parametrize("key", [1, None, True, b"k", (1,), 1.5])
def test_non_str_keys_are_rejected(key: object) -> None:
    with pytest.raises(InvalidIntentError, match="keys must be str"):
        canonical_intent({key: 1})
    with pytest.raises(InvalidIntentError, match="keys must be str"):
        canonical_intent({"outer": {key: 1}})


# ---------------------------------------------------------------------------
# Limits


def _nested_lists(levels: int, innermost: list[Any]) -> list[Any]:
    out = innermost
    for _ in range(levels - 1):
        out = [out]
    return out


def _nested_dicts(levels: int, leaf: object) -> dict[str, Any]:
    out: dict[str, Any] = {"v": leaf}
    for _ in range(levels - 1):
        out = {"v": out}
    return out


def test_depth_limit() -> None:
    # Depth counts containers: {"a": 1} is one level. A structure exactly
    # MAX_INTENT_DEPTH containers deep is accepted whatever its leaves hold.
    assert canon(_nested_lists(MAX_INTENT_DEPTH, [])) == STRUCTURED + b"[" * MAX_INTENT_DEPTH + b"]" * MAX_INTENT_DEPTH
    assert canon(_nested_lists(MAX_INTENT_DEPTH, [1])).count(b"1") == 1
    assert canon(_nested_dicts(MAX_INTENT_DEPTH, "x")).count(b'"x"') == 1
    for too_deep in (
        _nested_lists(MAX_INTENT_DEPTH + 1, []),
        _nested_lists(MAX_INTENT_DEPTH + 1, [1]),
        _nested_dicts(MAX_INTENT_DEPTH + 1, None),
        _nested_dicts(MAX_INTENT_DEPTH, []),  # the innermost empty list is level MAX + 1
    ):
        with pytest.raises(InvalidIntentError, match=f"at most {MAX_INTENT_DEPTH} levels"):
            canonical_intent(too_deep)


def test_self_referencing_structure_is_rejected_not_a_crash() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(InvalidIntentError, match="levels"):
        canonical_intent(loop)


def test_raw_size_limit() -> None:
    # The tag byte counts: MAX_INTENT_BYTES - 1 raw bytes fill the limit exactly.
    assert len(canon(b"x" * (MAX_INTENT_BYTES - 1))) == MAX_INTENT_BYTES
    assert len(canon("x" * (MAX_INTENT_BYTES - 1))) == MAX_INTENT_BYTES
    for over in (b"x" * MAX_INTENT_BYTES, "x" * MAX_INTENT_BYTES, bytearray(MAX_INTENT_BYTES)):
        with pytest.raises(InvalidIntentError, match=str(MAX_INTENT_BYTES)):
            canonical_intent(over)
    # The limit is on UTF-8 bytes, not characters.
    half = (MAX_INTENT_BYTES - 1) // 2
    assert len(canon("\u00e9" * half + "x" * ((MAX_INTENT_BYTES - 1) - 2 * half))) == MAX_INTENT_BYTES
    with pytest.raises(InvalidIntentError, match=str(MAX_INTENT_BYTES)):
        canonical_intent("\u00e9" * (half + 1))


def test_structured_size_limit() -> None:
    # STRUCTURED + {"a":"...."} is 9 bytes around the string's content.
    fits = {"a": "x" * (MAX_INTENT_BYTES - 9)}
    assert len(canon(fits)) == MAX_INTENT_BYTES
    with pytest.raises(InvalidIntentError, match=str(MAX_INTENT_BYTES)):
        canonical_intent({"a": "x" * (MAX_INTENT_BYTES - 8)})
    # The escaped form is what counts: STRUCTURED + ["..."] is 5 bytes around
    # the content, and each "\n" takes two.
    newlines = (MAX_INTENT_BYTES - 5) // 2
    pad = "x" * (MAX_INTENT_BYTES - 5 - 2 * newlines)
    assert len(canon(["\n" * newlines + pad])) == MAX_INTENT_BYTES
    with pytest.raises(InvalidIntentError, match=str(MAX_INTENT_BYTES)):
        canonical_intent(["\n" * newlines + pad + "x"])
    # Many small items reach the limit as surely as one large one.
    n = (MAX_INTENT_BYTES - 2) // 2  # STRUCTURED + [0,0,...,0] is 2n + 2 bytes
    assert len(canon([0] * n)) == 2 * n + 2 == MAX_INTENT_BYTES
    with pytest.raises(InvalidIntentError, match=str(MAX_INTENT_BYTES)):
        canonical_intent([0] * (n + 1))


# ---------------------------------------------------------------------------
# intent_fields


def test_fields_keep_only_named_top_level_fields() -> None:
    intent = {"amount": 100, "currency": "EUR", "note": "first try", "meta": {"amount": 1}}
    assert canon(intent, ("amount", "currency")) == STRUCTURED + b'{"amount":100,"currency":"EUR"}'
    assert canon(intent, ("amount",)) == canon({"amount": 100.0, "note": "second try"}, ("amount",))
    # Missing named fields are absent, not null.
    assert canon({"note": "x"}, ("amount",)) == STRUCTURED + b"{}"
    assert canon({"note": "x"}, ("amount",)) != canon({"amount": None}, ("amount",))
    # Only the named fields are validated: what is ignored cannot make the intent invalid.
    assert canon({"amount": 1, "blob": b"\x00", "f": math.nan}, ("amount",)) == STRUCTURED + b'{"amount":1}'
    # ...but the named ones are.
    with pytest.raises(InvalidIntentError):
        canonical_intent({"amount": math.inf}, ("amount",))
    # Field selection works on any Mapping, and raw intents are unaffected.
    assert canon(FrozenMapping(intent), ("amount",)) == canon(intent, ("amount",))
    assert canon(b"raw", ("amount",)) == RAW + b"raw"


# ---------------------------------------------------------------------------
# Equivalence with the standard library's JSON

# Integral floats are excluded: canonical_intent writes 100.0 as 100 (one amount,
# one digest), where json.dumps writes "100.0". Every other JSON-like value must
# come out byte for byte as json.dumps writes it with these settings.
_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: not f.is_integer())
    | st.text()
)
_json_like = st.recursive(
    _scalars,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(), children, max_size=5),
    max_leaves=40,
)
_top_level = st.lists(_json_like, max_size=5) | st.dictionaries(st.text(), _json_like, max_size=5)


@settings(max_examples=400, deadline=None)
@given(obj=_top_level)
def test_matches_json_dumps(obj: Any) -> None:
    want = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    assert canon(obj) == STRUCTURED + want.encode("utf-8")


@settings(max_examples=200, deadline=None)
@given(obj=st.dictionaries(st.text(max_size=4), st.integers() | st.text(max_size=3), max_size=40))
def test_mappings_of_any_size_match_json_dumps(obj: dict[str, Any]) -> None:
    # Up to 16 keys a dict's keys are ordered by their UTF-8 bytes in C,
    # beyond that by list.sort: both must be json.dumps' (code point) order.
    want = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert canon(obj) == STRUCTURED + want.encode("utf-8")


_ascii = st.text(alphabet=st.characters(max_codepoint=127), max_size=8)


@settings(max_examples=300, deadline=None)
@given(obj=st.dictionaries(_ascii, st.none() | st.booleans() | st.integers() | _ascii, max_size=16))
def test_flat_ascii_mappings_match_json_dumps(obj: dict[str, Any]) -> None:
    # The common intent's shape, written by one C call (ds_buf_put_flat_object)
    # when every key and text is ASCII and every int fits in 64 bits; others
    # (a larger int here) by the general path: the same bytes either way.
    want = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert canon(obj) == STRUCTURED + want.encode("utf-8")


def test_flat_mapping_edges() -> None:
    # Either side of the 64-bit range, and members the flat path leaves to
    # the general one (a non-ASCII key or text, a float, a str or int
    # subclass, a nested container) beside those it takes.
    class Code(enum.IntEnum):
        OK = 7

    class Currency(enum.StrEnum):
        EUR = "EUR"

    for value in (2**63 - 1, -(2**63), 2**63, -(2**63) - 1):
        assert canon({"a": value, "b": "x"}) == STRUCTURED + f'{{"a":{value},"b":"x"}}'.encode()
    assert canon({"b": 1, "\u00e9": "x"}) == STRUCTURED + '{"b":1,"\u00e9":"x"}'.encode()
    assert canon({"b": 1, "a": "\u20ac"}) == STRUCTURED + '{"a":"\u20ac","b":1}'.encode()
    assert canon({"b": 1, "a": 2.5}) == STRUCTURED + b'{"a":2.5,"b":1}'
    assert canon({"b": 1, "a": Code.OK}) == STRUCTURED + b'{"a":7,"b":1}'
    assert canon({"b": 1, "a": Currency.EUR}) == STRUCTURED + b'{"a":"EUR","b":1}'
    assert canon({"b": 1, "a": [1]}) == STRUCTURED + b'{"a":[1],"b":1}'
    assert canon({"b": None, "a": True, "c": False}) == STRUCTURED + b'{"a":true,"b":null,"c":false}'
    assert canon({"q": 'say "hi"\n', "": 0}) == STRUCTURED + b'{"":0,"q":"say \\"hi\\"\\n"}'


@pytest.mark.parametrize(
    "intent",
    [b"raw", b"", b"z" * 511, b"z" * 512, "text", [1, 2], {"amount": 1234, "currency": "EUR"},
     {"note": "x" * 2000}, b"y" * 3000],
    ids=["bytes", "empty-bytes", "bytes-511", "bytes-512", "str", "list", "mapping", "long-mapping", "long-bytes"],
)
def test_the_stored_digest_is_the_digest_of_the_canonical_form(intent: object) -> None:
    # Hasher.intent_digest hashes the form where it builds it (on the stack
    # up to 512 bytes, then on the heap; bytes under 512 beside their tag
    # byte, without the buffer), never making canonical_intent's bytes.
    hasher = Hasher(bytes(range(16)))
    assert hasher.intent_digest(intent) == hasher.digest(canon(intent))
    assert hasher.intent_digests([intent, None]) == [hasher.digest(canon(intent)), None]


# ---------------------------------------------------------------------------
# Through the store

NS = "orders"


def test_reordered_mapping_is_not_a_conflict(store: DedupStore) -> None:
    first = store.claim(NS, "order-1", {"a": 1, "b": 2})
    assert first.status is Status.NEW and first.token is not None
    # While the first claim is in flight the reordered intent is the same effect.
    assert store.claim(NS, "order-1", {"b": 2, "a": 1}).status is Status.IN_PROGRESS
    store.complete(NS, "order-1", first.token, b"done")
    again = store.claim(NS, "order-1", {"b": 2, "a": 1.0})
    assert again.status is Status.DUPLICATE
    assert again.outcome == b"done"
    assert store.claim(NS, "order-1", {"a": 1, "b": 3}).status is Status.CONFLICT


def test_amounts_that_differ_only_in_the_fraction_conflict(store: DedupStore) -> None:
    first = store.claim(NS, "order-3", {"amount": 16777217})
    assert first.token is not None
    store.complete(NS, "order-3", first.token, b"done")
    assert store.claim(NS, "order-3", {"amount": 16777217.0}).status is Status.DUPLICATE
    assert store.claim(NS, "order-3", {"amount": 16777217.5}).status is Status.CONFLICT


def test_str_and_bytes_intents_are_one_intent(store: DedupStore) -> None:
    first = store.claim(NS, "order-2", "pay 100")
    assert first.token is not None
    store.complete(NS, "order-2", first.token, b"ok")
    assert store.claim(NS, "order-2", b"pay 100").status is Status.DUPLICATE
    assert store.claim(NS, "order-2", b"pay 101").status is Status.CONFLICT


def test_intent_fields_limit_what_conflicts(store: DedupStore) -> None:
    store.ensure_namespace("payments", horizon="1h", lease="30s", intent_fields=["amount"])
    first = store.claim("payments", "p-1", {"amount": 100, "note": "first attempt", "attempt": 1})
    assert first.status is Status.NEW and first.token is not None
    store.complete("payments", "p-1", first.token, b"paid")
    same = store.claim("payments", "p-1", {"amount": 100, "note": "redelivery", "attempt": 2})
    assert same.status is Status.DUPLICATE
    assert same.outcome == b"paid"
    assert store.claim("payments", "p-1", {"attempt": 3, "amount": 100.0}).status is Status.DUPLICATE
    differs = store.claim("payments", "p-1", {"amount": 101, "note": "first attempt", "attempt": 1})
    assert differs.status is Status.CONFLICT
    assert differs.record == store.lookup("payments", "p-1")
    # A missing amount is not the same intent as the recorded amount.
    assert store.claim("payments", "p-1", {"note": "no amount"}).status is Status.CONFLICT
    # The same key and intents in a namespace without intent_fields do conflict.
    other = store.claim(NS, "p-1", {"amount": 100, "note": "first attempt"})
    assert other.token is not None
    store.complete(NS, "p-1", other.token, b"x")
    assert store.claim(NS, "p-1", {"amount": 100, "note": "redelivery"}).status is Status.CONFLICT


def test_invalid_intent_through_the_store_names_the_rule(store: DedupStore) -> None:
    with pytest.raises(InvalidIntentError, match="NaN and infinities"):
        store.claim(NS, "k", {"amount": math.nan})
    with pytest.raises(ValueError, match=str(MAX_INTENT_BYTES)):
        store.claim(NS, "k", b"x" * MAX_INTENT_BYTES)
    # Nothing was recorded by the refused claims.
    assert store.lookup(NS, "k") is None
