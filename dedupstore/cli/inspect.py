"""``dedupstore inspect``: one stored record in human form.

Also home of what the operator verbs (inspect, stats, unresolved, verify, evict)
share: the ``--path`` flag, opening an existing store without creating or
evicting anything, mapping a damaged store to its exit code, and printing times.
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import lmdb

from dedupstore import DedupStore, Record, RecordState, _native
from dedupstore.cli import EXIT_OK, UsageError, add_json_flag, complain, emit_json, emit_table
from dedupstore.errors import StoreAlreadyOpenError, StoreFormatError
from dedupstore.planning import format_number

#: Exit codes of the operator verbs, beyond the shared 0/2/3 (docs/cli/*.md).
EXIT_NOT_FOUND = 1  # inspect: no record for that key
EXIT_UNRESOLVED = 4  # unresolved --fail-if-any: some exist
EXIT_DAMAGED = 5  # verify found problems, or a read met a corrupt record

#: The clock stores are opened with (None: time.time). Tests set it to read a store built with a fake clock.
CLOCK: Callable[[], float] | None = None

#: Outcome bytes shown by inspect before it truncates (--json prints them whole).
OUTCOME_SHOWN = 200


# --------------------------------------------------------------------------- shared by the operator verbs


def add_path_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--path", required=True, metavar="DIR", help="the store directory (never created)")


@contextmanager
def open_store(path: str) -> Iterator[DedupStore]:
    """The existing store at ``path``: never created, no background eviction.

    A missing or foreign directory is bad input (exit 2) with the store's own message.
    """
    try:
        store = DedupStore.open(path, create=False, eviction_rate=0, clock=CLOCK)
    except (StoreFormatError, StoreAlreadyOpenError) as exc:
        raise UsageError(str(exc)) from None
    with store:
        yield store


def reports_damage(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """A read that meets a corrupt record (or an LMDB error) is one line and exit 5, not a traceback."""

    @functools.wraps(run)
    def wrapped(args: argparse.Namespace) -> int:
        try:
            return run(args)
        except StoreFormatError as exc:
            complain("error", f"{exc} (the store is damaged: run 'dedupstore verify --path {args.path}')")
        except lmdb.Error as exc:
            complain("error", f"LMDB: {exc} (run 'dedupstore verify --path {args.path}')")
        return EXIT_DAMAGED

    return wrapped


def parse_whole(text: str, what: str, minimum: int = 0) -> int:
    """A whole number for a flag such as --limit: digits only, at least ``minimum``."""
    stripped = text.strip().replace("_", "")
    if not (stripped.isascii() and stripped.isdigit()) or int(stripped) < minimum:
        raise UsageError(f"{what} must be a whole number >= {minimum}; got {text!r}")
    return int(stripped)


def fmt_age(seconds: float) -> str:
    """A short span: ``850 ms``, ``42 s``, ``5m 3s``, ``2h 5m``, ``3d 4h``."""
    s = abs(seconds)
    if s < 1:
        return f"{s * 1000:.0f} ms"
    if s < 60:
        return f"{s:.0f} s"
    whole = int(s)
    for unit, size, sub, subsize in (("d", 86400, "h", 3600), ("h", 3600, "m", 60), ("m", 60, "s", 1)):
        if whole >= size:
            major, rest = divmod(whole, size)
            minor = rest // subsize
            return f"{major}{unit} {minor}{sub}" if minor else f"{major}{unit}"
    return f"{whole} s"  # unreachable: s >= 60 always has a unit


def relative(when: float, now: float) -> str:
    delta = when - now
    if abs(delta) < 0.0005:
        return "now"
    return f"in {fmt_age(delta)}" if delta > 0 else f"{fmt_age(delta)} ago"


def iso(when: float) -> str:
    """ISO-8601 UTC with milliseconds: ``2023-11-14T22:13:20.000Z``."""
    stamp = dt.datetime.fromtimestamp(when, dt.UTC).isoformat(timespec="milliseconds")
    return stamp.replace("+00:00", "Z")


def fmt_time(when: float | None, now: float, none: str = "none") -> str:
    if when is None:
        return none
    return f"{iso(when)} ({relative(when, now)})"


def show_bytes(value: bytes | None, none: str = "none") -> str:
    """Text as a quoted string when it is UTF-8, else hex; one line either way."""
    if value is None:
        return none
    try:
        return json.dumps(value.decode("utf-8"), ensure_ascii=False)
    except UnicodeDecodeError:
        return "0x" + value.hex()


def json_text(value: bytes) -> str:
    """Bytes for JSON as ``Record.to_dict`` writes them: the text when UTF-8, else ``0x`` + hex."""
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return "0x" + value.hex()


def emit_columns(headers: Sequence[str], rows: Sequence[Sequence[str]], right: frozenset[int] = frozenset()) -> None:
    """An aligned table with a header line; columns in ``right`` (numbers) are right-aligned."""
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        parts = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))]
        return "   ".join(parts).rstrip()

    print(line(headers))
    for row in rows:
        print(line(row))


# --------------------------------------------------------------------------- inspect


def register(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = verbs.add_parser(
        "inspect",
        help="one stored record in human form",
        description=(
            "The record stored for KEY in namespace NS: state (PENDING, UNKNOWN, COMPLETED by the current "
            "clock), intent digest, times, lease, attempts, event id, claimant and outcome. Exit 1 when "
            "there is no record."
        ),
    )
    add_path_flag(parser)
    parser.add_argument("namespace", metavar="NS", help="the namespace")
    parser.add_argument("key", metavar="KEY", help="the business key (UTF-8 text, or hex with --hex)")
    parser.add_argument(
        "--hex", action="store_true", help="KEY is hex (for binary keys, shown as 0x... elsewhere); 0x is optional"
    )
    add_json_flag(parser)
    parser.set_defaults(run=run)


def parse_key(text: str, as_hex: bool) -> bytes | str:
    if not as_hex:
        return text
    digits = text[2:] if text[:2].lower() == "0x" else text
    try:
        return bytes.fromhex(digits)
    except ValueError:
        raise UsageError(f"--hex: KEY must be hex digits such as 0x6f726465722d31; got {text!r}") from None


@reports_damage
def run(args: argparse.Namespace) -> int:
    key = parse_key(args.key, args.hex)
    with open_store(args.path) as store:
        now = store.now()
        record = store.lookup(args.namespace, key)
    if record is None:
        kb = key if isinstance(key, bytes) else key.encode("utf-8")
        if args.json:
            emit_json(
                {
                    "command": "inspect",
                    "found": False,
                    "read_at": now,
                    "namespace": args.namespace,
                    "key": json_text(kb),
                }
            )
        complain("not found", f"no record for {args.namespace}/{show_bytes(kb)}")
        return EXIT_NOT_FOUND
    if args.json:
        emit_json({"command": "inspect", "found": True, "read_at": now, **record.to_dict()})
    else:
        emit_table(rows(record, now))
    return EXIT_OK


def _outcome(outcome: bytes) -> str:
    size = f"{format_number(len(outcome))} bytes"
    if not outcome:
        return "empty (0 bytes)"
    head = outcome[:OUTCOME_SHOWN]
    try:
        outcome.decode("utf-8")
        shown = json.dumps(head.decode("utf-8", "ignore"), ensure_ascii=False)
        kind = "UTF-8"
    except UnicodeDecodeError:
        shown = "0x" + head.hex()
        kind = "binary"
    if len(outcome) > OUTCOME_SHOWN:
        return f"{shown}... (truncated: first {OUTCOME_SHOWN} of {size}, {kind}; --json prints it whole)"
    return f"{shown} ({size}, {kind})"


def rows(r: Record, now: float) -> list[tuple[str, str]]:
    if r.state is RecordState.COMPLETED:
        state = "COMPLETED (the effect happened; repeats get its outcome)"
    elif r.state is RecordState.PENDING:
        state = "PENDING (a lease is live: someone is performing the effect)"
    else:
        state = "UNKNOWN (the lease expired without complete or release: reconcile it)"
    generation = (
        "none (unresolved: it lives in the pending database until completed or released)"
        if r.generation == _native.UNRESOLVED_GEN
        else str(r.generation)
    )
    out = [
        ("namespace", r.namespace),
        ("key", show_bytes(r.key)),
        ("state", state),
        ("intent digest", r.intent_digest.hex() if r.intent_digest else "none (claimed without an intent)"),
        ("first seen", fmt_time(r.first_seen, now)),
    ]
    if r.state is RecordState.COMPLETED:
        out.append(("completed", fmt_time(r.completed_at, now)))
    else:
        out.append(("lease expires", fmt_time(r.lease_expires, now)))
    out += [
        ("token", str(r.token)),
        ("attempts", f"{r.attempts} (leases granted)"),
        ("event id", show_bytes(r.event_id)),
        ("event time", fmt_time(r.event_time, now)),
        ("claimant", show_bytes(r.claimant)),
        ("other events", f"{r.other_events} (repeats that carried a different event id)"),
    ]
    if r.state is RecordState.COMPLETED:
        out.append(("outcome", _outcome(r.outcome or b"")))
    out.append(("generation", generation))
    return out
