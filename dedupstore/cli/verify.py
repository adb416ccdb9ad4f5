"""``dedupstore verify``: read-only format, consistency and LMDB integrity checks (dedupstore/verify.py)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import lmdb

from dedupstore.cli import EXIT_OK, UsageError, add_json_flag, complain, emit_json, emit_table
from dedupstore.cli.inspect import EXIT_DAMAGED, add_path_flag, emit_columns
from dedupstore.errors import StoreAlreadyOpenError, StoreFormatError
from dedupstore.layout import FORMAT_VERSION
from dedupstore.planning import format_number
from dedupstore.verify import MAX_LISTED, VerifyReport, verify_store

#: Below this many records the walk is over before a bar would say anything.
PROGRESS_MIN_RECORDS = 100_000


def register(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = verbs.add_parser(
        "verify",
        help="check the format, internal consistency and LMDB integrity (read-only)",
        description=(
            "Read-only checks: format version, every partition present and of this store, every record "
            "decodable, registered, routed and visible, generations holding completed records only and the "
            "pending database unresolved ones only, and a full walk of every LMDB database. Exit 0 when clean, "
            "5 when problems are found."
        ),
    )
    add_path_flag(parser)
    add_json_flag(parser)
    parser.set_defaults(run=run)


class _Progress:
    """A tqdm bar on stderr, only when stderr is a terminal and the walk is long."""

    def __init__(self) -> None:
        self.bar: Any = None
        self.enabled = sys.stderr.isatty()

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        if self.bar is None:
            if total <= PROGRESS_MIN_RECORDS:
                self.enabled = False
                return
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit=" records", desc="verify", file=sys.stderr, leave=False)
        self.bar.update(done - self.bar.n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def run(args: argparse.Namespace) -> int:
    progress = _Progress()
    try:
        report = verify_store(args.path, max_listed=MAX_LISTED, progress=progress)
    except (StoreFormatError, StoreAlreadyOpenError) as exc:
        raise UsageError(str(exc)) from None
    except lmdb.Error as exc:  # a failure outside the walks, which report their own
        complain("error", f"LMDB: {exc} (the store could not be checked to the end)")
        return EXIT_DAMAGED
    finally:
        progress.close()
    if args.json:
        emit_json({"command": "verify", **report.to_dict()})
    else:
        print_report(report)
    if not report.ok:
        complain(
            "verify failed",
            f"{format_number(report.problems_total)} problem(s) in {report.path}: "
            + ", ".join(f"{kind} {format_number(n)}" for kind, n in report.problem_kinds.items()),
        )
        return EXIT_DAMAGED
    return EXIT_OK


def print_report(report: VerifyReport) -> None:
    doc = report.to_dict()
    opened = sum(p.opened for p in report.partition_reports)
    emit_table(
        [
            ("path", report.path),
            ("store id", report.store_id),
            ("format", f"version {report.format_version} (this dedupstore reads version {FORMAT_VERSION})"),
            ("partitions", f"{report.partitions} ({opened} opened and walked)"),
            ("namespaces", ", ".join(report.namespaces) if report.namespaces else "none"),
            (
                "records",
                f"{format_number(doc['records'])} ({format_number(doc['completed_records'])} COMPLETED, "
                f"{format_number(doc['pending_records'])} PENDING or UNKNOWN)",
            ),
            ("bytes used", f"{format_number(doc['bytes_used'])} (LMDB pages in use, all partitions)"),
            ("problems", "none" if report.ok else format_number(report.problems_total)),
        ]
    )
    print()
    emit_columns(
        ("partition", "records", "unresolved", "pages used", "page size", "data.mdb bytes"),
        [
            (
                str(p.partition),
                format_number(p.records),
                format_number(p.pending_records),
                format_number(p.lmdb.pages_used),
                format_number(p.lmdb.page_size),
                format_number(p.lmdb.file_bytes),
            )
            if p.opened
            else (str(p.partition), "-", "-", "-", "-", "not opened")
            for p in report.partition_reports
        ],
        right=frozenset(range(6)),
    )
    if report.ok:
        return
    print()
    emit_columns(
        ("where", "problem", "detail"),
        [(p.where, p.kind, p.message) for p in report.problems],
    )
    hidden = report.problems_total - len(report.problems)
    if hidden:
        print(
            f"... and {format_number(hidden)} more ({format_number(report.problems_total)} in all; the first "
            f"{len(report.problems)} are listed)"
        )
