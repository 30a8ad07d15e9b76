"""The async pool a PostgreSQL saver or store opens from a URL (``db/pgpool.py``), on a real
server: bounded, reused newest first, waiters served in turn or told they timed out, and
nothing leaked when a connection breaks, a caller is cancelled or the pool closes."""

from __future__ import annotations

import asyncio
import socket
import time
import types
from typing import Any

import pytest

psycopg = pytest.importorskip("psycopg")

from psycopg_pool import PoolTimeout  # noqa: E402

from langgraph_checkpoint_agent_memory.db.pgpool import AsyncPool  # noqa: E402
from langgraph_checkpoint_agent_memory.errors import ClosedError  # noqa: E402


def _pool(url: str, **kwargs: Any) -> AsyncPool:
    options: dict[str, Any] = {"max_size": 3, "timeout": 5.0, "kwargs": {"autocommit": True}}
    options.update(kwargs)
    return AsyncPool(url, **options)


async def _held_and_waiting(url: str) -> tuple[AsyncPool, Any, asyncio.Task[Any]]:
    """A pool of one connection, held, and a second caller already waiting for it."""
    pool = _pool(url, max_size=1)
    held = await pool.getconn()
    waiting = asyncio.create_task(pool.getconn())
    await asyncio.sleep(0.05)
    assert not waiting.done()
    return pool, held, waiting


async def _pid(conn: Any) -> int:
    return int((await (await conn.execute("SELECT pg_backend_pid()")).fetchone())[0])


async def _backends(url: str, expect: int) -> int:
    """The other sessions on the database, once they number ``expect`` (a closed client's
    backend leaves ``pg_stat_activity`` a moment after the client) or after 10 s."""
    deadline = time.monotonic() + 10
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as admin:
        while True:
            cur = await admin.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            count = int((await cur.fetchone())[0])
            if count == expect or time.monotonic() > deadline:
                return count
            await asyncio.sleep(0.02)


async def test_never_more_than_max_size_and_newest_first(pg_url: str) -> None:
    pool = _pool(pg_url)
    busy = 0
    most = 0

    async def use() -> None:
        nonlocal busy, most
        conn = await pool.getconn()
        busy += 1
        most = max(most, busy)
        await conn.execute("SELECT pg_sleep(0.01)")
        busy -= 1
        await pool.putconn(conn)

    await asyncio.gather(*(use() for _ in range(20)))
    assert most == 3
    assert pool.size == 3
    assert await _backends(pg_url, 3) == 3
    first = await pool.getconn()
    await pool.putconn(first)
    assert await pool.getconn() is first  # the one just returned, not the oldest idle one
    await pool.putconn(first)
    await pool.close()
    assert await _backends(pg_url, 0) == 0


async def test_a_caller_waits_its_turn_or_times_out(pg_url: str) -> None:
    pool = _pool(pg_url, max_size=1, timeout=0.3)
    held = await pool.getconn()
    started = time.monotonic()
    with pytest.raises(PoolTimeout, match=r"no PostgreSQL connection free within 0\.3 s"):
        await pool.getconn()
    assert 0.25 < time.monotonic() - started < 3
    waiting = asyncio.create_task(pool.getconn())
    await asyncio.sleep(0.05)
    assert not waiting.done()
    await pool.putconn(held)
    assert await waiting is held  # handed over, not reopened
    await pool.putconn(held)
    assert pool.size == 1
    await pool.close()


async def test_a_cancelled_waiter_leaks_nothing(pg_url: str) -> None:
    pool, held, waiting = await _held_and_waiting(pg_url)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await pool.putconn(held)
    again = await asyncio.wait_for(pool.getconn(), 2)
    assert again is held
    await pool.putconn(again)
    assert pool.size == 1
    await pool.close()


async def test_a_connection_handed_over_as_its_waiter_is_cancelled_is_kept(pg_url: str) -> None:
    pool, held, waiting = await _held_and_waiting(pg_url)
    await pool.putconn(held)  # handed to the waiter, which has not run yet...
    waiting.cancel()  # ...and is cancelled before it does
    try:
        got = await waiting  # Python 3.11's wait_for still returns it
    except asyncio.CancelledError:
        got = None
    if got is not None:
        await pool.putconn(got)
    assert await asyncio.wait_for(pool.getconn(), 2) is held
    assert pool.size == 1
    await pool.close()


async def test_a_waiter_opens_a_connection_when_one_is_discarded(pg_url: str) -> None:
    pool, held, waiting = await _held_and_waiting(pg_url)
    await held.execute("BEGIN")
    await pool.putconn(held)  # discarded: the waiter may open a new one
    fresh = await asyncio.wait_for(waiting, 2)
    assert fresh is not held
    assert not fresh.closed
    await pool.putconn(fresh)
    assert pool.size == 1
    await pool.close()


