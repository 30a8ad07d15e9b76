"""The ``agent-memory`` command: the demo, and what operators need day to day (the user
guide's "The ``agent-memory`` command" describes its URLs, output and exit statuses)."""

from __future__ import annotations

import argparse
import gc
import importlib
import logging
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from langgraph_checkpoint_agent_memory import errors
from langgraph_checkpoint_agent_memory.cli import common, importing, keys, memory, output, retention
from langgraph_checkpoint_agent_memory.cli.common import CommandError, default_url, resolve_url
from langgraph_checkpoint_agent_memory.cli.progress import Report, progress
from langgraph_checkpoint_agent_memory.db import url as urls
from langgraph_checkpoint_agent_memory.memory.model import EPISODE_STATUSES

__all__ = ["CommandError", "build_parser", "default_url", "main", "resolve_url", "run"]


def _cmd_migrate(args: argparse.Namespace) -> int:
    from langgraph_checkpoint_agent_memory.db.migrations import COMPONENTS, installed_plan, migrate
    from langgraph_checkpoint_agent_memory.factory import create_store

    url = resolve_url(args.url)
    target = urls.parse(url)
    # the store first: a setting it refuses (a bad master key) leaves no folder behind
    with create_store(url, auto_setup=False, shard_depth=args.shard_depth) as store:
        if target.kind == "sqlite":
            folder = Path(target.options["path"]).parent
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as exc:  # a file in the way, a folder the user cannot write
                why = "a file is in the way" if isinstance(exc, FileExistsError) else exc.strerror
                raise CommandError(
                    f"cannot create the folder {folder} of {target.masked()}: {why or exc}"
                ) from None
        # the master key set, the database is marked encrypted (unset, an encrypted one is refused)
        encrypted = store.keyring is not None
        if "keys" in store.db.run(installed_plan(store.dialect)):
            common.check_master_key(store)
        with progress(args, "migrating", "parts") as report:
            # a bar of its own for a store written before the current term index, if any
            converting: list[Report] = []

            def converted(done: int, total: int | None) -> None:
                if not converting:
                    converting.append(report.part("  converting store items", "items"))
                converting[0](done, total)

            applied = migrate(store.db, COMPONENTS, store.shard_depth, encrypted, report, converted)
    newest = {c.name: c.latest for c in COMPONENTS}
    done = [f"{name} {v}" for name, versions in applied.items() for v in versions]
    latest = ", ".join(f"{name} {v}" for name, v in newest.items())
    said = f"applied migration(s) {', '.join(done)}" if done else f"schema is up to date ({latest})"
    common.emit(args, {"applied": applied, "latest": newest}, lambda out: out.print(said))
    return 0


def _cmd_config(args: argparse.Namespace) -> int:
    from langgraph_checkpoint_agent_memory import settings

    for module in args.module:
        try:
            importlib.import_module(module)
        except Exception as exc:  # the module's own error, whatever it is
            raise errors.ConfigurationError(
                f"--module {module} cannot be imported: {type(exc).__name__}: {exc}"
            ) from None
    if args.json:
        print(settings.export_json())
        return 0
    described = [f.describe() for f in settings.fields()]
    if not described:
        print("No @agent_config fields are declared (import your modules with --module).")
        return 0
    width = max(len(d["key"]) for d in described)
    for d in described:
        print(f"{d['key']:<{width}}  {d['value']!r:<12} ({d['source']}; {d['type']})  {d['label']}")
    return 0


