"""The ``agent-memory`` commands on agent memory: demo, scopes, facts, episodes,
context, erase, consolidate, decay, jobs and worker."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from dataclasses import asdict
from typing import Any

from langgraph_checkpoint_agent_memory.cli import common, output
from langgraph_checkpoint_agent_memory.cli.progress import progress
from langgraph_checkpoint_agent_memory.db import url as urls
from langgraph_checkpoint_agent_memory.errors import ConfigurationError


def cmd_demo(args: argparse.Namespace) -> int:
    from langgraph_checkpoint_agent_memory.demo import DEMO_URL, run_demo

    # the demo's own database, never AGENT_MEMORY_URL's: it may be an app's
    url = DEMO_URL if args.url is None else args.url
    console = common.console(args)
    if args.url is None and os.environ.get(urls.URL_ENV):
        console.print(f"{urls.URL_ENV} is left alone: the demo writes only to its own database.")
    run_demo(url, model=args.model, console=console, reset=args.reset)
    return 0


def cmd_scopes(args: argparse.Namespace) -> int:
    from langgraph_checkpoint_agent_memory.cli.stored import stored_memory

    with stored_memory(args) as memory:
        stats = memory.scopes()

    def render(out: Any) -> None:
        if not stats:
            out.print("No scopes yet.")
            return
        columns = ("facts", "history", "episodes", "pending", "parked", "failed")
        table = output.table(f"{len(stats)} scope(s)", "scope", *((c, "right") for c in columns))
        for scope, counts in sorted(stats.items()):
            table.add_row(scope, *(str(counts[c]) for c in columns))
        out.print(table)

    common.emit(args, stats, render)
    return 0


def cmd_facts(args: argparse.Namespace) -> int:
    from langgraph_checkpoint_agent_memory.cli.stored import stored_memory

    with stored_memory(args) as memory:
        scope = common.known_scope(memory, args.scope)
        facts = memory.history(scope) if args.all else memory.facts(scope)

    def render(out: Any) -> None:
        table = output.table(
            f"{'all facts' if args.all else 'current facts'} of {scope.key}",
            "attribute",
            "value",
            "statement",
            ("since", "day"),
            ("until", "day"),
            "confirmed",
            "pinned",
        )
        for f in facts:
            table.add_row(
                f.attribute,
                f.value,
                f.statement,
                output.day(f.valid_from),
                output.day(f.valid_to) if f.valid_to else "",
                str(f.confirmations),
                "yes" if f.pinned else "",
            )
        out.print(table)

    common.emit(args, [common.fact_dict(f) for f in facts], render)
    return 0


def cmd_episodes(args: argparse.Namespace) -> int:
    from langgraph_checkpoint_agent_memory.cli.stored import stored_memory

    with stored_memory(args) as memory:
        scope = common.known_scope(memory, args.scope)
        episodes = memory.episodes(scope, status=args.status)

    def render(out: Any) -> None:
        table = output.table(
            f"episodes of {scope.key}",
            ("when", "day"),
            "status",
            "thread",
            "summary or first words",
        )
        for e in episodes:
            first = e.messages[0]["content"] if e.messages else ""
            table.add_row(
                output.day(e.occurred_at), e.status, e.thread_id or "", e.summary or first
            )
        out.print(table)

    common.emit(args, [{"key": e.key, **asdict(e)} for e in episodes], render)
    return 0


def cmd_context(args: argparse.Namespace) -> int:
    with common.open_memory(args, reads=True) as memory:
        scope = common.known_scope(memory, args.scope)
        recalled = memory.recall(scope, args.query, budget_tokens=args.budget)
    data = dict(scope=scope.key, query=args.query, tokens=recalled.tokens, context=recalled.text)
    common.emit(args, data, lambda out: out.print(recalled.text or "(nothing to inject)"))
    return 0


def cmd_erase(args: argparse.Namespace) -> int:
    with common.open_memory(args) as memory:
        scope = common.known_scope(memory, args.scope, must_exist=False)
        settled = 0
        if not common.stored(memory, scope):  # erased already: a retry may still owe its data keys
            settled = memory.settle_erasures()
            if not settled:
                raise common.unknown_scope(scope)
            counts = {"scopes": 0, "threads": 0, "keys": settled}
        else:
            if not args.yes:
                if not sys.stdin.isatty():  # a usage mistake: status 2
                    raise ConfigurationError("erase needs --yes when not run on a terminal")
                try:
                    answer = input(f"Erase all memory of {scope.key} (and narrower scopes)? [y/N] ")
                except EOFError:  # Ctrl-D: no answer is no
                    print()
                    answer = ""
                if answer.strip().lower() not in ("y", "yes"):
                    print("Nothing erased.")
                    return 1
            with progress(args, f"erasing {scope.key}", "parts") as report:
                counts = memory.erase(scope, on_progress=report)

    def render(out: Any) -> None:
        if settled:
            out.print(f"Nothing of {scope.key} is stored; settled {settled} owed key(s)")
            return
        out.print(f"Erased {scope.key}:")
        for table, n in counts.items():
            out.print(f"  {table}: {n}")

    common.emit(args, {"scope": scope.key, "removed": counts}, render)
    return 0


def cmd_consolidate(args: argparse.Namespace) -> int:
    from langgraph_checkpoint_agent_memory.memory import Report, Scope

    with common.open_memory(args, extractor=common.extractor(args)) as memory:
        only = Scope.parse(args.scope) if args.scope else None
        pending = sum(
            s["pending"]
            for k, s in memory.scopes().items()
            if only is None or only.covers(Scope.parse(k))
        )
        total = Report()
        with progress(args, "consolidating", "episodes") as shown:
            while True:
                report = memory.consolidate(only, max_jobs=1)
                if not report.jobs:
                    break
                total.jobs += report.jobs
                shown(sum(j.episodes for j in total.jobs), pending or None)
                if report.jobs[-1].status != "completed" and only is not None:
                    break
    data: dict[str, Any] = {**total.as_dict(), "errors": [j.error for j in total.jobs if j.error]}

    def render(out: Any) -> None:
        out.print(
            f"{data['completed']} job(s) completed, {data['failed']} failed; "
            f"{data['episodes']} episode(s); facts: {data['added']} added, "
            f"{data['confirmed']} confirmed, {data['superseded']} superseded"
        )
        for error in data["errors"]:
            out.print(f"  failed: {error}")

    common.emit(args, data, render)
    return 1 if data["failed"] else 0


def cmd_decay(args: argparse.Namespace) -> int:
    with common.open_memory(args) as memory:
        scope = common.known_scope(memory, args.scope) if args.scope else None
        removed = memory.decay(scope)
    common.emit(
        args, {"deleted": removed}, lambda out: out.print(f"{removed} decayed item(s) deleted")
    )
    return 0


def cmd_jobs(args: argparse.Namespace) -> int:
    from langgraph_checkpoint_agent_memory.memory import Scope

    statuses = ["completed", "failed", "parked"] if args.all else ["failed", "parked"]
    with common.open_memory(args, reads=True) as memory:
        only = Scope.parse(args.scope) if args.scope else None
        retried = memory.retry(only) if args.retry else None
        jobs = memory.jobs(statuses, limit=args.limit)

    def render(out: Any) -> None:
        if retried is not None:
            out.print(f"{retried} parked episode(s) queued again")
        table = output.table(
            f"{len(jobs)} job(s)",
            ("finished", "day"),
            "scope",
            "status",
            "attempt",
            "episodes",
            "error",
        )
        for j in jobs:
            table.add_row(
                output.day(j["finished_at"]),
                j["scope"],
                j["status"],
                str(j["attempt"]),
                str(len(j["episodes"])),
                (j["error"] or "")[:120],
            )
        out.print(table)

    common.emit(args, {"retried": retried, "jobs": jobs}, render)
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    import signal

    intervals = {
        f"{name}_every_seconds": value
        for name in ("consolidate", "decay", "sweep")
        if (value := getattr(args, f"{name}_every")) is not None
    }
    retention = common.retention(args)
    with common.open_memory(
        args, extractor=common.extractor(args), checkpointer_options=retention, **intervals
    ) as memory:
        worker = memory.worker()
        if args.once:
            stats = worker.run_once()
        else:
            signal.signal(signal.SIGTERM, lambda *_: worker.stop(timeout=0))
            print(
                f"agent-memory worker on {urls.mask_url(common.resolve_url(args.url))}: "
                "Ctrl-C or SIGTERM stops it",
                file=sys.stderr,
            )
            with contextlib.suppress(KeyboardInterrupt):
                worker.run_forever()
            stats = worker.stats
    said = (
        f"{stats.rounds} round(s): {stats.consolidated} episode(s) consolidated, "
        f"{stats.decayed} decayed, {stats.swept} swept, {stats.keys_destroyed} data "
        f"key(s) erases owed destroyed, {len(stats.errors)} error(s)"
    )
    common.emit(args, asdict(stats), lambda out: out.print(said))
    return 0
