"""The ``agent-memory`` command: the demo, and what operators need day to day.

Every command that touches a database takes ``--url`` (else ``AGENT_MEMORY_URL``, else the
embedded default: a SQLite file under ``$AGENT_MEMORY_HOME``, ``$XDG_DATA_HOME/agent-memory``
or ``~/.local/share/agent-memory``). Output is readable tables on a terminal and JSON with
``--json``; progress bars appear only on a terminal. Errors go to stderr with exit status 1
(a runtime failure: unreachable server, unknown scope) or 2 (bad arguments or configuration).

A SCOPE is written ``user=alice,agent=support`` (keys: user, agent, workflow).
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

from langgraph_checkpoint_agent_memory import __version__, settings
from langgraph_checkpoint_agent_memory.db import url as urls
from langgraph_checkpoint_agent_memory.errors import AgentMemoryError, ConfigurationError


class CommandError(AgentMemoryError):
    """A command could not do what was asked (exit status 1)."""


data_dir = urls.data_dir
default_url = urls.default_url


def resolve_url(given: str | None) -> str:
    return given or os.environ.get(urls.URL_ENV) or default_url()


def _console(args: argparse.Namespace) -> Any:
    from rich.console import Console

    return Console(highlight=False, soft_wrap=args.command != "demo")


def _emit(args: argparse.Namespace, data: Any, render: Callable[[Any], None]) -> None:
    if getattr(args, "json", False):
        print(json.dumps(data, indent=2, default=str, ensure_ascii=False))
    else:
        render(_console(args))


@contextmanager
def _progress(args: argparse.Namespace, description: str, total: int | None) -> Iterator[Any]:
    """A progress bar on a terminal; silent when piped or with --json."""
    from rich.progress import Progress

    quiet = getattr(args, "json", False) or not sys.stderr.isatty()
    with Progress(disable=quiet, transient=True) as progress:
        task = progress.add_task(description, total=total)
        yield lambda n=1: progress.advance(task, n)


def _installed(url: str) -> set[str]:
    """The components (``checkpoint``, ``store``, ``memory``) whose tables the database at
    ``url`` holds, read from its migration ledger; a database that does not exist, or that
    this package never set up, is an error. Nothing is created or migrated."""
    from langgraph_checkpoint_agent_memory.db.migrations import installed_plan
    from langgraph_checkpoint_agent_memory.factory import create_store

    missing = CommandError(
        f"no agent memory database at {urls.mask_url(url)}: `agent-memory migrate --url "
        "URL` creates one, as does the first run of an app that uses it"
    )
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).is_file():
        raise missing
    probe = create_store(url, auto_setup=False)  # reads the ledger, creates nothing
    try:
        found: set[str] = probe.run_plan(installed_plan(probe.dialect))
    finally:
        probe.close()
    if not found:
        raise missing
    return found


@contextmanager
def _memory(
    args: argparse.Namespace,
    extractor: Any = None,
    *,
    reads: bool = False,
    checkpointer_options: dict[str, Any] | None = None,
    **options: Any,
) -> Iterator[Any]:
    """The memory at ``--url``. With ``reads`` (a command that only reads), a database that
    does not exist or holds no agent memory is an error, never created."""
    from langgraph_checkpoint_agent_memory.factory import create_checkpointer, create_store
    from langgraph_checkpoint_agent_memory.memory import AgentMemory

    if getattr(args, "scope", None):  # a malformed scope is a usage error, whatever the URL
        from langgraph_checkpoint_agent_memory.memory import Scope

        Scope.parse(args.scope)
    url = resolve_url(args.url)
    if reads and "memory" not in _installed(url):
        raise CommandError(
            f"no agent memory database at {urls.mask_url(url)}: `agent-memory migrate --url "
            "URL` creates one, as does the first run of an app that uses it"
        )
    # a read leaves the schema as it finds it (a read-only file or replica stays readable)
    store = create_store(url, auto_setup=not reads)
    checkpointer = create_checkpointer(
        url=url, auto_setup=not reads, **(checkpointer_options or {})
    )
    try:
        memory = AgentMemory(store, extractor=extractor, checkpointer=checkpointer, **options)
        if not reads:
            memory.setup()
        yield memory
    finally:
        close = getattr(checkpointer, "close", None)
        if callable(close):
            close()
        store.close()


def _scope(memory: Any, text: str, *, must_exist: bool = True) -> Any:
    from langgraph_checkpoint_agent_memory.memory import Scope

    scope = Scope.parse(text)
    if must_exist:
        known = memory.known_scopes()
        if not any(scope.covers(Scope.parse(k)) for k in known):
            raise CommandError(
                f"unknown scope {scope.key}: no memory is stored for it "
                "(`agent-memory scopes` lists the scopes)"
            )
    return scope


def _extractor(args: argparse.Namespace) -> Any:
    if not getattr(args, "model", None):
        return None
    from langgraph_checkpoint_agent_memory.memory.extract import chat_model

    return chat_model(args.model)


def _fact_dict(f: Any) -> dict[str, Any]:
    return {"key": f.key, **asdict(f)}


# -- commands ------------------------------------------------------------------------------


def _cmd_demo(args: argparse.Namespace) -> int:
    from langgraph_checkpoint_agent_memory.demo import run_demo

    url = resolve_url(args.url)
    if url.startswith("sqlite:///"):
        path = Path(url.removeprefix("sqlite:///"))
        if args.reset:
            for suffix in ("", "-wal", "-shm"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)
        path.parent.mkdir(parents=True, exist_ok=True)
    run_demo(
        url,
        model=args.model,
        console=_console(args),
        explicit_url=bool(args.url or os.environ.get(urls.URL_ENV)),
    )
    return 0


def _cmd_scopes(args: argparse.Namespace) -> int:
    with _memory(args, reads=True) as memory:
        stats = memory.scopes()

    def render(out: Any) -> None:
        from rich.table import Table

        if not stats:
            out.print("No scopes yet.")
            return
        table = Table(title=f"{len(stats)} scope(s)")
        columns = ("facts", "history", "episodes", "pending", "parked", "failed")
        table.add_column("scope")
        for c in columns:
            table.add_column(c, justify="right")
        for scope, counts in sorted(stats.items()):
            table.add_row(scope, *(str(counts[c]) for c in columns))
        out.print(table)

    _emit(args, stats, render)
    return 0


def _cmd_facts(args: argparse.Namespace) -> int:
    with _memory(args, reads=True) as memory:
        scope = _scope(memory, args.scope)
        facts = memory.history(scope) if args.all else memory.facts(scope)

    def render(out: Any) -> None:
        from rich.table import Table

        from langgraph_checkpoint_agent_memory.memory.recall import day

        table = Table(title=f"{'all facts' if args.all else 'current facts'} of {scope.key}")
        for c in ("attribute", "value", "statement", "since", "until", "confirmed", "pinned"):
            table.add_column(c)
        for f in facts:
            table.add_row(
                f.attribute,
                f.value,
                f.statement,
                day(f.valid_from),
                day(f.valid_to) if f.valid_to else "",
                str(f.confirmations),
                "yes" if f.pinned else "",
            )
        out.print(table)

    _emit(args, [_fact_dict(f) for f in facts], render)
    return 0


def _cmd_episodes(args: argparse.Namespace) -> int:
    with _memory(args, reads=True) as memory:
        scope = _scope(memory, args.scope)
        episodes = memory.episodes(scope, status=args.status)

    def render(out: Any) -> None:
        from rich.table import Table

        from langgraph_checkpoint_agent_memory.memory.recall import day

        table = Table(title=f"episodes of {scope.key}")
        for c in ("when", "status", "thread", "summary or first words"):
            table.add_column(c)
        for e in episodes:
            first = e.messages[0]["content"] if e.messages else ""
            table.add_row(day(e.occurred_at), e.status, e.thread_id or "", e.summary or first)
        out.print(table)

    _emit(args, [{"key": e.key, **asdict(e)} for e in episodes], render)
    return 0


def _cmd_context(args: argparse.Namespace) -> int:
    with _memory(args, reads=True) as memory:
        scope = _scope(memory, args.scope)
        recalled = memory.recall(scope, args.query, budget_tokens=args.budget)
    data = {
        "scope": scope.key,
        "query": args.query,
        "tokens": recalled.tokens,
        "context": recalled.text,
    }
    _emit(args, data, lambda out: out.print(recalled.text or "(nothing to inject)"))
    return 0


def _cmd_erase(args: argparse.Namespace) -> int:
    with _memory(args) as memory:
        scope = _scope(memory, args.scope)
        if not args.yes:
            if not sys.stdin.isatty():
                raise CommandError("erase needs --yes when not run on a terminal")
            answer = input(f"Erase all memory of {scope.key} (and narrower scopes)? [y/N] ")
            if answer.strip().lower() not in ("y", "yes"):
                print("Nothing erased.")
                return 1
        counts = memory.erase(scope)

    def render(out: Any) -> None:
        out.print(f"Erased {scope.key}:")
        for table, n in counts.items():
            out.print(f"  {table}: {n}")

    _emit(args, {"scope": scope.key, "removed": counts}, render)
    return 0


def _cmd_consolidate(args: argparse.Namespace) -> int:
    from langgraph_checkpoint_agent_memory.memory import Report, Scope

    with _memory(args, extractor=_extractor(args)) as memory:
        only = Scope.parse(args.scope) if args.scope else None
        pending = sum(
            s["pending"]
            for k, s in memory.scopes().items()
            if only is None or only.covers(Scope.parse(k))
        )
        total = Report()
        with _progress(args, "consolidating", pending or None) as advance:
            while True:
                report = memory.consolidate(only, max_jobs=1)
                if not report.jobs:
                    break
                total.jobs += report.jobs
                advance(sum(j.episodes for j in report.jobs))
                if report.jobs[-1].status != "completed" and only is not None:
                    break
    data: dict[str, Any] = dict(total.as_dict())
    data["errors"] = [j.error for j in total.jobs if j.error]

    def render(out: Any) -> None:
        out.print(
            f"{data['completed']} job(s) completed, {data['failed']} failed; "
            f"{data['episodes']} episode(s); facts: {data['added']} added, "
            f"{data['confirmed']} confirmed, {data['superseded']} superseded"
        )
        for error in data["errors"]:
            out.print(f"  failed: {error}")

    _emit(args, data, render)
    return 1 if data["failed"] else 0


def _cmd_decay(args: argparse.Namespace) -> int:
    with _memory(args) as memory:
        scope = _scope(memory, args.scope) if args.scope else None
        removed = memory.decay(scope)
    _emit(
        args,
        {"deleted": removed},
        lambda out: out.print(f"{removed} decayed item(s) deleted"),
    )
    return 0


def _size(n: int) -> str:
    """Bytes for people: ``512 B``, ``48.2 kB``, ``3.1 MB``."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def _when(ts: float | None, never: str = "") -> str:
    from datetime import datetime, timezone

    if ts is None:
        return never
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%d %H:%M")


