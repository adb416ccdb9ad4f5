"""Strict parsing of the units people type: durations, counts and rates.

Durations accept seconds (``int``/``float``) or strings such as ``"250ms"``,
``"90s"``, ``"15m"``, ``"12h"``, ``"7d"``; counts accept ``"18000"``, ``"25k"``,
``"1.2e9"``, ``"2M"``. Anything else raises a ``ValueError`` subclass whose
message names what was expected; nothing is guessed.
"""

from __future__ import annotations

import math
import re

from .errors import InvalidDurationError, InvalidInputError

_DURATION_UNITS = {
    "us": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
    "d": 86400.0,
    "w": 7 * 86400.0,
}
_NUMBER = r"[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?"
_DURATION_RE = re.compile(rf"^\s*({_NUMBER})\s*(us|ms|s|m|h|d|w)?\s*$")
_COUNT_RE = re.compile(rf"^\s*({_NUMBER})\s*([kKMGT])?\s*$")
_COUNT_SUFFIX = {"k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}

#: The longest duration accepted anywhere (100 years), so arithmetic in
#: microseconds stays far inside 64 bits.
MAX_DURATION_S = 100 * 365 * 86400.0


def parse_duration(
    value: object,
    *,
    what: str = "duration",
    minimum: float = 0.0,
    maximum: float = MAX_DURATION_S,
    allow_zero: bool = False,
) -> float:
    """Return ``value`` as seconds (a float), or raise ``InvalidDurationError``.

    ``minimum``/``maximum`` bound the result (inclusive); zero is refused unless
    ``allow_zero``.
    """
    if isinstance(value, bool):
        raise InvalidDurationError(f"{what} must be seconds or a string like '90s', '12h', '7d'; got {value!r}")
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str):
        match = _DURATION_RE.match(value)
        if match is None:
            raise InvalidDurationError(
                f"{what} {value!r} is not a duration: use seconds or a number with one of "
                f"the units us, ms, s, m, h, d, w (for example '90s', '15m', '12h', '7d')"
            )
        seconds = float(match.group(1)) * _DURATION_UNITS[match.group(2) or "s"]
    else:
        raise InvalidDurationError(
            f"{what} must be seconds or a string like '90s', '12h', '7d'; got {type(value).__name__}"
        )
    if not math.isfinite(seconds):
        raise InvalidDurationError(f"{what} must be finite; got {value!r}")
    if seconds < 0 or (seconds == 0 and not allow_zero):
        raise InvalidDurationError(f"{what} must be {'>= 0' if allow_zero else '> 0'}; got {value!r}")
    if seconds < minimum:
        raise InvalidDurationError(f"{what} must be at least {format_duration(minimum)}; got {value!r}")
    if seconds > maximum:
        raise InvalidDurationError(f"{what} must be at most {format_duration(maximum)}; got {value!r}")
    return seconds


def parse_count(value: object, *, what: str = "count", positive: bool = True) -> float:
    """Return a count or rate such as ``18000``, ``"25k"`` or ``"1.2e9"`` as a float."""
    if isinstance(value, bool):
        raise InvalidInputError(f"{what} must be a number such as 18000, 25k or 1.2e9; got {value!r}")
    if isinstance(value, (int, float)):
        number = float(value)
    elif isinstance(value, str):
        match = _COUNT_RE.match(value)
        if match is None:
            raise InvalidInputError(f"{what} {value!r} is not a number such as 18000, 25k or 1.2e9")
        number = float(match.group(1)) * _COUNT_SUFFIX.get(match.group(2) or "", 1.0)
    else:
        raise InvalidInputError(f"{what} must be a number; got {type(value).__name__}")
    if not math.isfinite(number):
        raise InvalidInputError(f"{what} must be finite; got {value!r}")
    if number < 0 or (positive and number == 0):
        raise InvalidInputError(f"{what} must be {'> 0' if positive else '>= 0'}; got {value!r}")
    return number


def format_duration(seconds: float) -> str:
    """The shortest exact spelling of ``seconds`` in the largest whole unit."""
    for unit in ("w", "d", "h", "m", "s"):
        size = _DURATION_UNITS[unit]
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    if seconds >= 1:
        return f"{seconds:g}s"
    if seconds * 1e3 >= 1:
        return f"{seconds * 1e3:g}ms"
    return f"{seconds * 1e6:g}us"