async def test_broken_and_unfinished_connections_are_replaced(pg_url: str) -> None:
    pool = _pool(pg_url, max_size=2)
    conn = await pool.getconn()
    pid = await _pid(conn)
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as admin:
        await admin.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))
    with pytest.raises(psycopg.OperationalError):
        await conn.execute("SELECT 1")
    await pool.putconn(conn)  # broken: closed, and its place freed
    assert pool.size == 0
    conn = await pool.getconn()
    assert await _pid(conn) != pid
    await conn.execute("BEGIN")
    await pool.putconn(conn)  # left in a transaction: not handed to the next caller
    assert conn.closed
    conn = await pool.getconn()
    assert conn.pgconn.transaction_status == psycopg.pq.TransactionStatus.IDLE
    await pool.putconn(conn)
    assert pool.size == 1
    await pool.close()


@pytest.mark.parametrize("option", ["max_idle", "max_lifetime"])
async def test_idle_and_old_connections_are_replaced(
    pg_url: str, option: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from langgraph_checkpoint_agent_memory.db import pgpool

    clock = types.SimpleNamespace(monotonic=lambda: now)
    now = 1000.0
    monkeypatch.setattr(pgpool, "time", clock)
    pool = _pool(pg_url, **{option: 60.0})
    conn = await pool.getconn()
    pid = await _pid(conn)
    await pool.putconn(conn)
    now += 59.0
    assert await _pid(await pool.getconn()) == pid
    await pool.putconn(conn)
    now += 61.0 if option == "max_idle" else 2.0  # idle 61 s, or 61 s since it opened
    fresh = await pool.getconn()
    assert await _pid(fresh) != pid
    assert conn.closed
    await pool.putconn(fresh)
    assert pool.size == 1
    await pool.close()


async def test_close_ends_every_connection(pg_url: str) -> None:
    pool, held, waiting = await _held_and_waiting(pg_url)
    await pool.close()
    with pytest.raises(ClosedError):
        await waiting
    with pytest.raises(ClosedError):
        await pool.getconn()
    await pool.putconn(held)  # returned after the close: closed, not kept
    assert held.closed
    assert await _backends(pg_url, 0) == 0


async def test_a_failing_configure_frees_its_place(pg_url: str) -> None:
    calls = 0

    async def configure(conn: Any) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise psycopg.OperationalError("configure failed")

    pool = _pool(pg_url, max_size=1, configure=configure)
    with pytest.raises(psycopg.OperationalError, match="configure failed"):
        await pool.getconn()
    assert pool.size == 0
    conn = await pool.getconn()
    await pool.putconn(conn)
    await pool.close()
    assert await _backends(pg_url, 0) == 0


@pytest.fixture
def silent_port() -> Any:
    """A port that accepts TCP connections and never answers, like a hung server."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield listener.getsockname()[1]


async def test_saver_reports_a_silent_server_without_blocking(silent_port: int) -> None:
    from langgraph_checkpoint_agent_memory import PostgresSaver
    from langgraph_checkpoint_agent_memory.errors import DatabaseUnavailableError

    saver = PostgresSaver(
        f"postgresql://agent:s3cret-pw@127.0.0.1:{silent_port}/db", connect_timeout=2
    )
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.01)

    ticker = asyncio.create_task(tick())
    started = time.monotonic()
    with pytest.raises(DatabaseUnavailableError, match="within 2 s") as raised:
        await saver.aget_tuple({"configurable": {"thread_id": "t"}})
    elapsed = time.monotonic() - started
    ticker.cancel()
    assert "s3cret-pw" not in str(raised.value)
    assert "127.0.0.1" in str(raised.value)
    assert 1.5 < elapsed < 3.5  # one attempt, not a second one to find out why
    assert ticks > elapsed * 50  # the event loop ran on while the pool tried to connect


async def test_concurrent_first_calls_open_one_pool(pg_url: str) -> None:
    from langgraph_checkpoint_agent_memory import PostgresSaver

    saver = PostgresSaver(pg_url, pool_size=4)
    await saver.asetup()
    await saver.aclose()
    saver = PostgresSaver(pg_url, pool_size=4, auto_setup=False)
    config = {"configurable": {"thread_id": "t"}}
    await asyncio.gather(*(saver.aget_tuple(config) for _ in range(10)))
    pool = saver.db._async
    assert 1 <= pool.size <= 4
    assert await _backends(pg_url, pool.size) == pool.size  # no second pool left connected
    await saver.aclose()
    assert await _backends(pg_url, 0) == 0


async def test_async_saver_recovers_from_dropped_connections(pg_url: str) -> None:
    from langgraph_checkpoint_agent_memory import PostgresSaver
    from tests.helpers import config_for, make_checkpoint

    saver = PostgresSaver(pg_url, pool_size=3)
    stored = await saver.aput(config_for("t"), make_checkpoint({"x": [1]}), {}, {"x": 1})
    await asyncio.gather(*(saver.aget_tuple(stored) for _ in range(6)))  # open a few
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as admin:
        await admin.execute(
            "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    failures = 0
    for _ in range(10):  # each broken connection fails one call, then is replaced
        try:
            got = await saver.aget_tuple(stored)
            break
        except psycopg.OperationalError:
            failures += 1
    assert got.checkpoint["channel_values"] == {"x": [1]}
    assert 1 <= failures <= 3
    assert saver.db._async.size <= 3
    await saver.aclose()