def _cmd_threads(args: argparse.Namespace) -> int:
    from langgraph_checkpoint_agent_memory.factory import create_checkpointer

    url = resolve_url(args.url)
    infos: list[Any] = []
    if "checkpoint" in _installed(url):
        saver: Any = create_checkpointer(url=url, auto_setup=False)
        try:
            infos = saver.threads(sort=args.sort, limit=args.limit or None)
        finally:
            saver.close()

    def render(out: Any) -> None:
        from rich.table import Table

        if not infos:
            out.print("No threads.")
            return
        more = f"; the first {args.limit} by {args.sort}" if len(infos) == args.limit else ""
        table = Table(title=f"{len(infos)} thread(s), {_size(sum(i.bytes for i in infos))}{more}")
        for c in ("thread", "checkpoints", "stored", "last active", "expires", "status"):
            table.add_column(c, justify="right" if c in ("checkpoints", "stored") else "left")
        for i in infos:
            table.add_row(
                i.thread_id,
                str(i.checkpoints),
                _size(i.bytes),
                _when(i.last_active),
                _when(i.expires_at, never="never"),
                i.status,
            )
        out.print(table)

    _emit(args, [i.as_dict() for i in infos], render)
    return 0


def _cmd_sweep(args: argparse.Namespace) -> int:
    options = {"strategy": args.strategy, "keep_last": args.keep_last}
    if args.dry_run:
        return _sweep_dry_run(args, options)
    with _memory(args, checkpointer_options=options) as memory:
        items = memory.store.sweep()
        sweep = getattr(memory.checkpointer, "sweep", None)
        threads = list(sweep()) if callable(sweep) else []
    data = {"store_items": items, "threads": threads}
    _emit(
        args,
        data,
        lambda out: out.print(
            f"{items} expired store item(s) and {len(threads)} expired thread(s) removed"
        ),
    )
    return 0


