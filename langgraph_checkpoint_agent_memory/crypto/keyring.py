"""The keyring: data keys by owner and by id, unwrapped once and cached for
``recheck_seconds`` (a key another process destroyed stops sealing within that time)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, TypeVar

from langgraph_checkpoint_agent_memory.crypto.cipher import (
    DataKey,
    KeyProvider,
    new_key,
    new_key_id,
)
from langgraph_checkpoint_agent_memory.db import keys as sqlk
from langgraph_checkpoint_agent_memory.db import url as urls
from langgraph_checkpoint_agent_memory.db.database import Database, Plan, T
from langgraph_checkpoint_agent_memory.db.dialect import Dialect
from langgraph_checkpoint_agent_memory.db.first_use import SchemaOnFirstUse
from langgraph_checkpoint_agent_memory.db.migrations import KEYS, Component
from langgraph_checkpoint_agent_memory.errors import (
    DecryptionError,
    EncryptionError,
    KeyMissingError,
)

V = TypeVar("V")

#: Unwrapped keys kept in memory per keyring (least recently used leave first).
CACHE_KEYS = 10_000
LOOKUP_STRIPES = 64
ROTATE_BATCH = 500
#: Times a write carrying a new key is tried before the key is created on its own (each
#: loss means another process made the owner's key, and then it was destroyed meanwhile).
CARRY_ATTEMPTS = 3


class KeysNeeded(EncryptionError):
    """A plan met data keys not loaded (plans do no I/O): the call that ran it loads them
    (``owners`` by owner, created when ``create``; ``ids`` by id) and runs the plan again."""

    def __init__(
        self, owners: Iterable[str] = (), ids: Iterable[str] = (), create: bool = False
    ) -> None:
        self.owners, self.ids, self.create = list(owners), sorted(set(ids)), create
        super().__init__(
            f"data keys not loaded (owners {self.owners}, ids {self.ids}): the package's own "
            "calls load them from the key store"
        )


class Keyring:
    """Data keys of one key store, wrapped by one provider.

    Args:
        keystore: Where wrapped keys are kept.
        provider: What wraps them (:class:`~.cipher.MasterKeyProvider` or a KMS's).
        allow_plaintext: Whether readers accept rows written without encryption (the
            migration mode of ``agent-memory encrypt``).
        recheck_seconds: How long an owner's cached key is used before the key store is
            asked again.
        clock: Seconds now (tests pass a fake one).

    Example:
        ```python
        from langgraph_checkpoint_agent_memory.crypto import MasterKeyProvider, generate_master_key
        from langgraph_checkpoint_agent_memory.crypto.keyring import Keyring, memory_keystore

        keyring = Keyring(memory_keystore(), MasterKeyProvider([generate_master_key()]))
        key = keyring.key("thread:t1")
        assert keyring.by_id(key.key_id).owner == "thread:t1"
        ```
    """

    def __init__(
        self,
        keystore: KeyStore,
        provider: KeyProvider,
        *,
        allow_plaintext: bool = False,
        recheck_seconds: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.keystore, self.provider, self._clock = keystore, provider, clock
        self.allow_plaintext, self.recheck_seconds = allow_plaintext, recheck_seconds
        self._lock = threading.Lock()
        #: Threads missing the same owner's key look it up once (a step's writes race to it).
        self._lookups = [threading.Lock() for _ in range(LOOKUP_STRIPES)]
        self._inflight: dict[tuple[int, str], asyncio.Future[DataKey | None]] = {}
        self._by_owner: OrderedDict[str, tuple[DataKey, float]] = OrderedDict()
        self._by_id: OrderedDict[str, DataKey] = OrderedDict()
        #: Whether the provider unwraps the key store's keys (see :meth:`provider_check_plan`).
        self._provider_checked = False

    def cached(self, owner: str) -> DataKey | None:
        """``owner``'s key when the cache holds a fresh one (no I/O)."""
        with self._lock:
            entry = self._by_owner.get(owner)
            if entry is None or self._clock() - entry[1] > self.recheck_seconds:
                return None
            self._by_owner.move_to_end(owner)
            return entry[0]

    def cached_id(self, key_id: str) -> DataKey | None:
        with self._lock:
            return self._by_id.get(key_id)

    def _remember(self, key: DataKey, *, owner_checked: bool) -> DataKey:
        with self._lock:
            self._by_id[key.key_id] = key
            self._by_id.move_to_end(key.key_id)
            if owner_checked:
                self._by_owner[key.owner] = (key, self._clock())
                self._by_owner.move_to_end(key.owner)
            while len(self._by_id) > CACHE_KEYS:
                self._by_id.popitem(last=False)
            while len(self._by_owner) > CACHE_KEYS:
                self._by_owner.popitem(last=False)
        return key

    def forget(self, owners: Sequence[str]) -> None:
        with self._lock:
            for owner in owners:
                self._by_owner.pop(owner, None)
            for key_id in [k for k, v in self._by_id.items() if v.owner in owners]:
                del self._by_id[key_id]

    def _unwrapped(self, row: sqlk.KeyRow) -> DataKey:
        return DataKey(row.key_id, row.owner, self.provider.unwrap(row.wrapped, row.owner))

    def key_plan(
        self, owner: str, *, create: bool = True, likely_new: bool = False
    ) -> Plan[DataKey | None]:
        """``owner``'s key from the cache or the key store; created when missing and
        ``create`` (else ``None``). ``likely_new``: create without looking first (one round
        trip instead of two for a new owner; an existing key is returned all the same)."""
        if (found := self.cached(owner)) is not None:
            return found
        row = None if likely_new else (yield from sqlk.by_owner_plan(self.keystore.dialect, owner))
        if row is None:
            if not create:
                return None
            yield from self.provider_check_plan()
            fresh, key = self._fresh(owner)
            row = yield from sqlk.create_plan(self.keystore.dialect, fresh)
            if row.key_id == fresh.key_id:
                return self._remember(key, owner_checked=True)
        return self._remember(self._unwrapped(row), owner_checked=True)

    def provider_check_plan(self) -> Plan[None]:
        """Before this keyring wraps its first key, check that the provider unwraps a key the
        key store holds, so a wrong master key (or a rotation's new one alone) wraps nothing."""
        if self._provider_checked:
            return
        held = yield from sqlk.page_plan(self.keystore.dialect, "", 1)
        if held:
            try:
                self._unwrapped(held[0])
            except DecryptionError as exc:
                raise DecryptionError(
                    "the master key given cannot unwrap the data keys the key store "
                    f"({self.keystore.describe()}) holds, so no new key is wrapped with it: "
                    f"give the master key they were wrapped with ({exc})"
                ) from None
            self._provider_checked = True

    def _fresh(self, owner: str) -> tuple[sqlk.KeyRow, DataKey]:
        secret = new_key()
        row = sqlk.KeyRow(new_key_id(), owner, self.provider.wrap(secret, owner), time.time())
        return row, DataKey(row.key_id, owner, secret)

    def sealing_plan(
        self, owner: str, write: Callable[[DataKey], Plan[T]], *, likely_new: bool = False
    ) -> Plan[tuple[DataKey | None, T]]:
        """``write`` sealed with ``owner``'s key, a new key stored in the write's own round
        trip (:func:`..db.keys.carrying_plan`), sealed again if another process made one
        meanwhile; the key written with (``None``: never stored) and the write's value."""
        dialect = self.keystore.dialect
        # where the dialect cannot carry a new key in the write, it is made first (below)
        for _ in range(CARRY_ATTEMPTS if sqlk.carries(dialect) else 0):
            found = yield from self.key_plan(owner, create=False, likely_new=likely_new)
            if found is not None:
                return found, (yield from write(found))
            yield from self.provider_check_plan()
            row, key = self._fresh(owner)
            try:
                stored, value = yield from sqlk.carrying_plan(dialect, row, write(key))
            except sqlk.KeyTaken:
                likely_new = False  # the winner's key, then the write again
                continue
            return (self._remember(key, owner_checked=True) if stored else None), value
        made = yield from self.key_plan(owner, likely_new=likely_new)
        assert made is not None
        return made, (yield from write(made))

    def by_id_plan(self, key_id: str) -> Plan[DataKey]:
        if (found := self.cached_id(key_id)) is not None:
            return found
        row = yield from sqlk.by_id_plan(self.keystore.dialect, key_id)
        if row is None:
            raise KeyMissingError(
                f"data key {key_id} is not in the key store ({self.keystore.describe()}): "
                "its scope or thread was erased, so what it sealed is unreadable by design, "
                "or this is not the key store the data was written with",
                key_id,
            )
        return self._remember(self._unwrapped(row), owner_checked=False)

    def destroy_plan(self, owners: Sequence[str]) -> Plan[list[str]]:
        """Destroy the keys of ``owners``; the ids of the keys destroyed."""
        unique = sorted(set(owners))
        rows = yield from sqlk.destroy_plan(self.keystore.dialect, unique)
        for row in rows:
            self.provider.destroy(row.wrapped, row.owner)
        self.forget(unique)
        return [r.key_id for r in rows]

    def rotate_plan(
        self, on_progress: Callable[[int, int | None], None] | None = None
    ) -> Plan[int]:
        """Re-wrap every data key not under the provider's current master key; how many
        were. Readers keep working throughout (the provider unwraps under old and new)."""
        is_current = getattr(self.provider, "is_current", None)
        after, done, seen, total = "", 0, 0, None
        if on_progress is not None:
            total = yield from sqlk.count_plan(self.keystore.dialect)
            on_progress(0, total)
        while True:
            page = yield from sqlk.page_plan(self.keystore.dialect, after, ROTATE_BATCH)
            if not page:
                return done
            rewrapped = [
                (r.key_id, self.provider.wrap(self.provider.unwrap(r.wrapped, r.owner), r.owner))
                for r in page
                if is_current is None or not is_current(r.wrapped)
            ]
            done += yield from sqlk.rewrap_plan(self.keystore.dialect, rewrapped)
            after = page[-1].key_id
            seen += len(page)
            if on_progress is not None:
                on_progress(seen, max(seen, total or 0))

    def key(self, owner: str, *, likely_new: bool = False) -> DataKey:
        """``owner``'s data key, created on first use.

        Args:
            owner: ``"store:<shard key>"`` or ``"thread:<thread id>"``.
            likely_new: Create without looking first (see :meth:`key_plan`).
        """
        if (found := self.cached(owner)) is not None:
            return found
        with self._lookups[hash(owner) % LOOKUP_STRIPES]:
            key = self.keystore.run(self.key_plan(owner, likely_new=likely_new))
        assert key is not None
        return key

    async def akey(self, owner: str, *, likely_new: bool = False) -> DataKey:
        """Async :meth:`key` (tasks of one loop missing an owner's key look it up once)."""
        if (found := self.cached(owner)) is not None:
            return found

        async def lookup() -> tuple[DataKey, DataKey]:
            key = await self.keystore.arun(self.key_plan(owner, likely_new=likely_new))
            assert key is not None
            return key, key

        async def reuse(key: DataKey) -> DataKey:
            return key

        return await self._looked_up_once(owner, lookup, reuse)

    async def _looked_up_once(
        self,
        owner: str,
        lookup: Callable[[], Awaitable[tuple[DataKey | None, V]]],
        reuse: Callable[[DataKey], Awaitable[V]],
    ) -> V:
        """Tasks of one loop missing ``owner``'s key look it up once: the first runs
        ``lookup``; the others ``reuse`` its key, or run ``lookup`` if it failed."""
        loop = asyncio.get_running_loop()
        slot = (id(loop), owner)
        pending = self._inflight.get(slot)
        if pending is not None and (shared := await asyncio.shield(pending)) is not None:
            return await reuse(shared)
        future: asyncio.Future[DataKey | None] = loop.create_future()
        self._inflight[slot] = future
        key: DataKey | None = None
        try:
            key, value = await lookup()
        finally:
            future.set_result(key)
            if self._inflight.get(slot) is future:
                del self._inflight[slot]
        return value

    def sealed(
        self,
        owner: str,
        write: Callable[[DataKey], Plan[T]],
        run: Callable[[Plan[Any]], Any],
        *,
        database: Database[Any] | None = None,
        likely_new: bool = False,
    ) -> T:
        """Run ``write`` (a plan sealing with the key it is given) with ``owner``'s key.

        Where the key store is ``database`` (the one ``run`` runs plans on), an owner's
        new key is stored in the same transaction as the first write sealed with it (see
        :meth:`sealing_plan`); else the key is found or made first, in the key store.

        Args:
            owner: ``"store:<shard key>"`` or ``"thread:<thread id>"``.
            write: Builds the write from the key.
            run: Runs a plan on the write's database (the saver's runner).
            database: The write's database.
            likely_new: Do not look the key up before creating it.

        Example:
            ```python
            from langgraph_checkpoint_agent_memory.crypto import cipher
            from langgraph_checkpoint_agent_memory.db.database import Batch

            master = cipher.MasterKeyProvider([cipher.generate_master_key()])
            keyring = Keyring(memory_keystore(), master)

            def write(key):  # a write sealed with ``key`` (here: its transaction only)
                yield Batch([], write=True)
                return key.key_id

            store = keyring.keystore
            key_id = keyring.sealed("thread:t1", write, store.run, database=store.db)
            assert keyring.find("thread:t1").key_id == key_id
            ```
        """
        if (found := self.cached(owner)) is not None:
            return run(write(found))  # type: ignore[no-any-return]
        if database is None or self.keystore.db is not database:
            return run(write(self.key(owner, likely_new=likely_new)))  # type: ignore[no-any-return]
        with self._lookups[hash(owner) % LOOKUP_STRIPES]:
            _, value = run(self.sealing_plan(owner, write, likely_new=likely_new))
        return value  # type: ignore[no-any-return]

    async def asealed(
        self,
        owner: str,
        write: Callable[[DataKey], Plan[T]],
        arun: Callable[[Plan[Any]], Awaitable[Any]],
        *,
        database: Database[Any] | None = None,
        likely_new: bool = False,
    ) -> T:
        """Async :meth:`sealed`; tasks of one loop missing the same owner's key wait for the
        first one's write, then write with the key it stored."""
        if (found := self.cached(owner)) is not None:
            return await arun(write(found))  # type: ignore[no-any-return]
        if database is None or self.keystore.db is not database:
            key = await self.akey(owner, likely_new=likely_new)
            return await arun(write(key))  # type: ignore[no-any-return]
        return await self._looked_up_once(
            owner,
            lambda: arun(self.sealing_plan(owner, write, likely_new=likely_new)),
            lambda key: arun(write(key)),
        )

    def find(self, owner: str) -> DataKey | None:
        """``owner``'s data key, or ``None`` when it has none (nothing is created)."""
        return self.cached(owner) or self.keystore.run(self.key_plan(owner, create=False))

    async def afind(self, owner: str) -> DataKey | None:
        """Async :meth:`find`."""
        return self.cached(owner) or await self.keystore.arun(self.key_plan(owner, create=False))

    def by_id(self, key_id: str) -> DataKey:
        """The data key named ``key_id``.

        Raises:
            KeyMissingError: The key store does not hold it (destroyed by an erase, or
                another key store's).
        """
        return self.cached_id(key_id) or self.keystore.run(self.by_id_plan(key_id))

    async def aby_id(self, key_id: str) -> DataKey:
        """Async :meth:`by_id`."""
        found = self.cached_id(key_id)
        return found if found is not None else await self.keystore.arun(self.by_id_plan(key_id))

    def destroy(self, owners: Sequence[str]) -> list[str]:
        """Destroy the keys of ``owners``: whatever they sealed, in this database and in
        every backup of it, can no longer be read. Returns the key ids destroyed."""
        return self.keystore.run(self.destroy_plan(owners))

    async def adestroy(self, owners: Sequence[str]) -> list[str]:
        """Async :meth:`destroy`."""
        return await self.keystore.arun(self.destroy_plan(owners))

    def rotate(self, *, on_progress: Callable[[int, int | None], None] | None = None) -> int:
        """Re-wrap every data key under the provider's current master key (:meth:`rotate_plan`).

        Args:
            on_progress: Called after each page of keys with ``(keys looked at, keys in
                all)``, e.g. to show progress.
        """
        return self.keystore.run(self.rotate_plan(on_progress))

    async def arotate(self, *, on_progress: Callable[[int, int | None], None] | None = None) -> int:
        """Async :meth:`rotate`."""
        return await self.keystore.arun(self.rotate_plan(on_progress))

    def close(self) -> None:
        """Close the key store's database when it was opened for it."""
        self.keystore.close()

    def describe(self) -> dict[str, Any]:
        """Where the keys are and how many are cached."""
        with self._lock:
            return {"keystore": self.keystore.describe(), "cached": len(self._by_id)}


KEYSTORE_URL_ENV = "AGENT_MEMORY_KEYSTORE_URL"


class KeyStore(SchemaOnFirstUse):
    """The key table of ``db``, created on first use (``auto_setup``); closing the key store
    closes ``db`` when it is ``owned`` (opened for it)."""

    components: tuple[Component, ...] = (KEYS,)

    def __init__(self, db: Database[Any], *, owned: bool, auto_setup: bool = True) -> None:
        self.db, self.owned, self.auto_setup = db, owned, auto_setup
        self.dialect: Dialect = db.dialect
        self._clock: Callable[[], float] = time.time

    def run(self, plan: Plan[T]) -> T:
        """Run a plan of :mod:`..db.keys` (creating the table on first use)."""
        return self._run(plan)

    async def arun(self, plan: Plan[T]) -> T:
        return await self._arun(plan)

    def describe(self) -> str:
        return self.db.describe()

    def close(self) -> None:
        if self.owned:
            self.db.close()


def open_database(url: str) -> Database[Any]:
    """A database for ``url`` (``sqlite:///...``, ``postgresql://...``, ``hana://...``)."""
    target = urls.parse(urls.as_url(url, KEYSTORE_URL_ENV), KEYSTORE_URL_ENV)
    if target.kind == "sqlite":
        from langgraph_checkpoint_agent_memory.db.sqlite import SQLiteDatabase

        return SQLiteDatabase(target.options["path"], mode=urls.sqlite_mode(target))
    if target.kind == "postgresql":
        from langgraph_checkpoint_agent_memory.db.postgres import PostgresDatabase

        return PostgresDatabase(target.url)
    from langgraph_checkpoint_agent_memory.db.hana import HanaDatabase

    return HanaDatabase(target.options, url=target.url)


def memory_keystore() -> KeyStore:
    """A key store in a private in-memory database (for in-memory savers)."""
    from langgraph_checkpoint_agent_memory.db.sqlite import SQLiteDatabase

    return KeyStore(SQLiteDatabase(":memory:"), owned=True)
