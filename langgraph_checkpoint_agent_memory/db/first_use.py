"""Schema on first use: the saver, the store and the key store create or migrate their tables
(``setup()``) the first time they run a plan, or, with ``auto_setup`` off, find out what their
statements depend on; either way, a component of data checks whether the database is encrypted.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from langgraph_checkpoint_agent_memory.db import fork
from langgraph_checkpoint_agent_memory.db.database import Database, Plan, T, carry_plan
from langgraph_checkpoint_agent_memory.db.dialect import Dialect
from langgraph_checkpoint_agent_memory.db.distribution import detect_plan
from langgraph_checkpoint_agent_memory.db.marks import mark_statement, marked_plan, refused
from langgraph_checkpoint_agent_memory.db.migrations import Component, migrate_plan

_SETUP_LOCK = fork.module_lock(globals(), "_SETUP_LOCK", threading.Lock)


class SchemaOnFirstUse:
    """``setup()``/``asetup()``, run on first use unless ``auto_setup`` is off (saver, store)."""

    components: tuple[Component, ...]
    db: Database[Any]
    dialect: Dialect
    auto_setup: bool
    _clock: Callable[[], float]
    _setup_done: bool = False

    def setup(self) -> None:
        """Create or migrate the schema (idempotent, safe from several processes at once)."""
        self.db.run(self._setup_plan())
        self._setup_done = True

    async def asetup(self) -> None:
        await self.db.arun(self._setup_plan())
        self._setup_done = True

    #: The store's shard-key rule (``None``: owners without store tables).
    shard_depth: int | None = None
    #: Whether the owner's data is sealed at rest (``None``: the key store): marked at first use.
    encrypted: bool | None = None
    #: Whether this owner's first write still owes the mark.
    _mark_owed: bool = False

    #: Where the key store is this owner's database: setup checks the master key on it.
    key_check: Callable[[], Plan[None]] | None = None

    def _setup_plan(self) -> Plan[Any]:
        """What ``setup()`` runs: the components' migrations (an override adds its own)."""
        applied = yield from migrate_plan(
            self.dialect, self._clock(), self.components, self.shard_depth, self.encrypted
        )
        if self.key_check is not None:
            yield from self.key_check()
        return applied

    def _probe_plan(self) -> Plan[Any]:
        """The first use without ``auto_setup``: it creates nothing, and finds out what the
        statements depend on (distributed, encrypted; an override adds its own)."""
        yield from detect_plan(self.dialect)
        if self.encrypted is not None:
            marked = yield from marked_plan(self.dialect)
            if marked and not self.encrypted:
                raise refused()
            self._mark_owed = self.encrypted and not marked

    def _ready(self) -> None:
        if not self._setup_done:
            with _SETUP_LOCK:
                if not self._setup_done:
                    if self.auto_setup:
                        self.setup()
                    else:  # the schema is someone else's job; what kind of database is it?
                        self.db.run(self._probe_plan())
                        self._setup_done = True

    async def _aready(self) -> None:
        if not self._setup_done:
            if self.auto_setup:
                await self.asetup()
            else:
                await self.db.arun(self._probe_plan())
                self._setup_done = True

    def _run(self, plan: Plan[T]) -> T:
        """Run a plan on the database, creating the schema on first use."""
        self._ready()
        if not self._mark_owed:
            return self.db.run(plan)
        stored, value = self.db.run(carry_plan(mark_statement(self.dialect), plan))
        self._mark_owed = self._mark_owed and not stored
        return value

    async def _arun(self, plan: Plan[T]) -> T:
        await self._aready()
        if not self._mark_owed:
            return await self.db.arun(plan)
        stored, value = await self.db.arun(carry_plan(mark_statement(self.dialect), plan))
        self._mark_owed = self._mark_owed and not stored
        return value