def _sweep_dry_run(args: argparse.Namespace, options: dict[str, Any]) -> int:
    """What ``sweep`` would remove and free now, read without a lock or a write."""
    import time

    from langgraph_checkpoint_agent_memory.db.store import expired_stats_plan
    from langgraph_checkpoint_agent_memory.factory import create_checkpointer, create_store

    url = resolve_url(args.url)
    installed = _installed(url)
    items, item_bytes = 0, 0
    if "store" in installed:
        store = create_store(url, auto_setup=False)
        try:
            items, item_bytes = store.run_plan(expired_stats_plan(store.statements, time.time()))
        finally:
            store.close()
    threads: list[dict[str, Any]] = []
    removed, thread_bytes = 0, 0
    if "checkpoint" in installed:
        saver: Any = create_checkpointer(url=url, auto_setup=False, **options)
        try:
            preview = saver.sweep_preview()
        finally:
            saver.close()
        threads = preview.as_dict()["threads"]
        removed, thread_bytes = preview.checkpoints_removed, preview.bytes_freed
    data = {
        "dry_run": True,
        **options,
        "store_items": items,
        "threads": [t["thread_id"] for t in threads],
        "thread_details": threads,
        "checkpoints_removed": removed,
        "store_bytes_freed": item_bytes,
        "checkpoint_bytes_freed": thread_bytes,
        "bytes_freed": item_bytes + thread_bytes,
    }

    def render(out: Any) -> None:
        from rich.table import Table

        verb = "delete" if args.strategy == "delete" else f"prune to their last {args.keep_last}"
        out.print(
            f"A sweep now would remove {items} expired store item(s) ({_size(item_bytes)}) "
            f"and {verb} {len(threads)} expired thread(s) ({removed} checkpoint(s), "
            f"{_size(thread_bytes)}): {_size(item_bytes + thread_bytes)} freed. "
            "Nothing was changed."
        )
        if threads:
            table = Table()
            for c in ("thread", "action", "expired", "checkpoints", "removed", "freed"):
                table.add_column(c)
            for t in threads:
                table.add_row(
                    t["thread_id"],
                    t["action"],
                    _when(t["expires_at"]),
                    str(t["checkpoints"]),
                    str(t["checkpoints_removed"]),
                    _size(t["bytes_freed"]),
                )
            out.print(table)

    _emit(args, data, render)
    return 0


