"""``dedupstore evict``: remove records past their horizon now, within a budget."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from dedupstore import DedupStore
from dedupstore.cli import EXIT_OK, add_json_flag, emit_json, emit_table
from dedupstore.cli.inspect import add_path_flag, emit_columns, open_store, parse_whole, reports_damage
from dedupstore.cli.stats import frontier_text, lag_text
from dedupstore.planning import format_number

#: Entries per store.evict() call, so the progress bar moves; eviction_batch still bounds each transaction.
CHUNK = 10_000


def register(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = verbs.add_parser(
        "evict",
        help="run eviction now: delete completed records past their horizon",
        description=(
            "Run eviction now, as the background evictor would: whole generations past their namespace's "
            "horizon, oldest first. Generations hold completed records only; unresolved ones live apart "
            "and are never evicted. Prints the counts and each namespace's frontier afterwards."
        ),
    )
    add_path_flag(parser)
    parser.add_argument(
        "--budget",
        default=None,
        metavar="N",
        help="delete at most N records; default: everything that is due",
    )
    add_json_flag(parser)
    parser.set_defaults(run=run)


def evict(store: DedupStore, budget: int | None, show_progress: bool) -> dict[str, int]:
    """``store.evict(budget)`` in chunks of CHUNK, with a progress bar on stderr when asked."""
    bar: Any = None
    if show_progress:
        from tqdm import tqdm

        # delay: a run that is over in a couple of seconds shows no bar at all.
        bar = tqdm(total=budget, unit=" records", desc="evict", file=sys.stderr, delay=2.0, leave=False)
    totals = {"deleted": 0}
    try:
        while True:
            step = CHUNK if budget is None else min(CHUNK, budget - totals["deleted"])
            if step <= 0:
                break
            done = store.evict(step)
            totals["deleted"] += done["deleted"]
            if bar is not None:
                bar.update(done["deleted"])
            if done["deleted"] < step:
                break  # nothing more is due
    finally:
        if bar is not None:
            bar.close()
    return totals


@reports_damage
def run(args: argparse.Namespace) -> int:
    budget = None if args.budget is None else parse_whole(args.budget, "--budget", minimum=1)
    with open_store(args.path) as store:
        totals = evict(store, budget, sys.stderr.isatty())
        now = store.now()
        stats = store.stats()
    namespaces = {
        name: {
            "frontier": ns["frontier"],
            "evicted": ns["evicted"],
            "eviction_lag_seconds": ns["eviction_lag_seconds"],
            "unresolved": ns["unresolved"],
        }
        for name, ns in sorted(stats["namespaces"].items())
    }
    if args.json:
        emit_json({"command": "evict", "read_at": now, "budget": budget, **totals, "namespaces": namespaces})
        return EXIT_OK
    emit_table(
        [
            ("budget", "everything due" if budget is None else format_number(budget)),
            ("deleted", f"{format_number(totals['deleted'])} (completed records past their horizon)"),
        ]
    )
    print()
    if not namespaces:
        print("no namespaces registered")
        return EXIT_OK
    emit_columns(
        ("namespace", "evicted", "unresolved", "eviction lag", "frontier"),
        [
            (
                name,
                format_number(ns["evicted"]),
                format_number(ns["unresolved"]),
                lag_text(ns["eviction_lag_seconds"]),
                frontier_text(ns["frontier"], now),
            )
            for name, ns in namespaces.items()
        ],
        right=frozenset({1, 2}),
    )
    return EXIT_OK
