"""``dedupstore unresolved``: PENDING and UNKNOWN records of a namespace, for reconciliation."""

from __future__ import annotations

import argparse

from dedupstore import Record, RecordState
from dedupstore.cli import EXIT_OK, add_json_flag, complain, emit_json
from dedupstore.cli.inspect import (
    EXIT_UNRESOLVED,
    add_path_flag,
    emit_columns,
    fmt_age,
    fmt_time,
    open_store,
    parse_whole,
    reports_damage,
    show_bytes,
)
from dedupstore.planning import format_number

DEFAULT_LIMIT = 100


def register(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = verbs.add_parser(
        "unresolved",
        help="PENDING and UNKNOWN records of a namespace, oldest first, for reconciliation",
        description=(
            "Records of namespace NS whose effect is not known to be done: PENDING (a lease is live) and "
            "UNKNOWN (the lease expired without complete or release), oldest first. Exit 0 even when some "
            "exist, unless --fail-if-any."
        ),
    )
    add_path_flag(parser)
    parser.add_argument("namespace", metavar="NS", help="the namespace")
    parser.add_argument(
        "--limit",
        default=str(DEFAULT_LIMIT),
        metavar="N",
        help=f"list at most N records, oldest first; 0 lists all (default {DEFAULT_LIMIT}); all are counted",
    )
    parser.add_argument(
        "--fail-if-any", action="store_true", help="exit 4 when any unresolved record exists (for cron and alerting)"
    )
    add_json_flag(parser)
    parser.set_defaults(run=run)


@reports_damage
def run(args: argparse.Namespace) -> int:
    limit = parse_whole(args.limit, "--limit")
    with open_store(args.path) as store:
        now = store.now()
        records = store.unresolved(args.namespace)
    listed = records if limit == 0 else records[:limit]
    if args.json:
        emit_json(
            {
                "command": "unresolved",
                "namespace": args.namespace,
                "read_at": now,
                "total": len(records),
                "pending": sum(r.state is RecordState.PENDING for r in records),
                "unknown": sum(r.state is RecordState.UNKNOWN for r in records),
                "limit": limit,
                "truncated": len(listed) < len(records),
                "records": [r.to_dict() for r in listed],
            }
        )
    else:
        print_table(args.namespace, records, listed, now)
    if records and args.fail_if_any:
        complain("unresolved", f"{format_number(len(records))} unresolved record(s) in namespace {args.namespace!r}")
        return EXIT_UNRESOLVED
    return EXIT_OK


def _lease(r: Record, now: float) -> str:
    if r.lease_expires is None:  # not reached: unresolved records are never COMPLETED
        return "-"
    if r.lease_expires > now:
        return f"in {fmt_age(r.lease_expires - now)}"
    return f"expired {fmt_age(now - r.lease_expires)} ago"


def print_table(namespace: str, records: list[Record], listed: list[Record], now: float) -> None:
    if not records:
        print(f"no unresolved records in namespace {namespace!r}")
        return
    emit_columns(
        ("key", "state", "first seen", "lease", "attempts", "claimant", "event id"),
        [
            (
                show_bytes(r.key),
                r.state.value,
                fmt_age(now - r.first_seen) + " ago",
                _lease(r, now),
                str(r.attempts),
                show_bytes(r.claimant, "-"),
                show_bytes(r.event_id, "-"),
            )
            for r in listed
        ],
        right=frozenset({4}),
    )
    pending = sum(r.state is RecordState.PENDING for r in records)
    summary = (
        f"{format_number(len(records))} unresolved ({format_number(pending)} PENDING, "
        f"{format_number(len(records) - pending)} UNKNOWN); oldest first seen {fmt_time(records[0].first_seen, now)}"
    )
    if len(listed) < len(records):
        summary += f"; showing the oldest {format_number(len(listed))} (--limit 0 lists all)"
    print()
    print(summary)
