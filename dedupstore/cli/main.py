"""Entry point of the ``dedupstore`` command: builds the parser from the verb modules and maps errors
to exit codes (0 ok, 1 inspect found no record, 2 usage or bad input, 3 plan invalid, 4 unresolved
records exist with --fail-if-any, 5 the store is damaged)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from dedupstore.cli import (
    EXIT_PLAN_INVALID,
    EXIT_USAGE,
    UsageError,
    bench,
    complain,
    evict,
    inspect,
    plan,
    serve,
    size,
    stats,
    unresolved,
    verify,
)
from dedupstore.errors import InvalidInputError
from dedupstore.planning import InfeasiblePlanError

#: Each verb is one module with ``register(verbs)``; add new verbs here.
VERBS = (size, plan, bench, inspect, stats, unresolved, verify, evict, serve)


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser that reports through ``main`` instead of printing usage and exiting."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Prefix matching would let "--rep" mean --replicas today and fail tomorrow, when
        # another flag starting with "--rep" appears.
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see '{self.prog} --help')")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="dedupstore",
        description="An embedded idempotency store for event consumers: planning and operating commands.",
        epilog=(
            "exit codes: 0 ok; 1 inspect: no such record; 2 bad usage or input, or no store at --path "
            "(nothing computed); 3 the plan cannot work; 4 unresolved --fail-if-any: unresolved records "
            "exist; 5 the store is damaged (verify found problems, or a read met a corrupt record)"
        ),
    )
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    for module in VERBS:
        module.register(verbs)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        try:
            args = parser.parse_args(argv)
        except SystemExit as done:
            # Only --help gets here (errors raise UsageError); keep main() a function that returns.
            return done.code if isinstance(done.code, int) else EXIT_USAGE
        run: Callable[[argparse.Namespace], int] = args.run
        return run(args)
    except InfeasiblePlanError as exc:
        complain("plan invalid", str(exc))
        return EXIT_PLAN_INVALID
    except (UsageError, InvalidInputError) as exc:
        complain("error", str(exc))
        return EXIT_USAGE
