"""Pictures of a load run: the claim-latency histogram and latency over time.

matplotlib is optional (the ``plot`` extra) and imported only here, only when a
picture is asked for, and only after the measured run: it costs nothing in the
figures it draws.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from .errors import InvalidInputError

INSTALL_HINT = "pip install 'dedupstore[plot]' (matplotlib)"


def require_matplotlib() -> None:
    """Fail before a long run, not after it, when the picture cannot be drawn."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise InvalidInputError(f"a latency picture needs matplotlib: {INSTALL_HINT}") from None


def _windows(latencies: list[float], rate: float, window_s: float) -> tuple[list[float], list[float], list[float]]:
    """(start time, p50, p99) per window of scheduled time."""
    per = max(1, int(rate * window_s))
    xs: list[float] = []
    p50: list[float] = []
    p99: list[float] = []
    for start in range(0, len(latencies), per):
        chunk = sorted(latencies[start:start + per])
        xs.append(start / rate)
        p50.append(chunk[len(chunk) // 2])
        p99.append(chunk[min(len(chunk) - 1, int(0.99 * len(chunk)))])
    return xs, p50, p99


def latency_png(path: str | Path, latencies_us: list[float], doc: dict[str, Any]) -> Path:
    """Write a two-panel PNG for a run (``doc`` is ``LoadReport.to_dict()``); returns its path."""
    import matplotlib

    matplotlib.use("Agg")  # no display needed; must precede pyplot
    import matplotlib.pyplot as plt

    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    data = [max(x, 1.0) for x in latencies_us]  # log axis: clamp the (impossible) non-positive
    fig, (hist, over) = plt.subplots(1, 2, figsize=(13, 5), constrained_layout=True)
    lo, hi = math.log10(min(data)), math.log10(max(data))
    if hi - lo < 0.1:
        hi = lo + 0.1
    bins = [10 ** (lo + (hi - lo) * i / 80) for i in range(81)]
    hist.hist(data, bins=bins, color="#4878a8")
    hist.set_xscale("log")
    hist.set_xlabel("claim latency from scheduled send time (µs, log scale)")
    hist.set_ylabel("events")
    for q, key, colour in ((0.5, "p50_us", "#2a9d4a"), (0.99, "p99_us", "#e07b00"), (0.999, "p999_us", "#c0392b")):
        hist.axvline(max(doc[key], 1.0), color=colour, linestyle="--", linewidth=1.2,
                     label=f"p{q * 100:g} {doc[key]:,.0f} µs")
    hist.legend(loc="upper right")
    hist.set_title("distribution")

    xs, p50, p99 = _windows(latencies_us, float(doc["rate"]), 0.25)
    over.plot(xs, [max(v, 1.0) for v in p50], color="#2a9d4a", label="p50 per 0.25 s")
    over.plot(xs, [max(v, 1.0) for v in p99], color="#e07b00", label="p99 per 0.25 s")
    over.set_yscale("log")
    over.set_xlabel("scheduled send time (s from start)")
    over.set_ylabel("claim latency (µs, log scale)")
    over.legend(loc="upper left")
    over.set_title("over the run (a stall shows as a spike)")

    ev = doc.get("eviction", {})
    fig.suptitle(
        f"dedupstore bench: {doc['rate']:,.0f} events/s offered, {doc['achieved_rate']:,.0f}/s achieved, "
        f"{doc['durability']}, {doc['mode']} (batch {doc['batch']}); CPU {doc['cpu_share'] * 100:.1f}% of one core; "
        f"{ev.get('evicted', 0):,} evicted"
    )
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