def _cmd_jobs(args: argparse.Namespace) -> int:
    from langgraph_checkpoint_agent_memory.memory import Scope

    statuses = ["completed", "failed", "parked"] if args.all else ["failed", "parked"]
    with _memory(args, reads=True) as memory:
        retried = None
        if args.retry:
            retried = memory.retry(Scope.parse(args.scope) if args.scope else None)
        jobs = memory.jobs(statuses, limit=args.limit)

    def render(out: Any) -> None:
        from rich.table import Table

        from langgraph_checkpoint_agent_memory.memory.recall import day

        if retried is not None:
            out.print(f"{retried} parked episode(s) queued again")
        table = Table(title=f"{len(jobs)} job(s)")
        for c in ("finished", "scope", "status", "attempt", "episodes", "error"):
            table.add_column(c)
        for j in jobs:
            table.add_row(
                day(j["finished_at"]),
                j["scope"],
                j["status"],
                str(j["attempt"]),
                str(len(j["episodes"])),
                (j["error"] or "")[:120],
            )
        out.print(table)

    _emit(args, {"retried": retried, "jobs": jobs}, render)
    return 0


def _cmd_worker(args: argparse.Namespace) -> int:
    import signal

    intervals = {
        f"{name}_every_seconds": value
        for name in ("consolidate", "decay", "sweep")
        if (value := getattr(args, f"{name}_every")) is not None
    }
    with _memory(args, extractor=_extractor(args), **intervals) as memory:
        worker = memory.worker()
        if args.once:
            stats = worker.run_once()
        else:
            signal.signal(signal.SIGTERM, lambda *_: worker.stop(timeout=0))
            print(
                f"agent-memory worker on {urls.mask_url(resolve_url(args.url))}: "
                "Ctrl-C or SIGTERM stops it",
                file=sys.stderr,
            )
            try:
                worker.run_forever()
            except KeyboardInterrupt:
                pass
            stats = worker.stats
    data = asdict(stats)
    _emit(
        args,
        data,
        lambda out: out.print(
            f"{stats.rounds} round(s): {stats.consolidated} episode(s) consolidated, "
            f"{stats.decayed} decayed, {stats.swept} swept, {len(stats.errors)} error(s)"
        ),
    )
    return 0


