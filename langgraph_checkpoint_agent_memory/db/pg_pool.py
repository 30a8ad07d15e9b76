"""How the ``psycopg_pool`` pools opened from a connection string are configured.

:class:`PostgresOptions` is what a user may set; :class:`IdleCheck` holds the pools'
``configure`` and ``check`` hooks; :func:`with_keepalives` adds TCP keepalives to a
connection string that does not choose its own.
"""

from __future__ import annotations

import math
import time
import weakref
from dataclasses import dataclass, fields
from typing import Any

from langgraph_checkpoint_agent_memory.errors import ConfigurationError

_RELAX_COMMIT = "SET synchronous_commit TO off"


class IdleCheck:
    """The ``configure`` and ``check`` hooks of the pools opened here, and :meth:`returned`,
    which the database calls as it gives a connection back.

    psycopg_pool's ``check_connection`` costs a round trip; run on every checkout it adds one
    to every saver call, ten per graph invoke. A connection can only have been broken unseen
    (a server restart, a network cut) while it sat unused, so it is checked when it has been
    idle for ``after`` seconds since it was opened or returned (``0``: at every checkout).
    Under load connections come back within milliseconds and go out unchecked; after a
    restart, which takes longer than ``after``, each is checked and replaced before use.
    """

    def __init__(self, after: float, relax_commit: bool) -> None:
        self.after = after
        self.relax_commit = relax_commit
        self._since: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()

    def _stamp(self, conn: Any) -> None:
        self._since[conn] = time.monotonic()

    def _due(self, conn: Any) -> bool:
        return time.monotonic() - self._since.get(conn, -math.inf) >= self.after

    def configure(self, conn: Any) -> None:
        if self.relax_commit:
            conn.execute(_RELAX_COMMIT)
        self._stamp(conn)

    def returned(self, conn: Any) -> None:
        """Note that ``conn`` goes back to its pool now. (Not psycopg_pool's ``reset`` hook:
        with one, an async pool hands every return to a background task.)"""
        self._stamp(conn)

    def check(self, conn: Any) -> None:
        if self._due(conn):
            import psycopg_pool

            psycopg_pool.ConnectionPool.check_connection(conn)

    async def aconfigure(self, conn: Any) -> None:
        if self.relax_commit:
            await conn.execute(_RELAX_COMMIT)
        self._stamp(conn)

    async def acheck(self, conn: Any) -> None:
        if self._due(conn):
            import psycopg_pool

            await psycopg_pool.AsyncConnectionPool.check_connection(conn)


#: Connection parameters a connection string gets unless it sets them: a dead peer (a server
#: gone without closing the socket, a dropped NAT entry) is noticed in about a minute.
KEEPALIVES = {
    "keepalives": "1",
    "keepalives_idle": "30",
    "keepalives_interval": "10",
    "keepalives_count": "3",
}


def with_keepalives(conninfo: str) -> str:
    """``conninfo`` with TCP keepalives turned on, where it does not choose otherwise."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    given = conninfo_to_dict(conninfo)
    return make_conninfo(conninfo, **{k: v for k, v in KEEPALIVES.items() if k not in given})


def require_psycopg() -> tuple[Any, Any]:
    """psycopg and psycopg_pool, or an error that says how to install them."""
    try:
        import psycopg
        import psycopg_pool
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ConfigurationError(
            "PostgreSQL needs psycopg 3: pip install 'langgraph-checkpoint-agent-memory[postgres]'"
        ) from exc
    return psycopg, psycopg_pool


@dataclass(frozen=True)
class PostgresOptions:
    """How a PostgreSQL saver or store connects; see :class:`PostgresSaver` for each one.

    Only ``synchronous_commit`` applies to a connection or pool passed in; the others shape
    the pools opened from a connection string.
    """

    pool_size: int = 8
    connect_timeout: float = 10.0
    synchronous_commit: bool = True
    #: ``None`` for PgBouncer in transaction mode (before 1.21)
    prepare_threshold: int | None = 5
    max_idle: float = 600.0
    max_lifetime: float = 3600.0
    #: seconds a pooled connection sits unused before it is checked at checkout (IdleCheck)
    check_after_idle: float = 1.0

    def __post_init__(self) -> None:
        if not _whole(self.pool_size, 1):
            raise ConfigurationError(f"pool_size must be an int >= 1, got {self.pool_size!r}")
        # not 0: psycopg would then prepare a pipeline's BEGIN in the same round trip as the
        # DEALLOCATE ALL it sends after an ALTER or a ROLLBACK, and lose it
        if self.prepare_threshold is not None and not _whole(self.prepare_threshold, 1):
            raise ConfigurationError(
                f"prepare_threshold must be None or an int >= 1, got {self.prepare_threshold!r}"
            )
        for name in ("connect_timeout", "max_idle", "max_lifetime", "check_after_idle"):
            value = getattr(self, name)
            least = 0 if name == "check_after_idle" else 1e-9
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < least:
                raise ConfigurationError(
                    f"{name} must be a number of seconds {'>= 0' if least == 0 else '> 0'}, "
                    f"got {value!r}"
                )

    @classmethod
    def names(cls) -> frozenset[str]:
        return frozenset(f.name for f in fields(cls))


def _whole(value: Any, least: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least
