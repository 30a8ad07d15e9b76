"""PostgreSQL connections as the savers open them from a URL, on a real server: psycopg_pool
pools that check each connection before handing it out, TCP keepalives, and failures that
reach the caller as :class:`DatabaseUnavailableError`."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

psycopg = pytest.importorskip("psycopg")
psycopg_pool = pytest.importorskip("psycopg_pool")

from langgraph_checkpoint_agent_memory import AgentMemoryError, PostgresSaver  # noqa: E402
from langgraph_checkpoint_agent_memory.db.postgres import (  # noqa: E402
    PostgresDatabase,
    with_keepalives,
)
from langgraph_checkpoint_agent_memory.errors import DatabaseUnavailableError  # noqa: E402
from tests.helpers import config_for, make_checkpoint, present  # noqa: E402


def postgres_db(saver: PostgresSaver) -> PostgresDatabase:
    """The saver's database, as its class (``SQLSaver.db`` is typed as the base class)."""
    assert isinstance(saver.db, PostgresDatabase)
    return saver.db


def _terminate_others(url: str) -> int:
    """End every other session on the test's database, as a server restart would."""
    with psycopg.connect(url, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
    return len(rows)


def _sessions(url: str, expect: int) -> int:
    """The other sessions on the database, once they number ``expect`` (a closed client's
    backend leaves ``pg_stat_activity`` a moment after the client) or after 10 s."""
    deadline = time.monotonic() + 10
    with psycopg.connect(url, autocommit=True) as admin:
        while True:
            row = admin.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchone()
            if row[0] == expect or time.monotonic() > deadline:
                return int(row[0])
            time.sleep(0.02)


def test_pools_opened_from_a_url_are_psycopg_pools_that_check(pg_url: str) -> None:
    saver = PostgresSaver(pg_url, pool_size=3, max_idle=120, max_lifetime=900)
    saver.get_tuple(config_for("t"))
    pool = postgres_db(saver)._sync
    assert isinstance(pool, psycopg_pool.ConnectionPool)
    assert pool.max_size == 3 and pool.max_idle == 120 and pool.max_lifetime == 900
    saver.close()
    assert pool.closed


@pytest.mark.parametrize("check_after_idle", [0.0, 0.5])
def test_a_restart_costs_no_call(pg_url: str, check_after_idle: float) -> None:
    """Connections the server dropped are replaced when they are handed out: at every
    checkout with ``check_after_idle=0``, else once they sat unused that long, which a
    restart always outlasts."""
    saver = PostgresSaver(pg_url, pool_size=3, check_after_idle=check_after_idle)
    stored = saver.put(config_for("t"), make_checkpoint({"x": [1]}), {}, {"x": 1})
    for _ in range(3):
        assert saver.get_tuple(stored) is not None
    assert _terminate_others(pg_url) >= 1
    time.sleep(check_after_idle)  # the server is down at least this long
    for step in range(2, 6):  # every call succeeds, the first ones on new connections
        stored = saver.put(
            config_for("t", stored["configurable"]["checkpoint_id"]),
            make_checkpoint({"x": [step]}, step=step, version=step),
            {},
            {"x": step},
        )
        latest = present(saver.get_tuple(config_for("t")))
        assert latest.checkpoint["channel_values"] == {"x": [step]}
    saver.close()


async def test_a_restart_costs_no_async_call(pg_url: str) -> None:
    saver = PostgresSaver(pg_url, pool_size=3, check_after_idle=0.5)
    stored = await saver.aput(config_for("t"), make_checkpoint({"x": [1]}), {}, {"x": 1})
    await asyncio.gather(*(saver.aget_tuple(stored) for _ in range(6)))  # open a few
    await asyncio.to_thread(_terminate_others, pg_url)
    await asyncio.sleep(0.5)
    got = await asyncio.gather(*(saver.aget_tuple(stored) for _ in range(6)))
    assert all(present(t).checkpoint["channel_values"] == {"x": [1]} for t in got)
    await saver.aclose()


def test_busy_connections_go_out_unchecked_idle_ones_are_checked(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A check is a round trip: a pool in use skips it, a connection left idle gets it."""
    checks: list[Any] = []
    real = psycopg_pool.ConnectionPool.check_connection

    def counted(conn: Any) -> Any:
        checks.append(conn)
        return real(conn)

    monkeypatch.setattr(psycopg_pool.ConnectionPool, "check_connection", staticmethod(counted))
    busy = PostgresSaver(pg_url, pool_size=2, check_after_idle=30)  # no call waits that long
    for _ in range(20):
        busy.get_tuple(config_for("t"))
    assert checks == []
    busy.close()
    idle = PostgresSaver(pg_url, pool_size=2, check_after_idle=0.3)
    idle.get_tuple(config_for("t"))
    time.sleep(0.3)  # at least this long unused, however busy the machine
    idle.get_tuple(config_for("t"))
    assert len(checks) >= 1
    idle.close()


def test_a_connection_lost_mid_call_is_database_unavailable(pg_url: str) -> None:
    """A connection the caller passed in cannot be replaced: its loss is reported as the
    package's error, which callers catch as ``AgentMemoryError`` or ``ConnectionError``."""
    conn = psycopg.connect(pg_url, autocommit=True)
    saver = PostgresSaver(conn)
    saver.put(config_for("t"), make_checkpoint({"x": [1]}), {}, {"x": 1})
    _terminate_others(pg_url)
    with pytest.raises(DatabaseUnavailableError, match="connection to PostgreSQL was lost") as e:
        saver.get_tuple(config_for("t"))
    assert isinstance(e.value, AgentMemoryError) and isinstance(e.value, ConnectionError)
    assert isinstance(e.value.__cause__, psycopg.OperationalError)
    conn.close()


async def test_an_async_connection_lost_mid_call_is_database_unavailable(pg_url: str) -> None:
    conn = await psycopg.AsyncConnection.connect(pg_url, autocommit=True)
    saver = PostgresSaver(conn)
    await saver.aput(config_for("t"), make_checkpoint({"x": [1]}), {}, {"x": 1})
    await asyncio.to_thread(_terminate_others, pg_url)
    with pytest.raises(DatabaseUnavailableError):
        await saver.aget_tuple(config_for("t"))
    await conn.close()


def test_server_errors_other_than_a_lost_connection_pass_through(pg_url: str) -> None:
    from langgraph_checkpoint_agent_memory.db.database import Batch, Stmt
    from langgraph_checkpoint_agent_memory.db.dialect import Sql

    saver = PostgresSaver(pg_url)

    def plan() -> Any:
        yield Batch(
            [Stmt(Sql("SET LOCAL statement_timeout = 50")), Stmt(Sql("SELECT pg_sleep(2)"))]
        )

    with pytest.raises(psycopg.errors.QueryCanceled):
        saver.db.run(plan())
    saver.close()


def test_pool_exhausted_is_database_unavailable(pg_url: str) -> None:
    saver = PostgresSaver(pg_url, pool_size=1, connect_timeout=0.5)
    saver.setup()
    held = postgres_db(saver)._sync.getconn()  # the only connection, busy elsewhere
    try:
        with pytest.raises(DatabaseUnavailableError, match=r"within 0\.5 s"):
            saver.get_tuple(config_for("t"))
    finally:
        postgres_db(saver)._sync.putconn(held)
    assert saver.get_tuple(config_for("t")) is None
    saver.close()


def test_unreachable_server_is_one_clear_error() -> None:
    saver = PostgresSaver("postgresql://agent:s3cret-pw@127.0.0.1:9/db", connect_timeout=1)
    with pytest.raises(DatabaseUnavailableError) as raised:
        saver.get_tuple(config_for("t"))
    message = str(raised.value)
    assert "127.0.0.1" in message and "s3cret-pw" not in message
    assert "\n" not in message


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts TCP connections and never answers, like a hung server."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield listener.getsockname()[1]


async def test_a_silent_server_does_not_block_the_event_loop(silent_port: int) -> None:
    saver = PostgresSaver(
        f"postgresql://agent:s3cret-pw@127.0.0.1:{silent_port}/db", connect_timeout=1
    )
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.01)

    ticker = asyncio.create_task(tick())
    started = time.monotonic()
    with pytest.raises(DatabaseUnavailableError, match="within 1 s") as raised:
        await saver.aget_tuple(config_for("t"))
    elapsed = time.monotonic() - started
    ticker.cancel()
    assert "s3cret-pw" not in str(raised.value)
    assert ticks > elapsed * 20  # the loop ran on while the pool tried to connect


async def test_concurrent_first_calls_open_one_pool(pg_url: str) -> None:
    saver = PostgresSaver(pg_url, pool_size=4)
    await saver.asetup()
    await saver.aclose()
    saver = PostgresSaver(pg_url, pool_size=4, auto_setup=False)
    await asyncio.gather(*(saver.aget_tuple(config_for("t")) for _ in range(10)))
    pool = postgres_db(saver)._async
    assert isinstance(pool, psycopg_pool.AsyncConnectionPool)
    size = pool.get_stats()["pool_size"]
    assert 1 <= size <= 4
    assert await asyncio.to_thread(_sessions, pg_url, size) == size  # no second pool
    await saver.aclose()
    assert await asyncio.to_thread(_sessions, pg_url, 0) == 0


def test_a_pool_passed_in_is_used_and_left_open(pg_url: str) -> None:
    pool = psycopg_pool.ConnectionPool(
        pg_url, min_size=1, max_size=2, kwargs={"autocommit": True}, open=True
    )
    with PostgresSaver.from_conn_string(pg_url) as setup:
        setup.setup()
    saver = PostgresSaver(pool)
    saver.put(config_for("t"), make_checkpoint({"x": [1]}), {}, {"x": 1})
    saver.close()
    assert not pool.closed
    with pool.connection() as conn:
        assert conn.execute("SELECT count(*) FROM am_checkpoints").fetchone()[0] == 1
    pool.close()


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("postgresql://u@h/db", {"keepalives": "1", "keepalives_idle": "30"}),
        ("postgresql://u@h/db?keepalives_idle=5", {"keepalives": "1", "keepalives_idle": "5"}),
        ("host=h dbname=db keepalives=0", {"keepalives": "0", "keepalives_idle": "30"}),
    ],
)
def test_keepalives_are_defaults_a_url_can_override(given: str, expected: dict[str, str]) -> None:
    from psycopg.conninfo import conninfo_to_dict

    params = conninfo_to_dict(with_keepalives(given))
    assert {k: params[k] for k in expected} == expected
    assert params["host"] == "h" and params["dbname"] == "db"