def _cmd_migrate(args: argparse.Namespace) -> int:
    from langgraph_checkpoint_agent_memory.db.migrations import COMPONENTS, migrate
    from langgraph_checkpoint_agent_memory.factory import create_store

    url = resolve_url(args.url)
    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    store = create_store(url, auto_setup=False)
    try:
        applied = migrate(store.db, COMPONENTS)
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


# -- the parser ----------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agent-memory",
        description="Inspect and operate the memory of LangGraph agents.",
        epilog="SCOPE is written user=alice,agent=support (keys: user, agent, workflow).",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    def command(name: str, help: str, func: Callable[[argparse.Namespace], int]) -> Any:
        p = commands.add_parser(name, help=help, description=help)
        p.set_defaults(func=func)
        if name != "config":
            p.add_argument(
                "--url",
                help=f"database URL (default: ${urls.URL_ENV}, else {default_url()})",
            )
        if name != "demo":
            p.add_argument("--json", action="store_true", help="print JSON for scripts")
        return p

    demo = command("demo", "run the scripted multi-session demo", _cmd_demo)
    demo.add_argument("--reset", action="store_true", help="delete the SQLite file first")
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
    context.add_argument("--budget", type=int, default=None, help="token budget")
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
    sweep.add_argument(
        "--strategy",
        choices=["delete", "keep_latest"],
        default="delete",
        help="what to do with an expired thread: delete it (default) or prune it to its last "
        "--keep-last checkpoints; use the app's strategy",
    )
    sweep.add_argument(
        "--keep-last",
        type=int,
        default=1,
        metavar="N",
        help="with --strategy keep_latest: checkpoints kept per namespace (default 1)",
    )
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
        "--limit", type=int, default=50, metavar="N", help="at most N threads (0: all)"
    )
    jobs = command("jobs", "failed and parked consolidation jobs", _cmd_jobs)
    jobs.add_argument("--retry", action="store_true", help="queue parked episodes again")
    jobs.add_argument("--scope", help="with --retry: only this SCOPE")
    jobs.add_argument("--all", action="store_true", help="completed jobs too")
    jobs.add_argument("--limit", type=int, default=50)
    worker = command("worker", "run the background worker in the foreground", _cmd_worker)
    worker.add_argument("--once", action="store_true", help="one round, then exit")
    worker.add_argument("--model", help="provider:name of the extractor's chat model")
    for name, default in (("consolidate", 30), ("decay", 3600), ("sweep", 300)):
        worker.add_argument(
            f"--{name}-every",
            type=float,
            metavar="SECONDS",
            help=f"seconds between {name} rounds (default: config.memory.{name}_every_seconds "
            f"or {default})",
        )
    command("migrate", "apply schema migrations", _cmd_migrate)

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
    except CommandError as exc:
        print(f"agent-memory {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except (ConfigurationError, ImportError, ValueError) as exc:
        print(f"agent-memory {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except AgentMemoryError as exc:  # an unreachable database and the like
        print(f"agent-memory {args.command}: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
