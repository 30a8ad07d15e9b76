"""The ``agent-memory`` command.

Commands print human-readable text on a terminal and JSON with ``--json``; errors go to
stderr with a non-zero exit status.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Sequence

from langgraph_checkpoint_agent_memory import __version__, settings
from langgraph_checkpoint_agent_memory.errors import AgentMemoryError


def _cmd_config(args: argparse.Namespace) -> int:
    for module in args.module:
        importlib.import_module(module)
    described = [f.describe() for f in settings.fields()]
    if args.json:
        print(json.dumps(described, indent=2, default=str))
        return 0
    if not described:
        print("No @agent_config fields are declared (import your modules with --module).")
        return 0
    width = max(len(d["key"]) for d in described)
    for d in described:
        print(f"{d['key']:<{width}}  {d['value']!r:<12} ({d['source']}; {d['type']})  {d['label']}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agent-memory",
        description="Inspect and operate the memory of LangGraph agents.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    config = commands.add_parser(
        "config", help="list the @agent_config fields and their effective values"
    )
    config.add_argument("--json", action="store_true", help="print JSON for scripts")
    config.add_argument(
        "--module",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE first so its @agent_config fields are registered (repeatable)",
    )
    config.set_defaults(func=_cmd_config)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    try:
        return int(args.func(args))
    except (AgentMemoryError, ImportError) as exc:
        print(f"agent-memory {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
