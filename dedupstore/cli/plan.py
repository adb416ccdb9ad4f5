"""``dedupstore plan checkpoint`` and ``dedupstore plan backfill``: replay and backfill arithmetic."""

from __future__ import annotations

import argparse

from dedupstore import planning
from dedupstore.cli import (
    EXIT_OK,
    add_json_flag,
    emit_json,
    emit_table,
    fmt_duration,
    fmt_rate,
    fmt_seconds,
    json_number,
)
from dedupstore.planning import BackfillPlan, CheckpointPlan, format_number
from dedupstore.units import parse_count, parse_duration


def register(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = verbs.add_parser(
        "plan",
        help="checkpoint replay and backfill arithmetic",
        description="Checkpoint replay and backfill arithmetic.",
    )
    plans = parser.add_subparsers(dest="plan", metavar="PLAN", required=True)

    checkpoint = plans.add_parser(
        "checkpoint",
        help="events replayed after a crash, and the catch-up time",
        description=(
            "Events replayed after a crash between checkpoints (average rate x interval/2, worst "
            "rate x interval) and the time to catch up at recovery rate - rate."
        ),
    )
    checkpoint.add_argument("--rate", required=True, metavar="EVENTS_PER_S", help="live arrival rate")
    checkpoint.add_argument(
        "--interval", required=True, metavar="DURATION", help="time between completed checkpoints"
    )
    checkpoint.add_argument(
        "--recovery-rate", required=True, metavar="EVENTS_PER_S", help="processing rate while recovering"
    )
    checkpoint.add_argument(
        "--restore-time",
        default="0",
        metavar="DURATION",
        help="measured time to restore state before processing resumes (default 0)",
    )
    checkpoint.add_argument(
        "--hot-key-slowdown",
        default="0",
        metavar="PERCENT",
        help="hot-key skew: the catch-up drain time is multiplied by 1 + PERCENT/100, e.g. 25 (default 0)",
    )
    add_json_flag(checkpoint)
    checkpoint.set_defaults(run=run_checkpoint)

    backfill = plans.add_parser(
        "backfill",
        help="the rate a backfill may use after reserves, and its duration",
        description=(
            "The rate left for a backfill once live work and control traffic are reserved "
            "(capacity - live reserve - control reserve), and how long the backfill takes at it."
        ),
    )
    backfill.add_argument("--events", required=True, metavar="COUNT", help="events to backfill, e.g. 1.2e9")
    backfill.add_argument(
        "--capacity", required=True, metavar="EVENTS_PER_S", help="tested safe envelope for the combined mix"
    )
    backfill.add_argument(
        "--live-reserve", required=True, metavar="EVENTS_PER_S", help="reserved for live work (above arrival)"
    )
    backfill.add_argument(
        "--control-reserve", required=True, metavar="EVENTS_PER_S", help="reserved for variance and control"
    )
    add_json_flag(backfill)
    backfill.set_defaults(run=run_backfill)


def _parse_percent(text: str) -> float:
    # "25" and "25%" both mean a quarter longer; the sign is the only unit there is.
    return parse_count(text.strip().removesuffix("%"), what="--hot-key-slowdown", positive=False)


def run_checkpoint(args: argparse.Namespace) -> int:
    plan = planning.checkpoint(
        rate=parse_count(args.rate, what="--rate"),
        interval_seconds=parse_duration(args.interval, what="--interval"),
        recovery_rate=parse_count(args.recovery_rate, what="--recovery-rate"),
        restore_seconds=parse_duration(args.restore_time, what="--restore-time", allow_zero=True),
        hot_key_slowdown_percent=_parse_percent(args.hot_key_slowdown),
    )
    if args.json:
        emit_json(_checkpoint_document(plan))
    else:
        emit_table(_checkpoint_rows(plan))
    return EXIT_OK


def _checkpoint_rows(plan: CheckpointPlan) -> list[tuple[str, str]]:
    rows = [
        ("rate", fmt_rate(plan.rate)),
        ("checkpoint interval", fmt_duration(plan.interval_seconds)),
        ("recovery rate", fmt_rate(plan.recovery_rate)),
        ("replayed, average", f"{format_number(plan.replayed_average)} events (rate x interval / 2)"),
        ("replayed, worst case", f"{format_number(plan.replayed_worst)} events (rate x interval)"),
        ("net catch-up", f"{fmt_rate(plan.net_catch_up_rate)} (recovery rate - rate)"),
        (
            "ideal catch-up",
            f"{fmt_seconds(plan.ideal_catch_up_average_seconds)} average, "
            f"{fmt_seconds(plan.ideal_catch_up_worst_seconds)} worst case (replayed / net)",
        ),
    ]
    if plan.restore_seconds or plan.hot_key_slowdown_percent:
        slowdown = plan.slowdown_factor
        rows += [
            (
                "restore time",
                f"{fmt_duration(plan.restore_seconds)}; {format_number(plan.restore_backlog)} events "
                f"arrive meanwhile",
            ),
            ("hot-key slowdown", f"{format_number(plan.hot_key_slowdown_percent)}%: catch-up x {slowdown:g}"),
            (
                "catch-up",
                f"{fmt_seconds(plan.catch_up_average_seconds)} average, "
                f"{fmt_seconds(plan.catch_up_worst_seconds)} worst case "
                f"(restore + (replayed + arrived meanwhile) / net x {slowdown:g})",
            ),
        ]
    return rows


def _checkpoint_document(plan: CheckpointPlan) -> dict[str, object]:
    return {
        "command": "plan checkpoint",
        "rate": json_number(plan.rate),
        "interval_seconds": json_number(plan.interval_seconds),
        "recovery_rate": json_number(plan.recovery_rate),
        "restore_seconds": json_number(plan.restore_seconds),
        "hot_key_slowdown_percent": json_number(plan.hot_key_slowdown_percent),
        "replayed_average": json_number(plan.replayed_average),
        "replayed_worst": json_number(plan.replayed_worst),
        "net_catch_up_rate": json_number(plan.net_catch_up_rate),
        "ideal_catch_up_average_seconds": json_number(plan.ideal_catch_up_average_seconds),
        "ideal_catch_up_worst_seconds": json_number(plan.ideal_catch_up_worst_seconds),
        "restore_backlog": json_number(plan.restore_backlog),
        "catch_up_average_seconds": json_number(plan.catch_up_average_seconds),
        "catch_up_worst_seconds": json_number(plan.catch_up_worst_seconds),
    }


def run_backfill(args: argparse.Namespace) -> int:
    plan = planning.backfill(
        events=parse_count(args.events, what="--events"),
        capacity=parse_count(args.capacity, what="--capacity"),
        live_reserve=parse_count(args.live_reserve, what="--live-reserve", positive=False),
        control_reserve=parse_count(args.control_reserve, what="--control-reserve", positive=False),
    )
    if args.json:
        emit_json(_backfill_document(plan))
    else:
        emit_table(_backfill_rows(plan))
    return EXIT_OK


def _backfill_rows(plan: BackfillPlan) -> list[tuple[str, str]]:
    return [
        ("events", format_number(plan.events)),
        ("capacity", fmt_rate(plan.capacity)),
        ("live reserve", fmt_rate(plan.live_reserve)),
        ("control reserve", fmt_rate(plan.control_reserve)),
        ("backfill cap", f"{fmt_rate(plan.rate_cap)} (capacity - live reserve - control reserve)"),
        (
            "duration",
            f"{fmt_seconds(plan.duration_seconds)} = {format_number(plan.duration_hours)} h (events / cap)",
        ),
    ]


def _backfill_document(plan: BackfillPlan) -> dict[str, object]:
    return {
        "command": "plan backfill",
        "events": json_number(plan.events),
        "capacity": json_number(plan.capacity),
        "live_reserve": json_number(plan.live_reserve),
        "control_reserve": json_number(plan.control_reserve),
        "rate_cap": json_number(plan.rate_cap),
        "duration_seconds": json_number(plan.duration_seconds),
        "duration_hours": json_number(plan.duration_hours),
    }
