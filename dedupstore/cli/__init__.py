"""The ``dedupstore`` command line.

One module per verb (``size.py``, ``plan.py``, ...), each with a
``register(verbs)`` that adds its parser and sets ``run``; ``main.py`` assembles
them and turns errors into exit codes. What every verb shares lives here, so a
new verb needs no edit beyond its own module and one line in ``main.VERBS``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from dedupstore.planning import format_number
from dedupstore.units import format_duration, parse_duration

#: Exit codes, the same for every verb (documented in docs/cli/*.md).
EXIT_OK = 0
EXIT_USAGE = 2  # bad flags or values: nothing was computed
EXIT_PLAN_INVALID = 3  # the inputs parse, but the plan they describe cannot work


class UsageError(Exception):
    """Bad command-line usage; reported as one line and exit code 2."""


def complain(kind: str, message: str) -> None:
    # One line, always: scripts grep stderr, and a wrapped message would be half-read. Flushing
    # stdout first keeps a verdict after the table it judges when both streams share a pipe.
    sys.stdout.flush()
    print(f"dedupstore: {kind}: {' '.join(message.split())}", file=sys.stderr)


def parse_cpus(text: str | None, flag: str) -> tuple[int, ...] | None:
    """A CPU list as Linux writes one (``1``, ``0,2``, ``2-3``), checked
    against the CPUs this process may run on (DedupStore.open's
    ``thread_cpus``); None for None."""
    # Imported here: every verb imports this module, and not every verb
    # needs the store (and its native module) loaded.
    from dedupstore.errors import InvalidInputError
    from dedupstore.store import check_thread_cpus

    if text is None:
        return None
    cpus: set[int] = set()
    try:
        for part in text.split(","):
            lo, _, hi = part.strip().partition("-")
            first, last = int(lo), int(hi or lo)
            if first < 0 or last < first:
                raise ValueError(part)
            cpus.update(range(first, last + 1))
    except ValueError:
        raise UsageError(f"{flag} must be a CPU list such as 1, 0,2 or 2-3; got {text!r}") from None
    try:
        check_thread_cpus(cpus, flag)
    except InvalidInputError as exc:
        raise UsageError(str(exc)) from None
    return tuple(sorted(cpus))


def parse_thread_nice(text: str) -> int | str:
    """--thread-nice: 0..MAX_NICE, or "idle"."""
    from dedupstore import store

    if text == store.IDLE:
        return text
    try:
        steps = int(text)
    except ValueError:
        steps = -1
    if not 0 <= steps <= store.MAX_NICE:
        raise UsageError(f"--thread-nice must be 0..{store.MAX_NICE} (nice steps below the opening thread) or "
                         f"{store.IDLE} (SCHED_IDLE); got {text!r}")
    return steps


def add_store_thread_flags(parser: argparse.ArgumentParser, cpus_help: str) -> None:
    """The flags of how an opened store's own threads work (DedupStore.open's
    ``flush_interval``, ``apply_interval``, ``thread_nice``,
    ``thread_slice`` and ``thread_cpus``), as the verbs that open a store to
    run it share them; :func:`store_thread_options` reads them."""
    from dedupstore.store import (
        DEFAULT_APPLY_INTERVAL,
        DEFAULT_FLUSH_INTERVAL,
        DEFAULT_THREAD_NICE,
        DEFAULT_THREAD_SLICE,
    )

    parser.add_argument(
        "--flush-interval", default=format_duration(DEFAULT_FLUSH_INTERVAL), metavar="DURATION",
        help=f"how often the store's background checkpoint runs (default {format_duration(DEFAULT_FLUSH_INTERVAL)}; "
        f"in flush mode, what an OS crash may take)",
    )
    parser.add_argument(
        "--apply-interval", default=format_duration(DEFAULT_APPLY_INTERVAL), metavar="DURATION",
        help=f"how often the write-behind window is applied to LMDB (default "
             f"{format_duration(DEFAULT_APPLY_INTERVAL)}; 0 turns write-behind off)",
    )
    parser.add_argument(
        "--thread-nice", default=str(DEFAULT_THREAD_NICE), metavar="N|idle",
        help=f"nice steps below the opening thread at which the store's own threads run (default "
        f"{DEFAULT_THREAD_NICE}; 0: the same priority; idle: SCHED_IDLE, below every nice level; Linux)",
    )
    parser.add_argument(
        "--thread-slice", default=format_duration(DEFAULT_THREAD_SLICE), metavar="DURATION",
        help=f"the time slice the store's own threads ask for, longer than other threads' so that a caller "
        f"waking beside one of them runs at once (default {format_duration(DEFAULT_THREAD_SLICE)}; 0: the "
        f"kernel's; Linux 6.12 and later)",
    )
    parser.add_argument("--thread-cpus", default=None, metavar="LIST", help=cpus_help)


def store_thread_options(args: argparse.Namespace) -> dict[str, Any]:
    """:func:`add_store_thread_flags`' flags, checked, as DedupStore.open's
    keyword arguments."""
    from dedupstore import store

    thread_nice = parse_thread_nice(args.thread_nice)
    # The store's own bounds, checked here to name the flag.
    apply_s = parse_duration(args.apply_interval, what="--apply-interval", allow_zero=True)
    if apply_s and not store.MIN_APPLY_INTERVAL_S <= apply_s <= store.MAX_APPLY_INTERVAL_S:
        raise UsageError(
            f"--apply-interval must be 0 (no write-behind) or {format_duration(store.MIN_APPLY_INTERVAL_S)}.."
            f"{format_duration(store.MAX_APPLY_INTERVAL_S)}; got {args.apply_interval!r}"
        )
    return {
        "flush_interval": parse_duration(args.flush_interval, what="--flush-interval",
                                         minimum=store.MIN_FLUSH_INTERVAL_S, maximum=store.MAX_FLUSH_INTERVAL_S),
        "apply_interval": apply_s,
        "thread_nice": thread_nice,
        "thread_cpus": parse_cpus(args.thread_cpus, "--thread-cpus"),
        "thread_slice": store.check_thread_slice(args.thread_slice, "--thread-slice"),
    }


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json", action="store_true", help="print one JSON object (schema in the docs) instead of a table"
    )


def json_number(value: float) -> int | float:
    # Counts such as 777,600,000 should read as integers, not 777600000.0.
    # float() first: int.is_integer() only exists from Python 3.12, and planning accepts ints.
    return int(value) if float(value).is_integer() else value


def emit_json(document: Mapping[str, object]) -> None:
    print(json.dumps(document, indent=2))


def emit_table(rows: Sequence[tuple[str, str]]) -> None:
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        print(f"{label.ljust(width)}   {value}")


def fmt_rate(value: float) -> str:
    return f"{format_number(value)} events/s"


def fmt_seconds(value: float) -> str:
    return f"{format_number(value)} s"


def fmt_duration(seconds: float) -> str:
    """``12h (43,200 s)``; plain ``30 s`` when the unit spelling would only repeat the seconds."""
    spelled = format_duration(seconds)
    if seconds < 60 or spelled.endswith("s"):
        return fmt_seconds(seconds)
    return f"{spelled} ({fmt_seconds(seconds)})"