def _cmd_stats(args: argparse.Namespace) -> int:
    from langgraph_checkpoint_agent_memory.db import memory as sqlm
    from langgraph_checkpoint_agent_memory.db.health import sizes_plan, thread_counts_plan
    from langgraph_checkpoint_agent_memory.db.keys import count_plan
    from langgraph_checkpoint_agent_memory.factory import create_store, resolve_encryption

    url = resolve_url(args.url)
    installed = common.installed(url)
    now = time.time()
    # the data keys: none, the data database (in its backups, out of an erase's reach), a key store
    setting, keystore = resolve_encryption(None), None
    if setting is not None:
        keystore = urls.mask_url(setting.keystore_url) if setting.keystore_url else "data database"
    held: dict[str, Any] = {"keystore": keystore, "in_data_database": None, "beside_data": False}
    data: dict[str, Any] = {"now": now, "backlog": None, "jobs": None, "threads": None}
    data.update(keys=held, erasures=None)
    # nothing is set up or created (opened for writing, a SQLite file's WAL files go at close)
    with create_store(url, auto_setup=False, **common.existing(url)) as store:
        sql = sqlm.MemorySql(store.dialect, store.statements)
        if "memory" in installed:
            backlog = store.run_plan(sqlm.backlog_plan(sql, now))
            data["backlog"] = {
                "pending_episodes": backlog.pending,
                "scopes": backlog.scopes,
                "oldest_pending_at": backlog.oldest_at,
                "oldest_pending_age_seconds": backlog.oldest_age,
            }
            data["jobs"] = store.run_plan(sqlm.failures_plan(sql))
        if "checkpoint" in installed:
            counts = store.run_plan(thread_counts_plan(store.dialect, now, args.within))
            data["threads"] = {
                "total": counts.threads,
                "expired": counts.expired,
                "expiring": counts.expiring,
                "within_seconds": counts.within_seconds,
            }
        sizes = store.run_plan(sizes_plan(store.dialect))
        data["size"] = sizes.as_dict()
        if "am_keys" in sizes.tables:
            held["in_data_database"] = store.run_plan(count_plan(store.dialect))
        held["beside_data"] = bool(held["in_data_database"])
        if "am_memory_erasures" in sizes.tables:
            data["erasures"] = {"owed_keys": store.run_plan(sqlm.owed_count_plan(sql))}
    common.emit(args, data, lambda out: _render(out, data))
    return 0


def _ago(seconds: float) -> str:
    """A wait for people: ``45 s``, ``12 min``, ``3.5 h``, ``2.0 d``."""
    for unit, scale in (("d", 86400), ("h", 3600)):
        if seconds >= scale:
            return f"{seconds / scale:.1f} {unit}"
    return f"{seconds / 60:.0f} min" if seconds >= 60 else f"{seconds:.0f} s"


def _known(n: int | None) -> str:
    return "unknown" if n is None else output.size(n)


def _render(out: Any, data: dict[str, Any]) -> None:
    from langgraph_checkpoint_agent_memory.db.health import COMPONENT_TABLES

    figures = output.table("agent memory health", "figure", ("value", "right"), show_header=False)
    backlog, jobs, threads = data["backlog"], data["jobs"], data["threads"]
    if backlog is None:
        figures.add_row("consolidation", "no agent memory tables")
    else:
        oldest, age = backlog["oldest_pending_at"], backlog["oldest_pending_age_seconds"]
        figures.add_row(
            "pending episodes", f"{backlog['pending_episodes']} in {backlog['scopes']} scope(s)"
        )
        when = "none" if oldest is None else f"{output.when(oldest)} ({_ago(age)} ago)"
        figures.add_row("oldest pending", when)
        for name in ("parked_episodes", "failed_jobs", "parked_jobs"):
            figures.add_row(name.replace("_", " "), str(jobs[name]))
    if threads is None:
        figures.add_row("threads", "no checkpointer tables")
    else:
        figures.add_row("threads", str(threads["total"]))
        figures.add_row("expired threads", str(threads["expired"]))
        figures.add_row(
            f"expiring within {_ago(threads['within_seconds'])}", str(threads["expiring"])
        )
    held, erasures = data["keys"], data["erasures"]
    if held["beside_data"]:
        figures.add_row(
            "data keys in this database",
            f"{held['in_data_database']}: its backups hold them, so an erase does not reach "
            "them (move them to a key store of their own)",
        )
    if erasures is not None:
        figures.add_row("data keys erases owe", str(erasures["owed_keys"]))
    out.print(figures)
    size = data["size"]
    title = f"database size ({size['measured_by'] or 'per table unknown'})"
    sizes = output.table(title, "component", ("tables", "right"), ("size", "right"))
    for name, n in size["components"].items():
        count = sum(t.name in size["tables"] for t in COMPONENT_TABLES[name])
        sizes.add_row(name, str(count), _known(n))
    sizes.add_row("total", str(len(size["tables"])), _known(size["total_bytes"]))
    if size["file_bytes"] is not None:
        sizes.add_row("file", "", output.size(size["file_bytes"]))
    out.print(sizes)


def _retention_arguments(parser: argparse.ArgumentParser) -> None:
    """The app's saver's: a sweep with ``delete`` removes threads an app that prunes keeps."""
    parser.add_argument(
        "--strategy",
        choices=["delete", "keep_latest"],
        default="delete",
        help="what to do with an expired thread: delete it (default) or prune it to its last "
        "--keep-last checkpoints; use the app's strategy",
    )
    parser.add_argument(  # no default: given without keep_latest, it is refused
        "--keep-last",
        type=common.count_argument(1),
        metavar="N",
        help="with --strategy keep_latest: checkpoints kept per namespace (default 1)",
    )


