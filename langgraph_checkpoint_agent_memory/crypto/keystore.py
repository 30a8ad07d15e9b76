"""Where wrapped data keys live: the ``am_keys`` table of a database.

By default the table is in the data's own database (the saver's or the store's). With
``AGENT_MEMORY_KEYSTORE_URL`` (or ``Encryption(keystore_url=...)``) it is in a database of
its own, so a backup of the data holds no key, and erasing a scope (which deletes its key
there) makes the scope unreadable in every earlier backup of the data. In-memory savers keep
their keys in a private in-memory SQLite database.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from langgraph_checkpoint_agent_memory.db import url as urls
from langgraph_checkpoint_agent_memory.db.database import Database, Plan, T
from langgraph_checkpoint_agent_memory.db.dialect import Dialect
from langgraph_checkpoint_agent_memory.db.first_use import SchemaOnFirstUse
from langgraph_checkpoint_agent_memory.db.migrations import KEYS, Component

#: The environment variable naming the key store's own database.
KEYSTORE_URL_ENV = "AGENT_MEMORY_KEYSTORE_URL"


class KeyStore(SchemaOnFirstUse):
    """The key table of one database, created on first use (``auto_setup``).

    Args:
        db: The database that keeps the keys.
        owned: Whether closing the key store closes ``db`` (a database opened for it).
        auto_setup: Create the table on first use.
    """

    components: tuple[Component, ...] = (KEYS,)

    def __init__(self, db: Database[Any], *, owned: bool, auto_setup: bool = True) -> None:
        self.db = db
        self.dialect: Dialect = db.dialect
        self.owned = owned
        self.auto_setup = auto_setup
        self._clock: Callable[[], float] = time.time

    def run(self, plan: Plan[T]) -> T:
        """Run a plan of :mod:`..db.keys` (creating the table on first use)."""
        return self._run(plan)

    async def arun(self, plan: Plan[T]) -> T:
        """Async :meth:`run`."""
        return await self._arun(plan)

    def describe(self) -> str:
        """Where the keys are (password masked)."""
        return self.db.describe()

    def close(self) -> None:
        """Close the database when it was opened for the key store."""
        if self.owned:
            self.db.close()


def open_database(url: str) -> Database[Any]:
    """A database for ``url`` (``sqlite:///...``, ``postgresql://...``, ``hana://...``)."""
    target = urls.parse(urls.as_url(url, KEYSTORE_URL_ENV), KEYSTORE_URL_ENV)
    if target.kind == "sqlite":
        from langgraph_checkpoint_agent_memory.db.sqlite import SQLiteDatabase

        return SQLiteDatabase(target.options["path"])
    if target.kind == "postgresql":
        from langgraph_checkpoint_agent_memory.db.postgres import PostgresDatabase

        return PostgresDatabase(target.url)
    from langgraph_checkpoint_agent_memory.db.hana import HanaDatabase

    return HanaDatabase(target.options, url=target.url)


def memory_keystore() -> KeyStore:
    """A key store in a private in-memory database (for in-memory savers)."""
    from langgraph_checkpoint_agent_memory.db.sqlite import SQLiteDatabase

    return KeyStore(SQLiteDatabase(":memory:"), owned=True)
