"""``dedupstore stats``: what a store holds, per partition and per namespace."""

from __future__ import annotations

import argparse
from typing import Any

from dedupstore.cli import EXIT_OK, add_json_flag, emit_json, emit_table
from dedupstore.cli.inspect import add_path_flag, emit_columns, fmt_age, fmt_time, open_store, reports_damage
from dedupstore.planning import format_number


def register(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = verbs.add_parser(
        "stats",
        help="records, unresolved records and bytes per partition; eviction state per namespace",
        description=(
            "What the store holds: records, unresolved records and LMDB bytes in use per partition, and per "
            "namespace its horizon, lease, unresolved records, evicted total, eviction lag and frontier."
        ),
    )
    add_path_flag(parser)
    add_json_flag(parser)
    parser.set_defaults(run=run)


@reports_damage
def run(args: argparse.Namespace) -> int:
    with open_store(args.path) as store:
        now = store.now()
        stats = store.stats()
    if args.json:
        emit_json({"command": "stats", "read_at": now, **stats})
    else:
        print_stats(stats, now)
    return EXIT_OK


def frontier_text(frontier: float, now: float) -> str:
    # 0 is the initial frontier of an empty_history namespace: no event time is beyond it.
    return "none (every event time is covered)" if frontier == 0 else fmt_time(frontier, now)


def lag_text(seconds: float) -> str:
    return "0 (keeping up)" if seconds == 0 else f"{fmt_age(seconds)} behind"


def print_stats(stats: dict[str, Any], now: float) -> None:
    parts = stats["partition_stats"]
    records = sum(p["records"] for p in parts)
    pending = sum(p["pending"] for p in parts)
    emit_table(
        [
            ("path", stats["path"]),
            ("format", f"version {stats['format_version']}"),
            ("partitions", str(stats["partitions"])),
            ("namespaces", str(len(stats["namespaces"]))),
            ("records", f"{format_number(records)} ({format_number(pending)} unresolved)"),
            ("bytes used", f"{format_number(stats['bytes_used'])} (LMDB pages in use, all partitions)"),
        ]
    )
    print()
    emit_columns(
        ("partition", "records", "pending", "bytes used"),
        [
            (
                str(p["partition"]),
                format_number(p["records"]),
                format_number(p["pending"]),
                format_number(p["bytes_used"]),
            )
            for p in parts
        ],
        right=frozenset({0, 1, 2, 3}),
    )
    namespaces = stats["namespaces"]
    print()
    if not namespaces:
        print("no namespaces registered")
        return
    emit_columns(
        ("namespace", "horizon", "lease", "unresolved", "evicted", "eviction lag", "frontier"),
        [
            (
                name,
                ns["horizon"],
                ns["lease"],
                format_number(ns["unresolved"]),
                format_number(ns["evicted"]),
                lag_text(ns["eviction_lag_seconds"]),
                frontier_text(ns["frontier"], now),
            )
            for name, ns in sorted(namespaces.items())
        ],
        right=frozenset({3, 4}),
    )
