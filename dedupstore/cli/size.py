"""``dedupstore size``: what a deduplication horizon holds and costs, and which replays outlive it."""

from __future__ import annotations

import argparse

from dedupstore import planning
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
from dedupstore.planning import ReplayWindow, SizingPlan, format_number
from dedupstore.units import parse_count, parse_duration


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
    # --measure (SPEC section 8: build a sample store, report measured bytes per entry)
    # goes here once the store exists; it will replace the modelled --entry-bytes.
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
    if args.json:
        emit_json(_document(plan))
    else:
        emit_table(_rows(plan))
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
