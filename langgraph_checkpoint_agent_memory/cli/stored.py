"""Agent memory as stored, read with the database alone: what ``scopes``, ``facts`` and
``episodes`` show. They load neither the store nor the façade (which load LangChain and made a
command take over a second) and run memory's own reading plans (:mod:`..memory.reading`), so
they show what :class:`~..memory.AgentMemory` returns; an encrypted database is read through
the store, which holds the data keys."""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from langgraph_checkpoint_agent_memory.cli import common
from langgraph_checkpoint_agent_memory.db import memory as sqlm
from langgraph_checkpoint_agent_memory.db.database import Database
from langgraph_checkpoint_agent_memory.memory import model, reading


@dataclass(frozen=True)
class StoredMemory:
    """The read methods of :class:`~..memory.AgentMemory` the commands use, on a database.

    Args:
        db: The database, which holds agent memory's tables.
        sql: Memory's statements for its dialect and the store's recorded shard rule.
    """

    db: Database[Any]
    sql: sqlm.MemorySql

    def clock(self) -> float:
        return time.time()

    def prefix(self, scope: model.ScopeLike, kind: str) -> str:
        return sqlm.ns(model.namespace(self.sql.root, model.Scope.of(scope), kind))

    def scopes(self) -> dict[str, dict[str, int]]:
        return self.db.run(sqlm.stats_plan(self.sql, self.sql.root, self.clock()))

    def known_scopes(self) -> set[str]:
        return self.db.run(sqlm.known_scopes_plan(self.sql, self.sql.root))

    def facts(self, scope: model.ScopeLike) -> list[model.Fact]:
        return self.db.run(reading.facts_plan(self, scope, None))

    def history(self, scope: model.ScopeLike) -> list[model.Fact]:
        return self.db.run(reading.history_plan(self, scope, None, None))

    def episodes(self, scope: model.ScopeLike, *, status: str | None = None) -> list[model.Episode]:
        return self.db.run(reading.episodes_plan(self, scope, status))


@contextmanager
def stored_memory(args: argparse.Namespace) -> Iterator[Any]:
    """The memory at ``--url`` to read: a :class:`StoredMemory`, or when the data is encrypted
    ``open_memory(args, reads=True)`` (see the module); errors as ``open_memory``'s."""
    from langgraph_checkpoint_agent_memory.db import migrations
    from langgraph_checkpoint_agent_memory.db.marks import marked_plan, refused
    from langgraph_checkpoint_agent_memory.db.store import StoreStatements
    from langgraph_checkpoint_agent_memory.factory import open_database, resolve_encryption
    from langgraph_checkpoint_agent_memory.memory.settings import MemorySettings

    if getattr(args, "scope", None):  # a malformed scope is a usage error, whatever the URL
        model.Scope.parse(args.scope)
    url = common.resolve_url(args.url)
    if resolve_encryption(None) is not None:
        with common.open_memory(args, reads=True) as memory:
            yield memory
        return
    root = MemorySettings.resolve({}).namespace_root
    # read only: a read leaves the database as it finds it (a read-only file stays readable)
    db = open_database(url, common.existing(url, "ro"))
    try:
        if "memory" not in db.run(migrations.installed_plan(db.dialect)):
            raise common.no_memory(url)
        if db.run(marked_plan(db.dialect)):
            raise refused()
        depth = db.run(migrations.recorded_shard_depth_plan(db.dialect))
        yield StoredMemory(db, sqlm.MemorySql(db.dialect, StoreStatements(db.dialect, depth), root))
    finally:
        db.close()
