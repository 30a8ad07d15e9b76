"""What the SQL of agent memory (:mod:`.memory`, :mod:`.memory_jobs`) needs to seal and open
store rows as the store's own ``put`` and ``get`` do: a protocol the store's sealer
(``store.sealing.Sealer``) implements, so the memory plans import neither the store nor the
crypto layer (a data key is ``Any`` here).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol, TypeVar

from langgraph_checkpoint_agent_memory.db.database import Plan

T = TypeVar("T")


class RowSealer(Protocol):
    """Seals and opens store rows with the data key of their shard key (see the module)."""

    def call(self, run: Callable[[Plan[T]], T], make: Callable[[], Plan[T]]) -> T:
        """Run ``make()`` with ``run``; on a stop for keys, load them and run a new plan."""

    async def acall(self, run: Callable[[Plan[T]], Awaitable[T]], make: Callable[[], Plan[T]]) -> T:
        """Async :meth:`call`."""

    def owner_key_plan(self, shard: str, *, create: bool) -> Plan[Any]:
        """The data key of the shard key ``shard`` (created when ``create``)."""

    def preload_plan(self, shards: Iterable[str]) -> Plan[None]:
        """Find or create the data keys of ``shards``, all at once."""

    def ids_plan(self, sealed: Iterable[bytes | None]) -> Plan[None]:
        """Load the keys the ``sealed`` values name."""

    def text_ids_plan(self, texts: Iterable[str | None]) -> Plan[None]:
        """Load the keys the sealed texts among ``texts`` name."""

    def seal_value(self, key: Any, prefix: str, item_key: str, text: str) -> bytes:
        """An item's JSON text sealed for its row."""

    def open_value(self, prefix: str, item_key: str, value: Any, sealed: bytes | None) -> Any:
        """An item row's value as a dict (opened when sealed)."""

    def seal_vector(self, key: Any, prefix: str, item_key: str, field: str, vector: bytes) -> bytes:
        """One embedded field's float32 vector sealed for its row."""

    def open_vector(
        self, prefix: str, item_key: str, field: str, vector: bytes, plain: bool
    ) -> bytes:
        """A vector row's float32 bytes."""

    def term_of(self, key: Any) -> Callable[[str], str]:
        """What the lexical index stores for a term under ``key``: its keyed hash."""

    def filter_terms(self, key: Any, text: str) -> list[str]:
        """The lexical index's rows, under ``key``, for the filterable fields of JSON ``text``."""

    def seal_text(self, key: Any, text: str, *identity: str) -> str:
        """``text`` sealed for a text column (``"!"`` and base64), bound to ``identity``."""

    def open_text(self, text: str, *identity: str) -> str:
        """A text column's value :meth:`seal_text` sealed (plaintext only while migrating)."""
