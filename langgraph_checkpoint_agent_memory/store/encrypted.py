"""The store's methods of encryption at rest: destroying data keys (erase's hook) and
sealing what was written before encryption was on (``agent-memory encrypt``)."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from langgraph.store.base import PutOp

from langgraph_checkpoint_agent_memory.crypto.cipher import store_owner
from langgraph_checkpoint_agent_memory.crypto.config import Encryption
from langgraph_checkpoint_agent_memory.crypto.keyring import Keyring
from langgraph_checkpoint_agent_memory.db.database import Database, Plan
from langgraph_checkpoint_agent_memory.db.migrations import KEYS, Component
from langgraph_checkpoint_agent_memory.db.store import StoreStatements
from langgraph_checkpoint_agent_memory.errors import ConfigurationError
from langgraph_checkpoint_agent_memory.store.sealing import Sealer, encrypt_plaintext_plan

if TYPE_CHECKING:
    from langgraph_checkpoint_agent_memory.store.ranking import Ranker
    from langgraph_checkpoint_agent_memory.store.searching import Searcher

T = TypeVar("T")


class EncryptedStore:
    """What :class:`~.store.AgentMemoryStore` offers of encryption at rest beyond sealing
    and opening its rows (its ``keyring`` is ``None`` when encryption is off)."""

    keyring: Keyring | None
    sealer: Sealer | None
    key_check: Callable[[], Plan[None]] | None
    statements: StoreStatements

    if TYPE_CHECKING:  # the store's own (StoreSchemaOnFirstUse's and the store's)
        db: Database[Any]
        ranker: Ranker
        searcher: Searcher

        def add_schema(self, component: Component) -> None: ...

        def _ready(self) -> None: ...

        async def _aready(self) -> None: ...

        def run_plan(self, plan: Plan[T]) -> T: ...

        async def arun_plan(self, plan: Plan[T]) -> T: ...

    def destroy_keys(self, shards: Sequence[str]) -> list[str]:
        """Destroy the data keys of ``shards`` (store shard keys, e.g. ``"users.alice"``):
        whatever they sealed, in this database and in every copy or backup of it, can no
        longer be read (reads raise :class:`KeyMissingError`). The rows themselves stay
        until deleted (agent memory's erase deletes them too). With encryption off there
        is nothing to destroy.

        Args:
            shards: Shard keys, as :meth:`AgentMemoryStore.statements.shard` gives them for
                a namespace (its first ``shard_depth`` labels joined by dots).

        Returns:
            The ids of the data keys destroyed.

        Example:
            ```python
            from langgraph_checkpoint_agent_memory import create_store, generate_master_key

            with create_store("sqlite:///memory.db", encryption=generate_master_key()) as store:
                store.put(("users", "alice"), "prefs", {"food": "ramen"})
                store.destroy_keys(["users.alice"])  # alice's items are unreadable now
            ```
        """
        if self.keyring is None:
            return []
        self._ready()
        destroyed = self.keyring.destroy([store_owner(s) for s in shards])
        self._forget_plaintext()
        return destroyed

    async def adestroy_keys(self, shards: Sequence[str]) -> list[str]:
        """Async :meth:`destroy_keys`."""
        if self.keyring is None:
            return []
        await self._aready()
        destroyed = await self.keyring.adestroy([store_owner(s) for s in shards])
        self._forget_plaintext()
        return destroyed

    def _forget_plaintext(self) -> None:
        """Drop what this process remembers decrypted: term hashes and the vectors recall
        caches per namespace (a destroyed key's shard must not be served from memory)."""
        if self.sealer is not None:
            self.sealer.forget()
        with self.ranker.lock:
            self.ranker.matrices.clear()
            self.ranker.opened.clear()

    def encrypt_plaintext(self) -> dict[str, int]:
        """Seal every item written before encryption was on (values, vectors; terms
        re-hashed): what ``agent-memory encrypt`` runs. Idempotent: a second run finds
        nothing; safe while the store is in use.

        Returns:
            ``{"items": ..., "vectors": ..., "terms": ...}``: how many were sealed.

        Raises:
            ConfigurationError: Encryption is off for this store.

        Example:
            ```python
            from langgraph_checkpoint_agent_memory import (
                Encryption,
                create_store,
                generate_master_key,
            )

            key = generate_master_key()  # in production: the deployment's master key
            with create_store("sqlite:///memory.db", encryption=False) as store:
                store.put(("users", "alice"), "prefs", {"food": "ramen"})  # before encryption
            setting = Encryption(master_keys=[key], allow_plaintext=True)
            with create_store("sqlite:///memory.db", encryption=setting) as store:
                print(store.encrypt_plaintext())  # {'items': 1, 'vectors': 0, 'terms': 1}
            ```
        """
        sealer = self.sealer
        if sealer is None:
            raise ConfigurationError("encrypt_plaintext needs a store opened with encryption on")
        self._ready()
        counts = {"items": 0, "vectors": 0, "terms": 0}  # kept if the plan runs again
        return sealer.call(
            self.run_plan, lambda: encrypt_plaintext_plan(self.statements, sealer, counts)
        )

    async def aencrypt_plaintext(self) -> dict[str, int]:
        """Async :meth:`encrypt_plaintext`."""
        sealer = self.sealer
        if sealer is None:
            raise ConfigurationError("encrypt_plaintext needs a store opened with encryption on")
        await self._aready()
        counts = {"items": 0, "vectors": 0, "terms": 0}
        return await sealer.acall(
            self.arun_plan, lambda: encrypt_plaintext_plan(self.statements, sealer, counts)
        )

    def _encrypt(self, setting: Encryption, index: Any) -> None:
        """Turn encryption at rest on: the keyring, and the key table set up with the
        store's when the key store is the store's database."""
        self.keyring = setting.open_keyring(self.db)
        local = self.keyring.keystore.db is self.db
        if local:  # the key table is set up with the store's, the master key checked
            self.add_schema(KEYS)
            self.key_check = self.keyring.provider_check_plan
        self.sealer = Sealer(
            self.keyring,
            local=local,
            shard=self.statements.shard,
            filterable=setting.filterable_fields,
        )
        self.ranker.sealer = self.searcher.sealer = self.sealer
        if isinstance(index, Mapping) and index.get("ann_index_config"):
            warnings.warn(
                "encryption is on: vectors are sealed, so no approximate (HNSW) index serves "
                "this store; vector search is exact over each searched namespace's vectors, "
                "decrypted in the store",
                stacklevel=3,
            )

    def _owners(self, puts: dict[tuple[str, str], PutOp]) -> list[str]:
        """The key owners of the items ``puts`` writes."""
        shards = {self.statements.shard(p) for (p, _), op in puts.items() if op.value is not None}
        return [store_owner(s) for s in sorted(shards)]

    def _arun_preloaded(self, owners: list[str]) -> Callable[[Plan[T]], Any]:
        async def run(plan: Plan[T]) -> T:
            assert self.sealer is not None
            await self.sealer.apreload(owners)
            return await self.arun_plan(plan)

        return run
