"""The async connection pool for a connection string: a stack of idle connections.

An async graph calls the saver ten times per invoke on one event loop, and
``psycopg_pool.AsyncConnectionPool`` spends more on each take and return (locks, a
reset hook, stats, logging) than a round trip's own client CPU; on a short thread that
showed as 4-11% of the invoke. This pool keeps to what one loop needs: connections are
opened on demand up to ``max_size``, the most recently returned one is reused first (the
others age out), one that is broken, mid-transaction or past ``max_idle``/``max_lifetime``
is closed instead of reused, and a caller finding none free waits in line for ``timeout``
seconds. A pool or connection the caller passes in is used as given.

Not thread-safe, like any asyncio object: it belongs to the event loop that opened it.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Awaitable, Callable
from typing import Any

from psycopg import AsyncConnection, pq
from psycopg_pool import PoolTimeout

from langgraph_checkpoint_agent_memory.errors import ClosedError

_IDLE = pq.TransactionStatus.IDLE


class AsyncPool:
    def __init__(
        self,
        conninfo: str,
        *,
        max_size: int,
        timeout: float,
        kwargs: dict[str, Any],
        configure: Callable[[Any], Awaitable[None]] | None = None,
        max_idle: float = 600.0,
        max_lifetime: float = 3600.0,
    ) -> None:
        if max_size < 1:
            raise ValueError(f"max_size must be at least 1, got {max_size}")
        self.conninfo = conninfo
        self.max_size = max_size
        self.timeout = timeout
        self.kwargs = kwargs
        self.configure = configure
        self.max_idle = max_idle
        self.max_lifetime = max_lifetime
        self.size = 0  # connections open or being opened, idle or in use
        self._idle: list[tuple[Any, float]] = []  # (connection, returned at), newest last
        self._born: dict[Any, float] = {}
        self._waiters: collections.deque[asyncio.Future[Any]] = collections.deque()
        self._closed = False

    async def open(self) -> None:
        """Open one connection now, so that a wrong URL fails here, within ``timeout``."""
        conn = await self.getconn()
        await self.putconn(conn)

    async def getconn(self) -> Any:
        deadline: float | None = None
        while True:
            if self._closed:
                raise ClosedError("the connection pool is closed")
            now = time.monotonic()
            while self._idle:
                conn, since = self._idle.pop()
                if (
                    now - since < self.max_idle
                    and now - self._born[conn] < self.max_lifetime
                    and not conn.closed
                ):
                    return conn
                await self._discard(conn)
            if self.size < self.max_size:
                return await self._connect()
            deadline = now + self.timeout if deadline is None else deadline
            conn = await self._wait(deadline)
            if conn is not None:
                return conn
            # None: a connection was discarded, so there is room to open one; try again

    async def _wait(self, deadline: float) -> Any:
        """The connection handed over by ``putconn``, or ``None``: room to open one."""
        waiter: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            return await asyncio.wait_for(waiter, max(0.0, deadline - time.monotonic()))
        except BaseException as exc:
            if waiter in self._waiters:
                self._waiters.remove(waiter)
            elif waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                # handed over just as this caller gave up (cancelled): pass it on
                handed = waiter.result()
                if handed is None:
                    self._wake_one()
                else:
                    await self.putconn(handed)
            if isinstance(exc, asyncio.TimeoutError):
                raise PoolTimeout(
                    f"no PostgreSQL connection free within {self.timeout:g} s "
                    f"(all {self.max_size} in use: raise pool_size)"
                ) from None
            raise

    async def _connect(self) -> Any:
        self.size += 1
        try:
            conn = await AsyncConnection.connect(
                self.conninfo, connect_timeout=max(1, round(self.timeout)), **self.kwargs
            )
            try:
                if self.configure is not None:
                    await self.configure(conn)
            except BaseException:
                await conn.close()
                raise
        except BaseException:
            self.size -= 1
            self._wake_one()
            raise
        self._born[conn] = time.monotonic()
        return conn

    async def putconn(self, conn: Any) -> None:
        if self._closed or conn.closed or conn.pgconn.transaction_status != _IDLE:
            await self._discard(conn)  # a query cut short or a transaction left open
            return
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(conn)
                return
        self._idle.append((conn, time.monotonic()))

    async def _discard(self, conn: Any) -> None:
        self.size -= 1
        self._born.pop(conn, None)
        self._wake_one()
        try:
            await conn.close()
        except Exception:
            pass

    def _wake_one(self) -> None:
        """Tell the first caller in line that it may open a connection."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def close(self) -> None:
        self._closed = True
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(ClosedError("the connection pool is closed"))
        idle, self._idle = self._idle, []
        for conn, _ in idle:
            await self._discard(conn)