def _flag(parser: argparse.ArgumentParser, flag: str, help: str) -> None:
    parser.add_argument(flag, action="store_true", help=help)


def _count_option(
    parser: argparse.ArgumentParser, flag: str, least: int, default: int, help: str
) -> None:
    parser.add_argument(
        flag,
        type=common.count_argument(least),
        default=default,
        metavar="N",
        help=f"{help} (default {default})",
    )


class _Version(argparse.Action):
    """``--version``: the installed version, read only when asked."""

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        import langgraph_checkpoint_agent_memory as package

        print(f"{parser.prog} {package.__version__}")
        parser.exit()


class _Unbuilt:
    """A parser not built: building all twenty commands' costs a tenth of a second."""

    def add_argument(self, *args: Any, **options: Any) -> None:
        pass

    def add_mutually_exclusive_group(self, **options: Any) -> _Unbuilt:
        return self


def _named_command(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names: its first word that is not an option."""
    return next((word for word in argv if not word.startswith("-")), None)


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The command line's parser; given ``argv``, only the parser of the command it names is
    built in full (all are, without a command or with an unknown one, to list them)."""
    only = None if argv is None else _named_command(argv)
    try:  # the embedded default for the help, or where it would be when there is none
        shown_default = default_url()
    except errors.ConfigurationError:
        shown_default = f"a SQLite file under ${urls.HOME_ENV}"
    parser = common.Parser(
        prog="agent-memory",
        description="Inspect and operate the memory of LangGraph agents.",
        epilog="SCOPE is written user=alice,agent=support (keys: user, agent, workflow).",
    )
    parser.add_argument("--version", action=_Version, nargs=0, help="print the version and exit")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    def command(
        name: str, help: str, func: Callable[[argparse.Namespace], int], *positional: str
    ) -> Any:
        if only is not None and name != only:
            return _Unbuilt()
        p = commands.add_parser(name, help=help, description=help)
        p.set_defaults(func=func)
        for metavar in positional:
            p.add_argument(metavar.lower(), metavar=metavar)
        if name not in ("config", "demo", "new-key"):
            p.add_argument(
                "--url",
                type=common.url_argument,
                help="database URL or path of a SQLite file "
                f"(default: ${urls.URL_ENV}, else {shown_default}); "
                "behind PgBouncer in transaction mode add ?prepare_threshold=none",
            )
        if name != "demo":
            _flag(p, "--json", "print JSON for scripts")
        return p

    demo = command("demo", "run the scripted multi-session demo", memory.cmd_demo)
    demo.add_argument(
        "--url",
        type=common.url_argument,
        help=f"the demo's own database (default: sqlite:///{urls.DEMO_FILE} in the current folder; "
        f"never ${urls.URL_ENV}): a new SQLite file, an empty database, or one the demo "
        "created before; any other is refused",
    )
    _flag(demo, "--reset", "delete the demo's SQLite file first (only a file the demo created)")
    demo.add_argument("--model", help="provider:name for init_chat_model, e.g. openai:gpt-4o-mini")
    extractor = "provider:name of the extractor's chat model"

    command("scopes", "list scopes with their counts", memory.cmd_scopes)
    facts = command("facts", "a scope's current facts", memory.cmd_facts, "SCOPE")
    _flag(facts, "--all", "include superseded values")
    episodes = command("episodes", "a scope's episodes", memory.cmd_episodes, "SCOPE")
    episodes.add_argument("--status", choices=EPISODE_STATUSES)
    context = command(
        "context", "what inject_node would inject for QUERY", memory.cmd_context, "SCOPE", "QUERY"
    )
    context.add_argument("--budget", type=common.count_argument(1), help="token budget")
    erase = command("erase", "erase a scope's memory and conversations", memory.cmd_erase, "SCOPE")
    _flag(erase, "--yes", "do not ask for confirmation")
    consolidate = command("consolidate", "consolidate pending episodes now", memory.cmd_consolidate)
    consolidate.add_argument("--scope", help="only this SCOPE")
    consolidate.add_argument("--model", help=extractor)
    decay = command("decay", "delete memories whose importance decayed away", memory.cmd_decay)
    decay.add_argument("--scope", help="only this SCOPE")
    sweep = command(
        "sweep", "remove expired store items and checkpointer threads", retention.cmd_sweep
    )
    _flag(sweep, "--dry-run", "say what would be removed and how many bytes freed; change nothing")
    _retention_arguments(sweep)
    threads = command(
        "threads",
        "threads with their checkpoints, bytes, activity and expiry",
        retention.cmd_threads,
    )
    threads.add_argument(
        "--sort",
        choices=["bytes", "checkpoints", "last_active", "expires_at", "thread_id"],
        default="bytes",
        help="most bytes or checkpoints first, latest activity first, soonest expiry first, "
        "or by id (default bytes)",
    )
    _count_option(threads, "--limit", 0, 50, "at most N threads (0: all)")
    stats = command(
        "stats",
        "health figures: consolidation backlog, failed jobs, thread expiry, database size",
        _cmd_stats,
    )
    stats.add_argument(
        "--within",
        type=common.seconds_argument,
        default=3600.0,
        metavar="SECONDS",
        help="count the threads expiring within SECONDS from now (default 3600)",
    )
    jobs = command("jobs", "failed and parked consolidation jobs", memory.cmd_jobs)
    _flag(jobs, "--retry", "queue parked episodes again")
    jobs.add_argument("--scope", help="with --retry: only this SCOPE")
    _flag(jobs, "--all", "completed jobs too")
    _count_option(jobs, "--limit", 1, 50, "at most N jobs")
    worker = command("worker", "run the background worker in the foreground", memory.cmd_worker)
    _flag(worker, "--once", "one round, then exit")
    worker.add_argument("--model", help=extractor)
    _retention_arguments(worker)
    for name, default in (("consolidate", 30), ("decay", 3600), ("sweep", 300)):
        worker.add_argument(
            f"--{name}-every",
            type=common.seconds_argument,
            metavar="SECONDS",
            help=f"seconds between {name} rounds (default: config.memory.{name}_every_seconds "
            f"or {default})",
        )
    migrate = command("migrate", "apply schema migrations", _cmd_migrate)
    migrate.add_argument(
        "--shard-depth",
        type=common.count_argument(1),
        metavar="N",
        help="for a new database: the store's shard key is a namespace's first N labels "
        "(default: config.store.shard_depth or 2); a database records its rule once written, "
        "and refuses another",
    )

    keys.add_commands(command)
    importing.add_command(command)

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
    if only is not None and only not in commands.choices:  # an unknown command: list them all
        return build_parser()
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # psycopg_pool logs each failed connection attempt: the command's own one line says it
    logging.getLogger("psycopg.pool").setLevel(logging.CRITICAL)
    words = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(words)
    args, unknown = parser.parse_known_args(words)
    if unknown:  # a command's unknown option is that command's usage error
        prog = f"{parser.prog} {args.command}" if args.command else parser.prog
        parser.exit(2, f"{prog}: error: unrecognized arguments: {' '.join(unknown)}\n")
    if args.command is None:
        parser.print_help()
        return 0
    try:
        return int(args.func(args))
    except KeyboardInterrupt:  # Ctrl-C (``worker`` stops on it by itself)
        print(f"agent-memory {args.command}: interrupted", file=sys.stderr)
        return 130
    except (errors.AgentMemoryError, ImportError, ValueError) as exc:
        message = f"agent-memory {args.command}: error: {exc}"
        if isinstance(exc, errors.DatabaseNotFoundError):  # only migrate creates a database
            url = urls.mask_url(resolve_url(args.url))
            message += f"; `agent-memory migrate --url {url}` creates one"
        print(message, file=sys.stderr)
        # a usage or configuration mistake is 2 (an encrypted database opened without its
        # master key too); a CommandError, an unreachable database, an erased key... 1
        unkeyed = isinstance(exc, errors.EncryptionError) and not isinstance(
            exc, errors.KeyMissingError
        )
        return 2 if unkeyed or isinstance(exc, (ImportError, ValueError)) else 1


#: The commands that read a little and return at once: the collector is off while they run.
QUICK_READS = frozenset({"scopes", "facts", "episodes"})


def run() -> NoReturn:
    """The ``agent-memory`` program: :func:`main` on the process's arguments, then exit with
    its status.

    Two walks of the cyclic garbage collector, needless in a short process, are skipped: at
    the exit, over the some 55,000 objects a read leaves (0.05-0.07 s of its 0.3 s;
    :func:`gc.freeze`, and the exit stays Python's own); and while :data:`QUICK_READS` run,
    whose imports set off some 120 collections that free about 700 objects (0.03-0.04 s more;
    :func:`gc.disable`). The commands that can run long keep it on.

    Example:
        ```console
        $ agent-memory scopes --url sqlite:///agent-memory-demo.db
        ```
    """
    if _named_command(sys.argv[1:]) in QUICK_READS:
        gc.disable()
    try:
        status = main()
    finally:
        gc.freeze()
    sys.exit(status)
