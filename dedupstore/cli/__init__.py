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

from dedupstore.planning import format_number
from dedupstore.units import format_duration

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
