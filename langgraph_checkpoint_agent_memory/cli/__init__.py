"""The ``agent-memory`` command: the demo, and what operators need day to day.

Every command that touches a database takes ``--url`` (else ``AGENT_MEMORY_URL``, else the
embedded default: a SQLite file under ``$AGENT_MEMORY_HOME``, ``$XDG_DATA_HOME/agent-memory``
or ``~/.local/share/agent-memory``). Only ``migrate`` creates a database; the others open an
existing one (``demo`` excepted: it writes to a database of its own, see :mod:`..demo`).
Output is readable tables on a terminal and JSON with ``--json``; progress bars appear only
on a terminal. Errors go to stderr in one line, with exit status 1 (a runtime failure:
unreachable server, unknown scope) or 2 (bad arguments or configuration, a database that does
not exist); Ctrl-C ends a command with one line and status 130.

A SCOPE is written ``user=alice,agent=support`` (keys: user, agent, workflow).
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from langgraph_checkpoint_agent_memory import __version__, settings
from langgraph_checkpoint_agent_memory.cli.common import (
    CommandError,
    Parser,
    _emit,
    count_argument,
    default_url,
    resolve_url,
    seconds_argument,
    url_argument,
)
from langgraph_checkpoint_agent_memory.cli.health import _cmd_stats
from langgraph_checkpoint_agent_memory.cli.keys import add_commands as _key_commands
from langgraph_checkpoint_agent_memory.cli.memory import (
    _cmd_consolidate,
    _cmd_context,
    _cmd_decay,
    _cmd_demo,
    _cmd_episodes,
    _cmd_erase,
    _cmd_facts,
    _cmd_jobs,
    _cmd_scopes,
    _cmd_worker,
)
from langgraph_checkpoint_agent_memory.cli.retention import (
    _cmd_sweep,
    _cmd_threads,
)
from langgraph_checkpoint_agent_memory.db import url as urls
from langgraph_checkpoint_agent_memory.demo import DEMO_FILE
from langgraph_checkpoint_agent_memory.errors import (
    AgentMemoryError,
    ConfigurationError,
    DatabaseNotFoundError,
)

__all__ = ["CommandError", "build_parser", "default_url", "main", "resolve_url"]


def _cmd_migrate(args: argparse.Namespace) -> int:
    from langgraph_checkpoint_agent_memory.db.migrations import COMPONENTS, migrate
    from langgraph_checkpoint_agent_memory.factory import create_store

    url = resolve_url(args.url)
    target = urls.parse(url)
    # the store first: a setting it refuses (a bad master key) leaves no folder behind
    store = create_store(url, auto_setup=False, shard_depth=args.shard_depth)
    try:
        if target.kind == "sqlite":
            _create_folder(Path(target.options["path"]).parent, target.masked())
        # with the master key configured, the database is marked encrypted (without it,
        # an encrypted one is refused)
        applied = migrate(store.db, COMPONENTS, store.shard_depth, store.keyring is not None)
    finally:
        store.close()
    newest = {c.name: c.latest for c in COMPONENTS}
    data = {"applied": applied, "latest": newest}
    done = [f"{name} {v}" for name, versions in applied.items() for v in versions]
    latest = ", ".join(f"{name} {v}" for name, v in newest.items())
    _emit(
        args,
        data,
        lambda out: out.print(
            f"applied migration(s) {', '.join(done)}"
            if done
            else f"schema is up to date ({latest})"
        ),
    )
    return 0


def _create_folder(folder: Path, where: str) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a file in the way, a folder the user cannot write
        why = "a file is in the way" if isinstance(exc, FileExistsError) else exc.strerror
        raise CommandError(f"cannot create the folder {folder} of {where}: {why or exc}") from None


def _cmd_config(args: argparse.Namespace) -> int:
    for module in args.module:
        try:
            importlib.import_module(module)
        except Exception as exc:  # the module's own error, whatever it is
            raise ConfigurationError(
                f"--module {module} cannot be imported: {type(exc).__name__}: {exc}"
            ) from None
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


# -- the parser ----------------------------------------------------------------------------


def _retention_arguments(parser: argparse.ArgumentParser) -> None:
    """``--strategy`` and ``--keep-last``: what a sweep does with an expired thread, which
    must be what the app's saver does (a sweep with ``delete`` removes threads an app that
    prunes meant to keep)."""
    parser.add_argument(
        "--strategy",
        choices=["delete", "keep_latest"],
        default="delete",
        help="what to do with an expired thread: delete it (default) or prune it to its last "
        "--keep-last checkpoints; use the app's strategy",
    )
    parser.add_argument(
        "--keep-last",
        type=count_argument(1),
        default=1,
        metavar="N",
        help="with --strategy keep_latest: checkpoints kept per namespace (default 1)",
    )


def _shown_default() -> str:
    """The embedded default for the help, or where it would be when there is none."""
    try:
        return default_url()
    except ConfigurationError:
        return f"a SQLite file under ${urls.HOME_ENV}"


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="agent-memory",
        description="Inspect and operate the memory of LangGraph agents.",
        epilog="SCOPE is written user=alice,agent=support (keys: user, agent, workflow).",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    def command(name: str, help: str, func: Callable[[argparse.Namespace], int]) -> Any:
        p = commands.add_parser(name, help=help, description=help)
        p.set_defaults(func=func)
        if name not in ("config", "demo", "new-key"):
            p.add_argument(
                "--url",
                type=url_argument,
                help="database URL or path of a SQLite file "
                f"(default: ${urls.URL_ENV}, else {_shown_default()}); "
                "behind PgBouncer in transaction mode add ?prepare_threshold=none",
            )
        if name != "demo":
            p.add_argument("--json", action="store_true", help="print JSON for scripts")
        return p

    demo = command("demo", "run the scripted multi-session demo", _cmd_demo)
    demo.add_argument(
        "--url",
        type=url_argument,
        help=f"the demo's own database (default: sqlite:///{DEMO_FILE} in the current folder; "
        f"never ${urls.URL_ENV}): a new SQLite file, an empty database, or one the demo "
        "created before; any other is refused",
    )
    demo.add_argument(
        "--reset",
        action="store_true",
        help="delete the demo's SQLite file first (only a file the demo created)",
    )
    demo.add_argument("--model", help="provider:name for init_chat_model, e.g. openai:gpt-4o-mini")

    command("scopes", "list scopes with their counts", _cmd_scopes)
    facts = command("facts", "a scope's current facts", _cmd_facts)
    facts.add_argument("scope", metavar="SCOPE")
    facts.add_argument("--all", action="store_true", help="include superseded values")
    episodes = command("episodes", "a scope's episodes", _cmd_episodes)
    episodes.add_argument("scope", metavar="SCOPE")
    episodes.add_argument("--status", choices=["pending", "done", "parked"])
    context = command("context", "what inject_node would inject for QUERY", _cmd_context)
    context.add_argument("scope", metavar="SCOPE")
    context.add_argument("query", metavar="QUERY")
    context.add_argument("--budget", type=count_argument(1), default=None, help="token budget")
    erase = command("erase", "erase a scope's memory and conversations", _cmd_erase)
    erase.add_argument("scope", metavar="SCOPE")
    erase.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    consolidate = command("consolidate", "consolidate pending episodes now", _cmd_consolidate)
    consolidate.add_argument("--scope", help="only this SCOPE")
    consolidate.add_argument("--model", help="provider:name of the extractor's chat model")
    decay = command("decay", "delete memories whose importance decayed away", _cmd_decay)
    decay.add_argument("--scope", help="only this SCOPE")
    sweep = command("sweep", "remove expired store items and checkpointer threads", _cmd_sweep)
    sweep.add_argument(
        "--dry-run",
        action="store_true",
        help="say what would be removed and how many bytes freed; change nothing",
    )
    _retention_arguments(sweep)
    threads = command(
        "threads", "threads with their checkpoints, bytes, activity and expiry", _cmd_threads
    )
    threads.add_argument(
        "--sort",
        choices=["bytes", "checkpoints", "last_active", "expires_at", "thread_id"],
        default="bytes",
        help="most bytes or checkpoints first, latest activity first, soonest expiry first, "
        "or by id (default bytes)",
    )
    threads.add_argument(
        "--limit",
        type=count_argument(0),
        default=50,
        metavar="N",
        help="at most N threads (0: all)",
    )
    stats = command(
        "stats",
        "health figures: consolidation backlog, failed jobs, thread expiry, database size",
        _cmd_stats,
    )
    stats.add_argument(
        "--within",
        type=seconds_argument,
        default=3600.0,
        metavar="SECONDS",
        help="count the threads expiring within SECONDS from now (default 3600)",
    )
    jobs = command("jobs", "failed and parked consolidation jobs", _cmd_jobs)
    jobs.add_argument("--retry", action="store_true", help="queue parked episodes again")
    jobs.add_argument("--scope", help="with --retry: only this SCOPE")
    jobs.add_argument("--all", action="store_true", help="completed jobs too")
    jobs.add_argument("--limit", type=count_argument(1), default=50, metavar="N")
    worker = command("worker", "run the background worker in the foreground", _cmd_worker)
    worker.add_argument("--once", action="store_true", help="one round, then exit")
    worker.add_argument("--model", help="provider:name of the extractor's chat model")
    _retention_arguments(worker)
    for name, default in (("consolidate", 30), ("decay", 3600), ("sweep", 300)):
        worker.add_argument(
            f"--{name}-every",
            type=seconds_argument,
            metavar="SECONDS",
            help=f"seconds between {name} rounds (default: config.memory.{name}_every_seconds "
            f"or {default})",
        )
    migrate = command("migrate", "apply schema migrations", _cmd_migrate)
    migrate.add_argument(
        "--shard-depth",
        type=count_argument(1),
        metavar="N",
        help="for a new database: the store's shard key is a namespace's first N labels "
        "(default: config.store.shard_depth or 2); a database records its rule once written, "
        "and refuses another",
    )

    _key_commands(command)

    config = command(
        "config", "list the @agent_config fields and their effective values", _cmd_config
    )
    config.add_argument(
        "--module",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE first so its @agent_config fields are registered (repeatable)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # psycopg_pool logs each failed connection attempt; the command reports the outcome in
    # one line of its own, so those attempts would only repeat it
    logging.getLogger("psycopg.pool").setLevel(logging.CRITICAL)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    try:
        return int(args.func(args))
    except KeyboardInterrupt:  # Ctrl-C (``worker`` stops on it by itself)
        print(f"agent-memory {args.command}: interrupted", file=sys.stderr)
        return 130
    except CommandError as exc:
        print(f"agent-memory {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except DatabaseNotFoundError as exc:  # only migrate creates a database
        url = urls.mask_url(resolve_url(args.url))
        print(
            f"agent-memory {args.command}: error: {exc}; `agent-memory migrate --url {url}` "
            "creates one",
            file=sys.stderr,
        )
        return 2
    except (ConfigurationError, ImportError, ValueError) as exc:
        print(f"agent-memory {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except AgentMemoryError as exc:  # an unreachable database and the like
        print(f"agent-memory {args.command}: error: {exc}", file=sys.stderr)
        return 1
