"""``agent-memory stats``: the figures an operator watches, read in a few statements that
lock and write nothing: the consolidation backlog, parked and failed work, threads by
expiry, the data keys kept beside the data and those erases still owe, and the database's
size per component."""

from __future__ import annotations

import argparse
import time
from typing import Any

from langgraph_checkpoint_agent_memory.cli.common import _emit, _installed, existing, resolve_url
from langgraph_checkpoint_agent_memory.cli.retention import _size, _when


def _cmd_stats(args: argparse.Namespace) -> int:
    from langgraph_checkpoint_agent_memory.db.health import sizes_plan, thread_counts_plan
    from langgraph_checkpoint_agent_memory.db.keys import count_plan
    from langgraph_checkpoint_agent_memory.db.memory import (
        MemorySql,
        backlog_plan,
        failures_plan,
        owed_count_plan,
    )
    from langgraph_checkpoint_agent_memory.factory import create_store

    url = resolve_url(args.url)
    installed = _installed(url)
    now = time.time()
    data: dict[str, Any] = {"now": now, "backlog": None, "jobs": None, "threads": None}
    data["keys"] = _keystore()
    data["erasures"] = None
    # nothing is set up or migrated; a SQLite file that does not exist is not created (and,
    # opened for writing though only read, its WAL files are removed again at close)
    store = create_store(url, auto_setup=False, **existing(url))
    try:
        if "memory" in installed:
            sql = MemorySql(store.dialect, store.statements)
            backlog = store.run_plan(backlog_plan(sql, now))
            data["backlog"] = {
                "pending_episodes": backlog.pending,
                "scopes": backlog.scopes,
                "oldest_pending_at": backlog.oldest_at,
                "oldest_pending_age_seconds": backlog.oldest_age,
            }
            data["jobs"] = store.run_plan(failures_plan(sql))
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
            data["keys"]["in_data_database"] = store.run_plan(count_plan(store.dialect))
        data["keys"]["beside_data"] = bool(data["keys"]["in_data_database"])
        if "am_memory_erasures" in sizes.tables:
            sql = MemorySql(store.dialect, store.statements)
            data["erasures"] = {"owed_keys": store.run_plan(owed_count_plan(sql))}
    finally:
        store.close()
    _emit(args, data, lambda out: _render(out, data))
    return 0


def _keystore() -> dict[str, Any]:
    """Where the environment keeps the data keys: ``keystore`` is ``None`` when it turns
    no encryption on, ``"data database"`` for the default key store, else the key store's
    URL (password masked). ``in_data_database`` and ``beside_data`` are filled from the
    data's database: keys there are in every backup of it, which an erase does not reach."""
    from langgraph_checkpoint_agent_memory.db import url as urls
    from langgraph_checkpoint_agent_memory.factory import resolve_encryption

    setting = resolve_encryption(None)
    where = None
    if setting is not None:
        where = urls.mask_url(setting.keystore_url) if setting.keystore_url else "data database"
    return {"keystore": where, "in_data_database": None, "beside_data": False}


def _ago(seconds: float) -> str:
    """A wait for people: ``45 s``, ``12 min``, ``3.5 h``, ``2.0 d``."""
    for unit, scale in (("d", 86400), ("h", 3600)):
        if seconds >= scale:
            return f"{seconds / scale:.1f} {unit}"
    return f"{seconds / 60:.0f} min" if seconds >= 60 else f"{seconds:.0f} s"


def _known(n: int | None) -> str:
    return "unknown" if n is None else _size(n)


def _render(out: Any, data: dict[str, Any]) -> None:
    from rich.table import Table

    from langgraph_checkpoint_agent_memory.db.health import COMPONENT_TABLES

    figures = Table(title="agent memory health", show_header=False)
    figures.add_column("figure")
    figures.add_column("value", justify="right")
    backlog, jobs, threads = data["backlog"], data["jobs"], data["threads"]
    if backlog is None:
        figures.add_row("consolidation", "no agent memory tables")
    else:
        oldest = backlog["oldest_pending_at"]
        figures.add_row(
            "pending episodes", f"{backlog['pending_episodes']} in {backlog['scopes']} scope(s)"
        )
        figures.add_row(
            "oldest pending",
            "none"
            if oldest is None
            else f"{_when(oldest)} ({_ago(backlog['oldest_pending_age_seconds'])} ago)",
        )
        figures.add_row("parked episodes", str(jobs["parked_episodes"]))
        figures.add_row("failed jobs", str(jobs["failed_jobs"]))
        figures.add_row("parked jobs", str(jobs["parked_jobs"]))
    if threads is None:
        figures.add_row("threads", "no checkpointer tables")
    else:
        figures.add_row("threads", str(threads["total"]))
        figures.add_row("expired threads", str(threads["expired"]))
        figures.add_row(
            f"expiring within {_ago(threads['within_seconds'])}", str(threads["expiring"])
        )
    keys, erasures = data["keys"], data["erasures"]
    if keys["beside_data"]:
        figures.add_row(
            "data keys in this database",
            f"{keys['in_data_database']}: its backups hold them, so an erase does not reach "
            "them (move them to a key store of their own)",
        )
    if erasures is not None:
        figures.add_row("data keys erases owe", str(erasures["owed_keys"]))
    out.print(figures)
    size = data["size"]
    sizes = Table(title=f"database size ({size['measured_by'] or 'per table unknown'})")
    sizes.add_column("component")
    sizes.add_column("tables", justify="right")
    sizes.add_column("size", justify="right")
    for name, n in size["components"].items():
        count = sum(t.name in size["tables"] for t in COMPONENT_TABLES[name])
        sizes.add_row(name, str(count), _known(n))
    sizes.add_row("total", str(len(size["tables"])), _known(size["total_bytes"]))
    if size["file_bytes"] is not None:
        sizes.add_row("file", "", _size(size["file_bytes"]))
    out.print(sizes)
