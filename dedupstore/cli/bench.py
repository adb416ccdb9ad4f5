"""``dedupstore bench``: the reference load (18,000 events/s) against an embedded store."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from typing import Any

from tqdm import tqdm

from dedupstore.cli import (
    EXIT_OK,
    UsageError,
    add_json_flag,
    add_store_thread_flags,
    emit_json,
    emit_table,
    fmt_rate,
    parse_cpus,
    store_thread_options,
)
from dedupstore.layout import DURABILITY
from dedupstore.loadgen import (
    DEFAULT_TIME_SCALE,
    FLOOR_SECONDS,
    MODES,
    LoadConfig,
    LoadReport,
    RampStep,
    find_max_rate,
    generations_per_second,
    machine,
    machine_floor,
    run_load,
)
from dedupstore.planning import format_number
from dedupstore.units import format_duration, parse_count, parse_duration

#: Where the ramps of --find-max start; each step offers 1.5x the last.
RAMP_START = {"single": 250.0, "batch": 10_000.0}


def register(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = verbs.add_parser(
        "bench",
        help="drive an embedded store with the reference load and report latency and CPU",
        description=(
            "Paced, open-loop load (default 18,000 events/s) against an embedded store: a consumer takes what "
            "is due, claims it and completes the NEW effects, while an accelerated store clock rotates and "
            "evicts generations. Latency is measured from each event's scheduled time."
        ),
    )
    parser.add_argument("--rate", default="18000", metavar="EVENTS_PER_S", help="offered rate (default 18000)")
    parser.add_argument("--duration", default="30s", metavar="DURATION", help="how long to run (default 30s)")
    parser.add_argument(
        "--drain", default=None, metavar="DURATION",
        help="how long past --duration a consumer that fell behind may keep claiming its backlog before the run "
        "stops (default: half the duration, at least 5s)",
    )
    parser.add_argument("--path", default=None, metavar="DIR", help="store directory (default: a temporary one)")
    parser.add_argument("--durability", default="sync", choices=sorted(DURABILITY), help="default sync")
    parser.add_argument("--partitions", type=int, default=None, help="partitions of a new store (default 4)")
    add_store_thread_flags(
        parser, "CPUs the store's own threads are kept on, such as 1 or 2-3 (default: anywhere; Linux)"
    )
    parser.add_argument(
        "--consumer-cpus", default=None, metavar="LIST",
        help="CPUs the consumer (the thread that runs the schedule, and the floor's) is kept on, such as 0 "
        "(default: anywhere; Linux)",
    )
    parser.add_argument(
        "--mode", default="poll", choices=MODES,
        help="poll: claim_many of all that is due (default); batch: producer batches of --batch events; "
        "single: one claim() per event",
    )
    parser.add_argument("--batch", type=int, default=100, metavar="N", help="events per batch in batch mode (100)")
    parser.add_argument(
        "--time-scale", default=str(DEFAULT_TIME_SCALE), metavar="X",
        help=f"store-clock seconds per wall second (default {DEFAULT_TIME_SCALE:g}: the 12h horizon passes in 10 s; "
        f"1 = real time)",
    )
    parser.add_argument("--no-eviction", action="store_true", help="turn the background eviction thread off")
    parser.add_argument("--no-bloom", action="store_true", help="open the store without the Bloom prefilter")
    parser.add_argument(
        "--find-max", action="store_true",
        help="instead of one run: ramp the rate (x1.5 per step) until claim p99 exceeds --p99-limit, for single "
        "claims and for batches of --batch; prints the highest sustained rate of each",
    )
    parser.add_argument("--step", default="3s", metavar="DURATION", help="length of each --find-max step (3s)")
    parser.add_argument("--p99-limit", default="1ms", metavar="DURATION", help="--find-max p99 limit (1ms)")
    parser.add_argument(
        "--floor", default=f"{FLOOR_SECONDS:g}s", metavar="DURATION",
        help=f"first run the same schedule this long with no store, to show the latency the machine's own "
        f"sleep and wake-up add to every percentile (default {FLOOR_SECONDS:g}s; 0 skips it)",
    )
    parser.add_argument(
        "--histogram", default=None, metavar="PNG",
        help="write a latency picture (histogram and latency over time) to PNG; needs matplotlib",
    )
    add_json_flag(parser)
    parser.set_defaults(run=run)


def _config(args: argparse.Namespace) -> LoadConfig:
    if args.partitions is not None and not 1 <= args.partitions <= 64:
        raise UsageError(f"--partitions must be 1..64; got {args.partitions}")
    config = LoadConfig(
        rate=parse_count(args.rate, what="--rate"),
        duration=parse_duration(args.duration, what="--duration"),
        drain=None if args.drain is None else parse_duration(args.drain, what="--drain", allow_zero=True),
        durability=args.durability,
        partitions=args.partitions,
        **store_thread_options(args),
        consumer_cpus=parse_cpus(args.consumer_cpus, "--consumer-cpus"),
        mode=args.mode,
        batch=args.batch,
        time_scale=parse_count(args.time_scale, what="--time-scale"),
        bloom=not args.no_bloom,
        eviction=not args.no_eviction,
    )
    config.check()
    return config


def run(args: argparse.Namespace) -> int:
    config = _config(args)
    if args.find_max:
        if args.histogram or args.path:
            raise UsageError("--find-max runs many fresh temporary stores: --histogram and --path do not apply")
        return _find_max(args, config)
    if args.histogram:
        from dedupstore.plot import require_matplotlib

        require_matplotlib()
    floor = _floor(args, config)  # before the bar: its clock is the run's
    bar = None
    if not args.json and sys.stderr.isatty():
        bar = tqdm(total=100, unit="%", bar_format="{l_bar}{bar}| {elapsed}<{remaining}{postfix}", leave=False)

    def progress(fraction: float, report: LoadReport) -> None:
        assert bar is not None
        bar.update(round(fraction * 100) - bar.n)
        bar.set_postfix_str(f"{report.achieved_rate:,.0f} events/s")

    report = run_load(config, args.path, progress if bar is not None else None)
    if bar is not None:
        bar.close()
    doc = report.to_dict()
    doc["machine"] = machine()
    if floor is not None:
        doc["machine_floor"] = floor
    if args.histogram:
        from dedupstore.plot import latency_png

        doc["histogram"] = str(latency_png(args.histogram, report.latencies_us, doc).resolve())
    if args.json:
        emit_json(doc)
        return EXIT_OK
    emit_table(_summary(config, report, doc))
    return EXIT_OK


def _summary(config: LoadConfig, report: LoadReport, doc: dict[str, Any]) -> list[tuple[str, str]]:
    verdicts = ", ".join(f"{k} {format_number(v)}" for k, v in doc["verdicts"].items() if v)
    shape = {"poll": "claim_many of all that is due", "batch": f"batches of {config.batch}", "single": "claim()"}
    rows = [
        ("offered", f"{fmt_rate(config.rate)} for {format_number(config.duration)} s "
                    f"({config.durability}, {shape[config.mode]})"),
        ("achieved", fmt_rate(doc["achieved_rate"])),
        ("machine", _machine(doc["machine"])),
    ]
    if config.thread_cpus is not None or config.consumer_cpus is not None:
        def on(cpus: tuple[int, ...] | None) -> str:
            return "any CPU" if cpus is None else "CPU " + ",".join(map(str, cpus))

        rows.append(("pinned", f"store's threads on {on(config.thread_cpus)}, consumer on {on(config.consumer_cpus)}"))
    if doc["unclaimed"]:
        rows.append(("unclaimed", f"{format_number(doc['unclaimed'])} of {format_number(doc['events'])} events still "
                                  f"queued when the run stopped (their latency counts the time they had waited)"))
    rows += [
        ("latency", f"{_spread(doc)} "
                    f"(from scheduled send time)"),
    ]
    if "machine_floor" in doc:
        fl = doc["machine_floor"]
        rows.append(("floor", f"{_spread(fl)} "
                              f"with no store: this machine's own wake-up delay, in every figure above"))
    rows += [
        ("cpu", f"{doc['cpu_share'] * 100:.1f}% of one core ({doc['cpu_system_share'] * 100:.1f}% in the kernel)"),
        ("store cpu", f"{doc['store_cpu_share'] * 100:.1f}% of one core: "
                      f"{(doc['store_cpu_share'] - doc['store_background_cpu_share']) * 100:.1f}% in its calls, "
                      f"{doc['store_background_cpu_share'] * 100:.1f}% in its own threads; the rest is the load "
                      f"generator's{_floor_cpu(doc)}"),
        ("written", f"{format_number(doc['written_bytes'])} bytes to disk, "
                    f"{format_number(doc['written_bytes_per_event'])} per event"),
        ("batches", f"{format_number(report.batches)} (mean {doc['mean_batch']} events)"),
        ("consumer", f"in store calls {doc['store_call_share'] * 100:.1f}% of the time: "
                     f"{doc['store_call_us']:,.0f} us per batch ({doc['store_call_cpu_us']:,.0f} us of CPU)"
                     f"{_back_to_back(doc)}"),
        ("rounds", f"{_spread(doc['rounds'])} each (claim, then complete or release); begun late after "
                   f"the loop's wake-up by {_spread(doc['late_starts'])}"),
        ("verdicts", verdicts),
    ]
    ap = doc["applies"]
    if ap["count"]:
        where = (
            f"; {format_number(ap['helped'])} with their puts made by the consumer's calls, "
            f"{format_number(ap['slices_in_calls'])} slices of {ap['slice_mean_us']:,.0f} us, "
            f"{ap['in_calls_share'] * 100:.1f}% of the time" if ap["slices_in_calls"] else ""
        )
        recycled = (
            f"; {format_number(ap['recycled_segments'])} log segments recycled" if ap["recycled_segments"] else ""
        )
        rows.append(("applies", f"{format_number(ap['count'])} write-behind applies, {ap['mean_us']:,.0f} us "
                                f"per transaction ({ap['commit_mean_us']:,.0f} us of it the commit){where}{recycled}"))
    ev = doc["eviction"]
    clock = (
        f"store clock x{format_number(config.time_scale)}: {format_duration(config.horizon)} horizon in "
        f"{format_number(config.horizon / config.time_scale, 1)} s, "
        f"{format_number(generations_per_second(config), 2)} generations/s"
    )
    if ev["enabled"]:
        lag_wall = ev["lag_seconds_max"] / config.time_scale
        rows.append(("retention", f"{clock}; {format_number(ev['evicted'])} evicted, eviction lag max "
                                  f"{format_number(ev['lag_seconds_max'])} s store = {lag_wall:.2f} s wall"))
    else:
        rows.append(("retention", f"{clock}; eviction off"))
    bl = doc["bloom"]
    rows.append(("prefilter", f"{format_number(bl['filters'])} filters at the end; {bl['probe_reads_per_event']:.2f} "
                              f"generation reads in LMDB per event (what no filter ruled out)"
                 if bl["enabled"] else "off"))
    rows.append(("on disk", f"{format_number(doc['bytes_on_disk'])} bytes"))
    if "histogram" in doc:
        rows.append(("picture", doc["histogram"]))
    return rows


def _machine(m: dict[str, Any]) -> str:
    cpus = f"{m['cpus']} CPU{'s' if m['cpus'] != 1 else ''}"
    return f"{cpus}, {m['python']} ({m['python_executable']}), native core {m['native_build']}"


def _spread(q: dict[str, Any]) -> str:
    return f"p50 {q['p50_us']:,.0f} us, p99 {q['p99_us']:,.0f} us, p99.9 {q['p999_us']:,.0f} us"


def _back_to_back(doc: dict[str, Any]) -> str:
    """The consumer line's tail: its rounds' CPU back to back after the run."""
    cpu = doc.get("store_call_back_to_back_cpu_us")
    if cpu is None:
        return ""
    return f"; {cpu:,.0f} us of CPU back to back, with no wait between batches"


def _floor_cpu(doc: dict[str, Any]) -> str:
    fl = doc.get("machine_floor")
    return "" if fl is None else f", whose schedule alone took {fl['cpu_share'] * 100:.1f}% with no store"


def _floor(args: argparse.Namespace, config: LoadConfig) -> dict[str, float] | None:
    seconds = parse_duration(args.floor, what="--floor", maximum=600.0, allow_zero=True)
    return machine_floor(config, seconds) if seconds > 0 else None


def _find_max(args: argparse.Namespace, config: LoadConfig) -> int:
    step_s = parse_duration(args.step, what="--step", maximum=600.0)
    limit_us = parse_duration(args.p99_limit, what="--p99-limit") * 1e6
    chatty = not args.json and sys.stderr.isatty()
    results = {}
    for mode in ("single", "batch"):
        def show(st: RampStep, mode: str = mode) -> None:
            if chatty:
                print(f"  {mode:6} {st.rate:>11,.0f}/s  achieved {st.achieved_rate:>11,.0f}/s  "
                      f"p99 {st.p99_us:>12,.0f} us  {'ok' if st.ok else 'not sustained'}"
                      f"{' (again)' if st.retry else ''}", file=sys.stderr)

        ramp = find_max_rate(
            replace(config, mode=mode), start=RAMP_START[mode], step_seconds=step_s, p99_limit_us=limit_us,
            on_step=show,
        )
        results[mode] = ramp.to_dict()
    doc = {"durability": config.durability, "step_seconds": step_s, "p99_limit_us": limit_us, "find_max": results,
           "machine": machine()}
    if args.json:
        emit_json(doc)
        return EXIT_OK
    rows = []
    for mode, res in results.items():
        label = "single claims" if mode == "single" else f"batches of {res['batch']}"
        best = res["max_rate"]
        tried = ", ".join(f"{s['rate']:,.0f}{' again' if s['retry'] else ''}{'' if s['ok'] else '!'}"
                          for s in res["steps"])
        found = "none sustained" if not best else f"at least {fmt_rate(best)}" if res["capped"] else fmt_rate(best)
        if not best and res["steps"]:
            # Why: at the slowest rate tried, the calls alone may take the limit.
            low = min(res["steps"], key=lambda s: s["rate"])
            found += (f"; at {low['rate']:,.0f}/s p50 {low['p50_us']:,.0f} us, p99 {low['p99_us']:,.0f} us, "
                      f"{low['achieved_rate']:,.0f}/s achieved")
        rows.append((label, found + f"  (tried {tried}; ! = p99 over {limit_us:,.0f} us or under 95% achieved; "
                                    f"a rate not sustained is tried again once)"))
    emit_table(rows)
    return EXIT_OK
