"""The ``agent-memory`` commands on stored threads: ``threads`` and ``sweep``
(with ``--dry-run``)."""

from __future__ import annotations

import argparse
from typing import Any

from langgraph_checkpoint_agent_memory.cli import common, output
from langgraph_checkpoint_agent_memory.cli.progress import progress


def cmd_threads(args: argparse.Namespace) -> int:
    from langgraph_checkpoint_agent_memory.factory import create_checkpointer

    url = common.resolve_url(args.url)
    infos: list[Any] = []
    if "checkpoint" in common.installed(url):
        saver: Any = create_checkpointer(url=url, auto_setup=False, **common.existing(url))
        with saver:
            infos = saver.threads(sort=args.sort, limit=args.limit or None)

    def render(out: Any) -> None:
        if not infos:
            out.print("No threads.")
            return
        more = f"; the first {args.limit} by {args.sort}" if len(infos) == args.limit else ""
        table = output.table(
            f"{len(infos)} thread(s), {output.size(sum(i.bytes for i in infos))}{more}",
            "thread",
            ("checkpoints", "right"),
            ("stored", "right"),
            ("last active", "when"),
            ("expires", "when"),
            "status",
        )
        for i in infos:
            table.add_row(
                i.thread_id,
                str(i.checkpoints),
                output.size(i.bytes),
                output.when(i.last_active),
                output.when(i.expires_at, never="never"),
                i.status,
            )
        out.print(table)

    common.emit(args, [i.as_dict() for i in infos], render)
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    options = common.retention(args)
    if args.dry_run:
        return _sweep_dry_run(args, options)
    with common.open_memory(args, checkpointer_options=options) as memory:
        with progress(args, "removing expired store items", "items") as report:
            items = memory.store.sweep(on_progress=report)
        with progress(args, "removing expired threads", "threads") as report:
            threads = list(memory.checkpointer.sweep(on_progress=report))
    said = f"{items} expired store item(s) and {len(threads)} expired thread(s) removed"
    common.emit(args, {"store_items": items, "threads": threads}, lambda out: out.print(said))
    return 0


def _sweep_dry_run(args: argparse.Namespace, options: dict[str, Any]) -> int:
    """What ``sweep`` would remove and free now, read without a lock or a write."""
    import time

    from langgraph_checkpoint_agent_memory.db.store import expired_stats_plan
    from langgraph_checkpoint_agent_memory.factory import create_checkpointer, create_store

    url = common.resolve_url(args.url)
    installed = common.installed(url)
    items, item_bytes = 0, 0
    if "store" in installed:
        with create_store(url, auto_setup=False, **common.existing(url)) as store:
            items, item_bytes = store.run_plan(expired_stats_plan(store.statements, time.time()))
    threads: list[dict[str, Any]] = []
    removed, thread_bytes = 0, 0
    if "checkpoint" in installed:
        saver: Any = create_checkpointer(
            url=url, auto_setup=False, **common.existing(url), **options
        )
        with saver:
            preview = saver.sweep_preview()
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
        prune = args.strategy != "delete"
        to = f" to their last {options['keep_last']} checkpoint(s)" if prune else ""
        out.print(
            f"A sweep now would remove {items} expired store item(s) ({output.size(item_bytes)}) "
            f"and {'prune' if prune else 'delete'} {len(threads)} expired thread(s){to} "
            f"({removed} checkpoint(s), {output.size(thread_bytes)}): "
            f"{output.size(item_bytes + thread_bytes)} freed. "
            "Nothing was changed."
        )
        if threads:
            table = output.table(
                None, "thread", "action", ("expired", "when"), "checkpoints", "removed", "freed"
            )
            for t in threads:
                table.add_row(
                    t["thread_id"],
                    t["action"],
                    output.when(t["expires_at"]),
                    str(t["checkpoints"]),
                    str(t["checkpoints_removed"]),
                    output.size(t["bytes_freed"]),
                )
            out.print(table)

    common.emit(args, data, render)
    return 0
