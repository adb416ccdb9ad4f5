"""Capacity arithmetic behind ``dedupstore size`` and ``dedupstore plan``.

Pure functions over numbers that were already parsed (rates in events per
second, durations in seconds); each returns a small frozen record of its inputs
and results. The models are the seed's teaching calculations
(``../shared/seeds/event-processing-idempotent-effects.txt``): they give the
order of magnitude and expose an impossible plan, they do not replace a
measurement. Every formula is written out in ``docs/cli/size.md`` and
``docs/cli/plan.md``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .errors import InvalidInputError

#: The seed's modelled entry: key, state, time and index/storage overhead.
DEFAULT_ENTRY_BYTES = 96.0

#: Decimal gigabyte, as in the seed's "74.6496 GB".
BYTES_PER_GB = 1e9


class InfeasiblePlanError(InvalidInputError):
    """The figures parse, but the plan they describe can never work.

    The message carries the figures that make it impossible.
    """


@dataclass(frozen=True)
class ReplayWindow:
    """A declared way an old event can come back: broker retention, approved replay, ..."""

    name: str
    seconds: float


@dataclass(frozen=True)
class WindowViolation:
    """A replay window longer than the horizon: a replay could outlive its evidence."""

    name: str
    window_seconds: float
    horizon_seconds: float


@dataclass(frozen=True)
class SizingPlan:
    rate: float
    horizon_seconds: float
    entry_bytes: float
    replicas: int
    amplification: float
    windows: tuple[ReplayWindow, ...]
    entries: float
    logical_bytes: float
    storage_bytes: float
    violations: tuple[WindowViolation, ...]

    @property
    def storage_gb(self) -> float:
        return self.storage_bytes / BYTES_PER_GB

    @property
    def valid(self) -> bool:
        return not self.violations


@dataclass(frozen=True)
class CheckpointPlan:
    rate: float
    interval_seconds: float
    recovery_rate: float
    restore_seconds: float
    hot_key_slowdown_percent: float
    replayed_average: float
    replayed_worst: float
    net_catch_up_rate: float
    ideal_catch_up_average_seconds: float
    ideal_catch_up_worst_seconds: float
    restore_backlog: float

    @property
    def slowdown_factor(self) -> float:
        return 1 + self.hot_key_slowdown_percent / 100

    @property
    def catch_up_average_seconds(self) -> float:
        return self._catch_up(self.replayed_average)

    @property
    def catch_up_worst_seconds(self) -> float:
        return self._catch_up(self.replayed_worst)

    def _catch_up(self, replayed: float) -> float:
        # Restore is measured wall time, not processing, so the hot-key factor leaves it alone.
        drain = (replayed + self.restore_backlog) / self.net_catch_up_rate
        return self.restore_seconds + drain * self.slowdown_factor


@dataclass(frozen=True)
class BackfillPlan:
    events: float
    capacity: float
    live_reserve: float
    control_reserve: float
    rate_cap: float
    duration_seconds: float

    @property
    def duration_hours(self) -> float:
        return self.duration_seconds / 3600.0


def format_number(value: float, decimals: int = 2) -> str:
    """Thousands separators, at most ``decimals`` decimals, no trailing zeros."""
    text = f"{value:,.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def _require(value: float, what: str, *, positive: bool = True) -> None:
    # The CLI parses through dedupstore.units, but library callers hand numbers
    # straight in; a NaN here would silently make every comparison false.
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise InvalidInputError(
            f"{what} must be a finite number {'> 0' if positive else '>= 0'}; got {value!r}"
        )


def _check_finite(what: str, *results: float) -> None:
    # Each input is finite, but 1e300 events/s over a century is not: refuse rather than print "inf".
    if not all(math.isfinite(result) for result in results):
        raise InvalidInputError(f"the {what} figures overflow: the inputs are far outside any real range")


def size(
    *,
    rate: float,
    horizon_seconds: float,
    entry_bytes: float = DEFAULT_ENTRY_BYTES,
    replicas: int = 1,
    amplification: float = 1.0,
    windows: tuple[ReplayWindow, ...] = (),
) -> SizingPlan:
    """Entries and bytes a horizon holds at a steady rate, and the windows it fails to cover.

    ``entries = rate * horizon``; ``storage = entries * entry_bytes * replicas *
    amplification``. A window strictly longer than the horizon is a violation:
    an event replayed that late finds no evidence and would be processed again.
    """
    _require(rate, "rate")
    _require(horizon_seconds, "horizon")
    _require(entry_bytes, "entry bytes")
    _require(amplification, "amplification")
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        raise InvalidInputError(f"replicas must be a whole number >= 1; got {replicas!r}")
    seen: set[str] = set()
    for window in windows:
        if not window.name:
            raise InvalidInputError("a replay window needs a name, such as approved-replay=7d")
        if window.name in seen:
            # Two figures for one window would make the verdict depend on their order.
            raise InvalidInputError(f"replay window {window.name!r} is given more than once")
        seen.add(window.name)
        _require(window.seconds, f"replay window {window.name!r}")
    entries = rate * horizon_seconds
    logical_bytes = entries * entry_bytes
    storage_bytes = logical_bytes * replicas * amplification
    _check_finite("sizing", entries, logical_bytes, storage_bytes)
    return SizingPlan(
        rate=rate,
        horizon_seconds=horizon_seconds,
        entry_bytes=entry_bytes,
        replicas=replicas,
        amplification=amplification,
        windows=windows,
        entries=entries,
        logical_bytes=logical_bytes,
        storage_bytes=storage_bytes,
        violations=tuple(
            WindowViolation(w.name, w.seconds, horizon_seconds)
            for w in windows
            if w.seconds > horizon_seconds
        ),
    )


def checkpoint(
    *,
    rate: float,
    interval_seconds: float,
    recovery_rate: float,
    restore_seconds: float = 0.0,
    hot_key_slowdown_percent: float = 0.0,
) -> CheckpointPlan:
    """Events replayed after a crash between checkpoints, and how long catching up takes.

    Failures are assumed uniform over the interval, so on average half an
    interval is replayed and at worst a full one. The backlog drains at
    ``recovery_rate - rate`` because live events keep arriving meanwhile.

    ``restore_seconds`` (measured) is spent before any processing, while events
    still arrive: it adds itself *and* ``rate * restore_seconds`` events of
    backlog. ``hot_key_slowdown_percent`` p multiplies the drain time by
    ``1 + p/100`` (the seed's drill: 25%); it does not touch the restore time.
    So ``catch_up = restore + (replayed + rate * restore) / net * (1 + p/100)``.
    """
    _require(rate, "rate")
    _require(interval_seconds, "checkpoint interval")
    _require(recovery_rate, "recovery rate")
    _require(restore_seconds, "restore time", positive=False)
    _require(hot_key_slowdown_percent, "hot-key slowdown", positive=False)
    net = recovery_rate - rate
    if net <= 0:
        raise InfeasiblePlanError(
            f"recovery rate {format_number(recovery_rate)} events/s does not exceed the arrival rate "
            f"{format_number(rate)} events/s (net catch-up {format_number(net)} events/s): "
            f"the replay backlog would never drain"
        )
    replayed_average = rate * interval_seconds / 2
    replayed_worst = rate * interval_seconds
    plan = CheckpointPlan(
        rate=rate,
        interval_seconds=interval_seconds,
        recovery_rate=recovery_rate,
        restore_seconds=restore_seconds,
        hot_key_slowdown_percent=hot_key_slowdown_percent,
        replayed_average=replayed_average,
        replayed_worst=replayed_worst,
        net_catch_up_rate=net,
        ideal_catch_up_average_seconds=replayed_average / net,
        ideal_catch_up_worst_seconds=replayed_worst / net,
        restore_backlog=rate * restore_seconds,
    )
    _check_finite("checkpoint", plan.replayed_worst, plan.catch_up_worst_seconds)
    return plan


def backfill(*, events: float, capacity: float, live_reserve: float, control_reserve: float) -> BackfillPlan:
    """The rate a backfill may use once live work and control traffic are reserved, and its duration.

    ``cap = capacity - live_reserve - control_reserve``; ``duration = events / cap``.
    The reserves come first: a backfill sized from average spare capacity
    starves live work at the first burst.
    """
    _require(events, "events")
    _require(capacity, "capacity")
    _require(live_reserve, "live reserve", positive=False)
    _require(control_reserve, "control reserve", positive=False)
    reserved = live_reserve + control_reserve
    cap = capacity - reserved
    if cap <= 0:
        verdict = "exceed" if cap < 0 else "use up"
        raise InfeasiblePlanError(
            f"live reserve {format_number(live_reserve)} + control reserve {format_number(control_reserve)} "
            f"= {format_number(reserved)} events/s {verdict} the capacity "
            f"{format_number(capacity)} events/s: no rate is left for the backfill"
        )
    duration_seconds = events / cap
    _check_finite("backfill", duration_seconds)
    return BackfillPlan(
        events=events,
        capacity=capacity,
        live_reserve=live_reserve,
        control_reserve=control_reserve,
        rate_cap=cap,
        duration_seconds=duration_seconds,
    )
