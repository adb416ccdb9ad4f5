"""Namespaces: the registered scopes of effect keys and their persisted config."""

from __future__ import annotations

import json
import re
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any

from .errors import InvalidNamespaceError, ReplayWindowError
from .units import format_duration, parse_duration

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")

DEFAULT_HORIZON = "12h"
DEFAULT_LEASE = "30s"
DEFAULT_MAX_OUTCOME_BYTES = 64 * 1024
#: Outcomes are stored inline in the record; past this they belong elsewhere.
MAX_OUTCOME_BYTES_LIMIT = 16 * 1024 * 1024
MIN_LEASE_S = 0.001
MAX_LEASE_S = 7 * 86400.0
MIN_HORIZON_S = 1.0
MAX_NAMESPACES = 65535
MAX_INTENT_FIELDS = 256


class ReplayWindowWarning(UserWarning):
    """A declared replay window is longer than the horizon, accepted because the caller insisted."""


def check_name(name: object) -> str:
    if not isinstance(name, str) or NAME_RE.match(name) is None:
        raise InvalidNamespaceError(
            f"namespace must match [a-z0-9][a-z0-9._-]{{0,63}} (1..64 characters: lowercase letters, "
            f"digits, '.', '_', '-'); got {name!r}"
        )
    return name


def generation_length(horizon_s: float) -> int:
    """Generation length in microseconds for a horizon: an eighth of it, within 1 s..1 h.

    Short generations keep the insert region small and hot; few generations
    keep the probes for an absent key few. A horizon up to 8 h has about nine
    live generations; past that the 1 h cap adds one per hour (a 12 h horizon
    has 13), and the Bloom prefilter is what keeps their probes cheap.
    """
    return int(min(max(horizon_s / 8.0, 1.0), 3600.0) * 1_000_000)


@dataclass(frozen=True)
class NamespaceConfig:
    """A namespace as persisted in the store's meta (docs/format.md)."""

    name: str
    id: int
    horizon: float
    lease: float
    max_outcome_bytes: int
    intent_fields: tuple[str, ...] | None
    replay_windows: dict[str, float] = field(default_factory=dict)
    empty_history: bool = False
    allow_short_horizon: bool = False
    created: float = 0.0
    generation_us: int = 0

    @property
    def prefix(self) -> bytes:
        return self.id.to_bytes(2, "big")

    @property
    def initial_frontier_us(self) -> int:
        return 0 if self.empty_history else int(self.created * 1_000_000)

    def to_json(self) -> bytes:
        data = asdict(self)
        data["intent_fields"] = None if self.intent_fields is None else list(self.intent_fields)
        return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> NamespaceConfig:
        data = json.loads(raw)
        if data.get("intent_fields") is not None:
            data["intent_fields"] = tuple(data["intent_fields"])
        return cls(**data)

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "horizon": format_duration(self.horizon),
            "lease": format_duration(self.lease),
            "max_outcome_bytes": self.max_outcome_bytes,
            "intent_fields": None if self.intent_fields is None else list(self.intent_fields),
            "replay_windows": {k: format_duration(v) for k, v in self.replay_windows.items()},
            "empty_history": self.empty_history,
            "allow_short_horizon": self.allow_short_horizon,
            "created": self.created,
            "generation": format_duration(self.generation_us / 1e6),
        }


def build_config(
    name: str,
    *,
    horizon: object,
    lease: object,
    max_outcome_bytes: object,
    intent_fields: object,
    replay_windows: object,
    empty_history: bool,
    allow_short_horizon: bool,
) -> dict[str, Any]:
    """Validate what ``ensure_namespace`` was given; returns the config fields
    that do not depend on the store (no id, no creation time)."""
    check_name(name)
    horizon_s = parse_duration(horizon, what="horizon", minimum=MIN_HORIZON_S)
    lease_s = parse_duration(lease, what="lease", minimum=MIN_LEASE_S, maximum=MAX_LEASE_S)
    if isinstance(max_outcome_bytes, bool) or not isinstance(max_outcome_bytes, int):
        raise InvalidNamespaceError(f"max_outcome_bytes must be an int; got {max_outcome_bytes!r}")
    if not 0 <= max_outcome_bytes <= MAX_OUTCOME_BYTES_LIMIT:
        raise InvalidNamespaceError(
            f"max_outcome_bytes must be 0..{MAX_OUTCOME_BYTES_LIMIT}; got {max_outcome_bytes}"
        )
    fields: tuple[str, ...] | None = None
    if intent_fields is not None:
        if isinstance(intent_fields, str) or not all(isinstance(f, str) for f in intent_fields):  # type: ignore[attr-defined]
            raise InvalidNamespaceError("intent_fields must be a list of field names (str)")
        fields = tuple(sorted(set(intent_fields)))  # type: ignore[call-overload]
        if not fields or len(fields) > MAX_INTENT_FIELDS:
            raise InvalidNamespaceError(f"intent_fields must name 1..{MAX_INTENT_FIELDS} fields")
    windows: dict[str, float] = {}
    if replay_windows:
        if not isinstance(replay_windows, dict):
            raise InvalidNamespaceError("replay_windows must be a mapping such as {'approved_replay': '7d'}")
        for wname, wlen in replay_windows.items():
            if not isinstance(wname, str) or not wname:
                raise InvalidNamespaceError(f"replay window names must be non-empty str; got {wname!r}")
            windows[wname] = parse_duration(wlen, what=f"replay window {wname!r}")
    too_long = {w: s for w, s in windows.items() if s > horizon_s}
    if too_long:
        detail = "; ".join(
            f"{w} reaches {format_duration(s)} but the horizon is {format_duration(horizon_s)}"
            for w, s in sorted(too_long.items())
        )
        message = (
            f"namespace {name!r}: a replay older than the horizon would find its evidence evicted: {detail}. "
            f"Lengthen the horizon to at least {format_duration(max(too_long.values()))}, "
            f"or pass allow_short_horizon=True to accept the risk (it is recorded)"
        )
        if not allow_short_horizon:
            raise ReplayWindowError(message)
        warnings.warn(message, ReplayWindowWarning, stacklevel=3)
    return {
        "name": name,
        "horizon": horizon_s,
        "lease": lease_s,
        "max_outcome_bytes": max_outcome_bytes,
        "intent_fields": fields,
        "replay_windows": windows,
        "empty_history": bool(empty_history),
        "allow_short_horizon": bool(allow_short_horizon),
    }
