"""``python -m benchmarks run [SUITE...] [--quick]``, ``python -m benchmarks compare REV
[SUITE...]``."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from benchmarks.harness import RESULTS_DIR
from benchmarks.suites import SUITES


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run benchmark suites (all by default)")
    run.add_argument(
        "suites",
        nargs="*",
        choices=[[], *SUITES],
        metavar="SUITE",
        help=f"one of: {', '.join(SUITES)}",
    )
    run.add_argument("--quick", action="store_true", help="small sizes, for CI (< 2 minutes)")
    run.add_argument("--out", type=Path, default=RESULTS_DIR, help="where results go")
    run.add_argument(
        "--locomo",
        type=Path,
        metavar="PATH",
        help="LoCoMo data: a folder with locomo-dev.json or the file "
        "(default: $AGENT_MEMORY_LOCOMO, else ../shared/data/locomo)",
    )
    run.add_argument(
        "--vectors",
        type=int,
        metavar="N",
        help="items in the large namespace of the stores suite's vector search part "
        "(default 1,000,000, 20,000 with --quick; a tenth as many go to user namespaces)",
    )
    commands.add_parser("list", help="list the suites")
    comparing = commands.add_parser(
        "compare", help="the code at a git revision against this tree, in one run"
    )
    comparing.add_argument("rev", help="the revision measured as 'before'")
    comparing.add_argument(
        "suites", nargs="*", choices=[[], *SUITES], metavar="SUITE", help="default: all"
    )
    comparing.add_argument("--quick", action="store_true", help="small sizes")
    comparing.add_argument(
        "--repeat", type=int, default=2, help="runs of each side, alternating (default 2)"
    )
    comparing.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args(argv)
    if args.command == "compare":
        from benchmarks.compare import compare, print_rows

        rows = compare(args.rev, args.suites or list(SUITES), quick=args.quick, repeat=args.repeat)
        print_rows(rows)
        if args.json is not None:
            args.json.write_text(json.dumps(rows, indent=2))
        return 0
    if args.command == "list":
        for name, suite in SUITES.items():
            print(f"{name:<16} {suite.__doc__.strip().splitlines()[0] if suite.__doc__ else ''}")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    if args.locomo is not None:
        if not args.locomo.exists():
            parser.error(f"--locomo {args.locomo}: no such file or folder")
        os.environ["AGENT_MEMORY_LOCOMO"] = str(args.locomo)
    if args.vectors is not None:
        os.environ["AGENT_MEMORY_BENCH_VECTORS"] = str(args.vectors)
    for name in args.suites or list(SUITES):
        started = time.perf_counter()
        print(f"== {name} {'(quick)' if args.quick else ''}", flush=True)
        SUITES[name](quick=args.quick, out=args.out)
        print(f"== {name} done in {time.perf_counter() - started:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
