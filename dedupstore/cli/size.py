"""``dedupstore size``: what a deduplication horizon holds and costs, and which replays outlive it."""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import lmdb

from dedupstore import DedupStore, planning
from dedupstore._native import MAX_KEY_BYTES
from dedupstore.cli import (
    EXIT_OK,
    EXIT_PLAN_INVALID,
    UsageError,
    add_json_flag,
    complain,
    emit_json,
    emit_table,
    fmt_duration,
    fmt_rate,
    json_number,
)
from dedupstore.namespace import DEFAULT_MAX_OUTCOME_BYTES, MAX_OUTCOME_BYTES_LIMIT
from dedupstore.planning import ReplayWindow, SizingPlan, format_number
from dedupstore.units import parse_count, parse_duration

DEFAULT_SAMPLE_KEYS = 200_000
MAX_SAMPLE_KEYS = 100_000_000
DEFAULT_KEY_BYTES = 55
DEFAULT_OUTCOME_BYTES = 16
#: Below this, pages freed by copy-on-write and not yet reused weigh noticeably on the figure.
SMALL_SAMPLE = 100_000
#: Keys per claim_many/complete_many call while building the sample store.
MEASURE_BATCH = 1000


def register(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = verbs.add_parser(
        "size",
        help="entries and storage for a deduplication horizon",
        description=(
            "Entries and storage a deduplication horizon holds at a steady event rate "
            "(entries = rate x horizon; storage = entries x entry bytes x replicas x amplification), "
            "and every declared replay window longer than the horizon."
        ),
    )
    parser.add_argument("--rate", required=True, metavar="EVENTS_PER_S", help="events per second, e.g. 18000")
    parser.add_argument(
        "--horizon", required=True, metavar="DURATION", help="deduplication horizon, e.g. 12h"
    )
    parser.add_argument(
        "--entry-bytes",
        default=format_number(planning.DEFAULT_ENTRY_BYTES),
        metavar="BYTES",
        help="bytes per entry including index overhead (default: the seed's model, %(default)s)",
    )
    parser.add_argument(
        "--measure",
        action="store_true",
        help="build a sample store in a temporary directory and project storage from its measured bytes per entry, "
        "beside the model's --entry-bytes figure",
    )
    parser.add_argument(
        "--sample-keys",
        default=None,
        metavar="N",
        help=f"with --measure: keys claimed and completed in the sample (default {DEFAULT_SAMPLE_KEYS:,})",
    )
    parser.add_argument(
        "--key-bytes",
        default=None,
        metavar="BYTES",
        help=f"with --measure: size of each sample key, 1..400 (default {DEFAULT_KEY_BYTES})",
    )
    parser.add_argument(
        "--outcome-bytes",
        default=None,
        metavar="BYTES",
        help=f"with --measure: size of each sample outcome (default {DEFAULT_OUTCOME_BYTES})",
    )
    parser.add_argument(
        "--replicas", default="1", metavar="N", help="full copies of the store (default %(default)s)"
    )
    parser.add_argument(
        "--amplification",
        default="1",
        metavar="X",
        help="storage-engine amplification factor, measured (default %(default)s)",
    )
    parser.add_argument(
        "--replay-window",
        action="append",
        default=[],
        dest="replay_windows",
        metavar="NAME=DURATION",
        help="a way old events come back (broker-retention, producer-retry, offline-consumer, "
        "dead-letter-redrive, approved-replay, ...); repeatable",
    )
    add_json_flag(parser)
    parser.set_defaults(run=run)


def _parse_window(text: str) -> ReplayWindow:
    name, sep, duration = text.partition("=")
    name = name.strip()
    if not sep or not name:
        raise UsageError(f"--replay-window expects NAME=DURATION, such as approved-replay=7d; got {text!r}")
    return ReplayWindow(name, parse_duration(duration, what=f"replay window {name!r}"))


def _parse_replicas(text: str) -> int:
    replicas = parse_count(text, what="--replicas")
    if not replicas.is_integer():
        raise UsageError(f"--replicas must be a whole number >= 1; got {text!r}")
    return int(replicas)


def run(args: argparse.Namespace) -> int:
    plan = planning.size(
        rate=parse_count(args.rate, what="--rate"),
        horizon_seconds=parse_duration(args.horizon, what="--horizon"),
        entry_bytes=parse_count(args.entry_bytes, what="--entry-bytes"),
        replicas=_parse_replicas(args.replicas),
        amplification=parse_count(args.amplification, what="--amplification"),
        windows=tuple(_parse_window(text) for text in args.replay_windows),
    )
    measured: tuple[Measurement, SizingPlan] | None = None
    if args.measure:
        sample = _measure_flags(args)
        measurement = measure(*sample, progress=_progress_bar(sample[0]) if sys.stderr.isatty() else None)
        # The projection uses the figure as printed (2 decimals), so the printed figures multiply out.
        measured = (measurement, _replace_entry_bytes(plan, round(measurement.entry_bytes, 2)))
    else:
        for flag in ("sample_keys", "key_bytes", "outcome_bytes"):
            if getattr(args, flag) is not None:
                raise UsageError(f"--{flag.replace('_', '-')} only applies with --measure")
    if args.json:
        document = _document(plan)
        if measured is not None:
            document.update(_measured_document(*measured))
        emit_json(document)
    else:
        rows = _rows(plan)
        if measured is not None:
            rows += _measured_rows(*measured)
        emit_table(rows)
    if plan.violations:
        complain(
            "plan invalid",
            f"horizon {fmt_duration(plan.horizon_seconds)} is shorter than replay window(s) "
            + ", ".join(f"{v.name} {fmt_duration(v.window_seconds)}" for v in plan.violations)
            + ": a replay that late would find no evidence; lengthen the horizon or change the contract",
        )
        return EXIT_PLAN_INVALID
    return EXIT_OK


def _fmt_bytes(value: float) -> str:
    return f"{format_number(value / planning.BYTES_PER_GB, 4)} GB ({format_number(value)} bytes)"


def _rows(plan: SizingPlan) -> list[tuple[str, str]]:
    rows = [
        ("rate", fmt_rate(plan.rate)),
        ("horizon", fmt_duration(plan.horizon_seconds)),
        ("entry size", f"{format_number(plan.entry_bytes)} bytes (a model: measure the real overhead)"),
        ("entries", format_number(plan.entries)),
    ]
    if plan.replicas != 1 or plan.amplification != 1:
        rows += [
            ("logical size", f"{_fmt_bytes(plan.logical_bytes)} = entries x entry size"),
            ("replicas", f"{plan.replicas} (multiplies storage)"),
            ("amplification", f"{format_number(plan.amplification, 4)} (multiplies storage)"),
            (
                "storage",
                f"{_fmt_bytes(plan.storage_bytes)} = logical size x {plan.replicas} replicas "
                f"x {format_number(plan.amplification, 4)} amplification",
            ),
        ]
    else:
        rows.append(("storage", _fmt_bytes(plan.storage_bytes)))
    violated = {v.name for v in plan.violations}
    for window in plan.windows:
        verdict = (
            f"LONGER than the horizon {fmt_duration(plan.horizon_seconds)}: invalid"
            if window.name in violated
            else "within the horizon"
        )
        rows.append((f"window {window.name}", f"{fmt_duration(window.seconds)}, {verdict}"))
    return rows


def _document(plan: SizingPlan) -> dict[str, object]:
    return {
        "command": "size",
        "rate": json_number(plan.rate),
        "horizon_seconds": json_number(plan.horizon_seconds),
        "entry_bytes": json_number(plan.entry_bytes),
        "replicas": plan.replicas,
        "amplification": json_number(plan.amplification),
        "replay_windows": [{"name": w.name, "seconds": json_number(w.seconds)} for w in plan.windows],
        "entries": json_number(plan.entries),
        "logical_bytes": json_number(plan.logical_bytes),
        "storage_bytes": json_number(plan.storage_bytes),
        "storage_gb": json_number(plan.storage_gb),
        "violations": [
            {
                "name": v.name,
                "window_seconds": json_number(v.window_seconds),
                "horizon_seconds": json_number(v.horizon_seconds),
            }
            for v in plan.violations
        ],
        "valid": plan.valid,
    }


# --------------------------------------------------------------------------- --measure


@dataclass(frozen=True)
class Footprint:
    """What a closed store's partitions take, summed over partitions."""

    used_page_bytes: int  # (last_pgno + 1) x page size: every page LMDB has allocated, free ones included
    live_page_bytes: int  # branch, leaf and overflow pages of every database, plus the 2 meta pages
    file_block_bytes: int  # data.mdb st_blocks x 512: what the filesystem allocated

    def __sub__(self, other: Footprint) -> Footprint:
        return Footprint(
            self.used_page_bytes - other.used_page_bytes,
            self.live_page_bytes - other.live_page_bytes,
            self.file_block_bytes - other.file_block_bytes,
        )


@dataclass(frozen=True)
class Measurement:
    """Bytes a sample store of this package's own format took for ``sample_keys`` completed records."""

    sample_keys: int
    key_bytes: int
    outcome_bytes: int
    partitions: int
    baseline: Footprint  # the empty store: namespace registered, no records
    records: Footprint  # after the sample, less the baseline
    seconds: float

    @property
    def entry_bytes(self) -> float:
        """The figure used: LMDB pages in use per record."""
        return self.records.used_page_bytes / self.sample_keys

    @property
    def live_entry_bytes(self) -> float:
        return self.records.live_page_bytes / self.sample_keys

    @property
    def file_entry_bytes(self) -> float:
        return self.records.file_block_bytes / self.sample_keys


def _whole(text: str | None, default: int, what: str, lo: int, hi: int) -> int:
    if text is None:
        return default
    value = parse_count(text, what=what, positive=False)
    if not value.is_integer() or not lo <= value <= hi:
        raise UsageError(f"{what} must be a whole number in {format_number(lo)}..{format_number(hi)}; got {text!r}")
    return int(value)


def _measure_flags(args: argparse.Namespace) -> tuple[int, int, int]:
    keys = _whole(args.sample_keys, DEFAULT_SAMPLE_KEYS, "--sample-keys", 1, MAX_SAMPLE_KEYS)
    key_bytes = _whole(args.key_bytes, DEFAULT_KEY_BYTES, "--key-bytes", 1, MAX_KEY_BYTES)
    outcome_bytes = _whole(args.outcome_bytes, DEFAULT_OUTCOME_BYTES, "--outcome-bytes", 0, MAX_OUTCOME_BYTES_LIMIT)
    hex_digits = min(16, key_bytes)
    if keys > 16**hex_digits:
        raise UsageError(
            f"--key-bytes {key_bytes} allows only {format_number(16**hex_digits)} distinct sample keys; "
            f"got --sample-keys {format_number(keys)}"
        )
    return keys, key_bytes, outcome_bytes


def sample_keys(n: int, key_bytes: int) -> Iterator[list[bytes]]:
    """``n`` distinct keys of exactly ``key_bytes`` bytes, in batches, in scattered (not sorted) order.

    Each is the hex of a bijective scramble of its index, padded: real keys arrive in no
    particular order, and B-tree pages filled by random inserts are fuller than sorted appends leave them.
    """
    digits = min(16, key_bytes)
    mask = (1 << (4 * digits)) - 1
    pad = b"k" * (key_bytes - digits)
    for start in range(0, n, MEASURE_BATCH):
        # An odd multiplier is a bijection modulo a power of two: no two indexes share a key.
        yield [
            format((i * 0x9E3779B97F4A7C15) & mask, f"0{digits}x").encode() + pad
            for i in range(start, min(n, start + MEASURE_BATCH))
        ]


def footprint(root: Path) -> Footprint:
    """Measure a closed store (each partition opened read-only)."""
    used = live = blocks = 0
    for part in sorted(root.glob("p[0-9][0-9][0-9]")):
        blocks += (part / "data.mdb").stat().st_blocks * 512
        env = lmdb.open(str(part), readonly=True, max_dbs=4, lock=False)
        try:
            psize = int(env.stat()["psize"])
            used += (int(env.info()["last_pgno"]) + 1) * psize
            dbs = [env.open_db()] + [env.open_db(name, create=False) for name in (b"records", b"pending", b"meta")]
            with env.begin() as txn:
                for db in dbs:
                    st = txn.stat(db)
                    live += (int(st["branch_pages"]) + int(st["leaf_pages"]) + int(st["overflow_pages"])) * psize
            live += 2 * psize
        finally:
            env.close()
    return Footprint(used, live, blocks)


def measure(
    keys: int, key_bytes: int, outcome_bytes: int, progress: Callable[[int], None] | None = None
) -> Measurement:
    """Claim and complete ``keys`` sample keys in a fresh store in a temporary directory and
    measure what it takes on disk. ``progress(n)`` is called with the keys done after each batch."""
    started = time.perf_counter()
    outcome = b"o" * outcome_bytes
    with tempfile.TemporaryDirectory(prefix="dedupstore-measure-") as tmp:
        root = Path(tmp) / "store"
        with DedupStore.open(root, durability="flush", eviction_rate=0) as store:
            store.ensure_namespace("measure", max_outcome_bytes=max(DEFAULT_MAX_OUTCOME_BYTES, outcome_bytes))
            partitions = store.partitions
        baseline = footprint(root)
        with DedupStore.open(root, create=False, durability="flush", eviction_rate=0) as store:
            done = 0
            for batch in sample_keys(keys, key_bytes):
                results = store.claim_many("measure", batch)
                items = [(k, r.token, outcome) for k, r in zip(batch, results, strict=True) if r.token is not None]
                if len(items) != len(batch):
                    raise RuntimeError("a sample key was not NEW: the sample keys are not distinct")
                store.complete_many("measure", items)
                done += len(batch)
                if progress is not None:
                    progress(done)
        after = footprint(root)
    return Measurement(
        sample_keys=keys,
        key_bytes=key_bytes,
        outcome_bytes=outcome_bytes,
        partitions=partitions,
        baseline=baseline,
        records=after - baseline,
        seconds=time.perf_counter() - started,
    )


def _progress_bar(total: int) -> Callable[[int], None]:
    from tqdm import tqdm

    bar = tqdm(total=total, unit=" keys", desc="measure", file=sys.stderr, delay=1.0, leave=False)

    def update(done: int) -> None:
        bar.update(done - bar.n)
        if done >= total:
            bar.close()

    return update


def _replace_entry_bytes(plan: SizingPlan, entry_bytes: float) -> SizingPlan:
    return planning.size(
        rate=plan.rate,
        horizon_seconds=plan.horizon_seconds,
        entry_bytes=entry_bytes,
        replicas=plan.replicas,
        amplification=plan.amplification,
        windows=plan.windows,
    )


def _measured_rows(m: Measurement, plan: SizingPlan) -> list[tuple[str, str]]:
    multiplied = ""
    if plan.replicas != 1 or plan.amplification != 1:
        multiplied = f" x {plan.replicas} replicas x {format_number(plan.amplification, 4)} amplification"
    small = "; a sample this small overstates the steady state" if m.sample_keys < SMALL_SAMPLE else ""
    return [
        (
            "measured sample",
            f"{format_number(m.sample_keys)} keys of {m.key_bytes} bytes, completed with {m.outcome_bytes}-byte "
            f"outcomes, {m.partitions} partitions ({format_number(m.seconds, 1)} s){small}",
        ),
        (
            "pages in use",
            f"{format_number(m.records.used_page_bytes)} bytes beyond the empty store's "
            f"{format_number(m.baseline.used_page_bytes)} = {format_number(m.entry_bytes)} bytes per entry (used)",
        ),
        (
            "live pages",
            f"{format_number(m.records.live_page_bytes)} bytes = {format_number(m.live_entry_bytes)} bytes per "
            f"entry (B-tree pages only, without pages freed by copy-on-write; reported, not used)",
        ),
        (
            "data.mdb blocks",
            f"{format_number(m.records.file_block_bytes)} bytes = {format_number(m.file_entry_bytes)} bytes per "
            f"entry (allocated by the filesystem; reported, not used)",
        ),
        ("measured entry", f"{format_number(plan.entry_bytes)} bytes per entry (pages in use / sample keys)"),
        ("measured storage", f"{_fmt_bytes(plan.storage_bytes)} = entries x measured entry{multiplied}"),
    ]


def _measured_document(m: Measurement, plan: SizingPlan) -> dict[str, object]:
    return {
        "sample_keys": m.sample_keys,
        "sample_key_bytes": m.key_bytes,
        "sample_outcome_bytes": m.outcome_bytes,
        "measured_entry_bytes": json_number(plan.entry_bytes),
        "measured_method": "used_pages",
        "measured_used_page_bytes": m.records.used_page_bytes,
        "measured_live_page_bytes": m.records.live_page_bytes,
        "measured_file_block_bytes": m.records.file_block_bytes,
        "measured_storage_bytes": json_number(round(plan.storage_bytes)),
        "measured_storage_gb": json_number(round(plan.storage_gb, 4)),
    }
