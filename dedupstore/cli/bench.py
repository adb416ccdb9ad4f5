"""``dedupstore bench``: the reference load (18,000 events/s) against an embedded store."""

from __future__ import annotations

import argparse
import sys

from tqdm import tqdm

from dedupstore.cli import EXIT_OK, add_json_flag, emit_json, emit_table, fmt_rate
from dedupstore.layout import DURABILITY
from dedupstore.loadgen import LoadConfig, LoadReport, run_load
from dedupstore.planning import format_number
from dedupstore.units import parse_count, parse_duration


def register(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = verbs.add_parser(
        "bench",
        help="drive an embedded store with the reference load and report latency and CPU",
        description=(
            "Paced, open-loop load (default 18,000 events/s) against an embedded store: a consumer polls "
            "what is due, claims it with claim_many and completes the NEW effects. Latency is measured "
            "from each event's scheduled time."
        ),
    )
    parser.add_argument("--rate", default="18000", metavar="EVENTS_PER_S", help="offered rate (default 18000)")
    parser.add_argument("--duration", default="30s", metavar="DURATION", help="how long to run (default 30s)")
    parser.add_argument("--path", default=None, metavar="DIR", help="store directory (default: a temporary one)")
    parser.add_argument("--durability", default="sync", choices=sorted(DURABILITY), help="default sync")
    parser.add_argument("--partitions", type=int, default=None, help="partitions of a new store (default 4)")
    add_json_flag(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    config = LoadConfig(
        rate=parse_count(args.rate, what="--rate"),
        duration=parse_duration(args.duration, what="--duration"),
        durability=args.durability,
        partitions=args.partitions,
    )
    bar = None
    if not args.json and sys.stderr.isatty():
        bar = tqdm(total=100, unit="%", bar_format="{l_bar}{bar}| {elapsed}<{remaining} {postfix}", leave=False)

    def progress(fraction: float, report: LoadReport) -> None:
        assert bar is not None
        bar.update(round(fraction * 100) - bar.n)
        bar.set_postfix_str(f"{format_number(report.achieved_rate)} events/s")

    report = run_load(config, args.path, progress if bar is not None else None)
    if bar is not None:
        bar.close()
    doc = report.to_dict()
    if args.json:
        emit_json(doc)
        return EXIT_OK
    verdicts = ", ".join(f"{k} {format_number(v)}" for k, v in doc["verdicts"].items() if v)
    emit_table(
        [
            ("offered", f"{fmt_rate(config.rate)} for {format_number(config.duration)} s ({config.durability})"),
            ("achieved", fmt_rate(doc["achieved_rate"])),
            ("latency", f"p50 {doc['p50_us']:,.0f} us, p99 {doc['p99_us']:,.0f} us, p99.9 {doc['p999_us']:,.0f} us"),
            ("cpu", f"{doc['cpu_share'] * 100:.1f}% of one core"),
            ("batches", f"{format_number(report.batches)} (mean {doc['mean_batch']} events)"),
            ("verdicts", verdicts),
            ("on disk", f"{format_number(doc['bytes_on_disk'])} bytes"),
        ]
    )
    return EXIT_OK
