"""Single statements through psycopg's libpq layer (``db/pgwire.py``), on a real server: the
same values and errors as a cursor, recovery from prepared statements the server dropped,
and a connection left usable after an error or a cancelled task."""

from __future__ import annotations

import asyncio
import datetime
import decimal
import math
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

psycopg = pytest.importorskip("psycopg")

from langgraph_checkpoint_agent_memory.db import pgwire  # noqa: E402

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.binary(max_size=40),
    st.decimals(allow_nan=False, allow_infinity=False, places=3),
    st.datetimes(timezones=st.just(datetime.timezone.utc)),
    st.lists(st.integers(min_value=-(2**31), max_value=2**31 - 1), max_size=4),
)


def _outcome(call: Any) -> Any:
    """What a call returned, or the class and SQLSTATE of what it raised."""
    try:
        return ("rows", call())
    except psycopg.Error as exc:
        return ("error", type(exc), exc.sqlstate)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, tuple | list) and isinstance(b, tuple | list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b and type(a) is type(b))


def test_values_and_errors_match_a_cursor(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:

        @settings(
            max_examples=150,
            deadline=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture],
        )
        @given(a=SCALARS, b=SCALARS, raw=st.binary(max_size=64))
        def check(a: Any, b: Any, raw: bytes) -> None:
            named = "SELECT %(a)s, %(b)s, %(raw)b, %(a)s IS NULL, '100%%'"
            params = {"a": a, "b": b, "raw": raw}
            ours = _outcome(lambda: pgwire.execute(conn, named, params, True))
            theirs = _outcome(lambda: [tuple(r) for r in conn.execute(named, params).fetchall()])
            assert _same(ours, theirs), (ours, theirs)
            positional = "SELECT %s, %s, %b"
            ours = _outcome(lambda: pgwire.execute(conn, positional, (a, b, raw), True))
            theirs = _outcome(lambda: [tuple(r) for r in conn.execute(positional, (a, b, raw))])
            assert _same(ours, theirs), (ours, theirs)
            assert conn.pgconn.transaction_status == psycopg.pq.TransactionStatus.IDLE

        check()


def test_row_counts_and_prepared_once(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True, prepare_threshold=0) as conn:
        conn.execute("CREATE TABLE t (k text PRIMARY KEY, v bytea)")
        insert = "INSERT INTO t (k, v) VALUES (%(k)s, %(v)b) ON CONFLICT DO NOTHING"

        def prepared() -> list[str]:
            sql = "SELECT statement FROM pg_prepared_statements WHERE name LIKE 'am\\_%'"
            return [r[0] for r in conn.execute(sql)]

        assert pgwire.execute(conn, insert, {"k": "a", "v": b"\x00\x01"}, False) == 1
        assert pgwire.execute(conn, insert, {"k": "a", "v": b"\x02"}, False) == 0
        assert prepared() == ["INSERT INTO t (k, v) VALUES ($1, $2) ON CONFLICT DO NOTHING"]
        assert pgwire.execute(conn, insert, {"k": "b", "v": None}, False) == 1
        rows = pgwire.execute(conn, "SELECT k, v FROM t ORDER BY k", (), True)
        assert rows == [("a", b"\x00\x01"), ("b", None)]
        assert len(prepared()) <= 3  # at most one more insert, for the NULL's parameter type


def test_prepared_after_the_threshold_and_at_most_prepared_max(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True, prepare_threshold=2) as conn:
        conn.prepared_max = 2

        def ours() -> list[str]:
            sql = "SELECT statement FROM pg_prepared_statements WHERE name LIKE 'am\\_%'"
            return sorted(r[0] for r in conn.execute(sql))

        for expected in ([], [], ["SELECT $1::int + 1"], ["SELECT $1::int + 1"]):
            assert pgwire.execute(conn, "SELECT %s::int + 1", (1,), True) == [(2,)]
            assert ours() == expected
        for _ in range(3):
            assert pgwire.execute(conn, "SELECT %s::int + 2", (1,), True) == [(3,)]
            assert pgwire.execute(conn, "SELECT %s::int + 3", (1,), True) == [(4,)]
        # the third statement to be prepared deallocated the least recently used one
        assert ours() == ["SELECT $1::int + 2", "SELECT $1::int + 3"]
        for _ in range(3):
            assert pgwire.execute(conn, "SELECT %s::int + 1", (1,), True) == [(2,)]
        assert ours() == ["SELECT $1::int + 1", "SELECT $1::int + 3"]


def test_statements_the_server_dropped_are_prepared_again(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True, prepare_threshold=0) as conn:
        conn.execute("CREATE TABLE t (k integer PRIMARY KEY)")
        insert = "INSERT INTO t (k) VALUES (%(k)s)"
        select = "SELECT * FROM t ORDER BY k"
        assert pgwire.execute(conn, insert, {"k": 1}, False) == 1
        assert pgwire.execute(conn, select, (), True) == [(1,)]
        conn.execute("DEALLOCATE ALL")  # as a pool's reset with DISCARD ALL would
        assert pgwire.execute(conn, insert, {"k": 2}, False) == 1
        # every statement was forgotten at once, not each after a failed attempt of its own:
        # only the insert, just prepared again, is known
        assert [q for q, _ in pgwire._state(conn).prepared] == [b"INSERT INTO t (k) VALUES ($1)"]
        # applied once: the failed attempt ran nothing
        assert conn.execute("SELECT count(*) FROM t").fetchone() == (2,)
        assert pgwire.execute(conn, select, (), True) == [(1,), (2,)]
        conn.execute("ALTER TABLE t ADD COLUMN note text DEFAULT 'n'")
        # "cached plan must not change result type": prepared again, with the new column
        assert pgwire.execute(conn, select, (), True) == [(1, "n"), (2, "n")]


def test_an_error_leaves_the_connection_usable(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (k integer PRIMARY KEY)")
        insert = "INSERT INTO t (k) VALUES (%(k)s)"
        pgwire.execute(conn, insert, {"k": 1}, False)
        with pytest.raises(psycopg.errors.UniqueViolation):
            pgwire.execute(conn, insert, {"k": 1}, False)
        with pytest.raises(psycopg.errors.SyntaxError):
            pgwire.execute(conn, "SELEC 1", (), True)
        with pytest.raises(TypeError, match="takes a mapping"):
            pgwire.execute(conn, insert, (1,), False)
        with pytest.raises(TypeError, match="takes a sequence"):
            pgwire.execute(conn, "SELECT %s", {"k": 1}, True)
        with pytest.raises(TypeError, match="takes 1 parameters, 2 were given"):
            pgwire.execute(conn, "SELECT %s", (1, 2), True)
        with pytest.raises(KeyError):
            pgwire.execute(conn, insert, {"other": 1}, False)
        assert conn.pgconn.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert pgwire.execute(conn, insert, {"k": 2}, False) == 1
        assert conn.execute("SELECT count(*) FROM t").fetchone() == (2,)


def test_a_dropped_or_closed_connection_is_reported(pg_url: str) -> None:
    conn = psycopg.connect(pg_url, autocommit=True)
    pid = pgwire.execute(conn, "SELECT pg_backend_pid()", (), True)[0][0]
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))
    with pytest.raises(psycopg.OperationalError):
        pgwire.execute(conn, "SELECT 1", (), True)
    conn.close()
    with pytest.raises(psycopg.OperationalError, match="closed"):
        pgwire.execute(conn, "SELECT 1", (), True)


async def test_a_cancelled_task_cancels_its_statement(pg_url: str) -> None:
    conn = await psycopg.AsyncConnection.connect(pg_url, autocommit=True)
    try:
        started = time.monotonic()
        task = asyncio.create_task(pgwire.aexecute(conn, "SELECT pg_sleep(30)", (), True))
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert time.monotonic() - started < 10
        assert conn.pgconn.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert await pgwire.aexecute(conn, "SELECT %(x)s::int + 1", {"x": 1}, True) == [(2,)]
    finally:
        await conn.close()


def test_pgbouncer_style_connections_are_not_prepared_on(pg_url: str) -> None:
    from langgraph_checkpoint_agent_memory import PostgresSaver
    from tests.helpers import config_for, make_checkpoint

    for threshold, expect_prepared in ((None, False), (0, True)):
        conn = psycopg.connect(pg_url, autocommit=True, prepare_threshold=threshold)
        assert pgwire.usable(conn) is expect_prepared
        saver = PostgresSaver(conn)
        saver.setup()
        thread = f"t-{threshold}"
        saver.put(config_for(thread), make_checkpoint({"x": [1]}), {}, {"x": 1})
        assert saver.get_tuple(config_for(thread)).checkpoint["channel_values"] == {"x": [1]}
        ours = conn.execute(
            "SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'am\\_%'"
        ).fetchone()[0]
        assert (ours > 0) is expect_prepared
        saver.close()
        conn.close()


@pytest.mark.parametrize(
    ("text", "query", "names"),
    [
        ("SELECT %(a)s, %(b)b, %(a)s", b"SELECT $1, $2, $1", ("a", "b")),
        ("SELECT %s, %b, %t", b"SELECT $1, $2, $3", None),
        ("SELECT '5%%', %(x)s", b"SELECT '5%', $1", ("x",)),
        ("SELECT 1", b"SELECT 1", None),
    ],
)
def test_placeholders_become_numbered(text: str, query: bytes, names: Any) -> None:
    converted = pgwire.convert(text)
    assert converted.query == query
    assert converted.names == names


@pytest.mark.parametrize("text", ["SELECT %(a)s, %s", "SELECT %(a)s, %(a)b", "SELECT %(a)%"])
def test_bad_placeholders_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        pgwire.convert(text)


def test_decimal_and_text_keep_their_types(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        rows = pgwire.execute(
            conn, "SELECT %(d)s::numeric, %(s)s", {"d": decimal.Decimal("1.50"), "s": "é"}, True
        )
        assert rows == [(decimal.Decimal("1.50"), "é")]


@pytest.mark.parametrize(("threshold", "prepared"), [(None, False), (1, True)])
def test_saver_pools_take_prepare_threshold(pg_url: str, threshold: Any, prepared: bool) -> None:
    from langgraph_checkpoint_agent_memory import PostgresSaver
    from langgraph_checkpoint_agent_memory.db.database import Batch, Stmt
    from langgraph_checkpoint_agent_memory.db.dialect import Sql
    from tests.helpers import config_for, make_checkpoint

    saver = PostgresSaver(pg_url, pool_size=1, prepare_threshold=threshold)
    stored = saver.put(config_for("t"), make_checkpoint({"x": [1]}), {}, {"x": 1})
    for task in range(7):  # the same statement, more times than psycopg's default threshold
        saver.put_writes(stored, [("x", 2)], f"task-{task}")
    assert len(saver.get_tuple(stored).pending_writes) == 7

    def plan() -> Any:
        # on the pool's one connection, whose prepared statements these are; two statements
        # go through a cursor, so the count does not prepare itself
        sql = "SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'am\\_%%'"
        [rows, _] = yield Batch([Stmt(Sql(sql), (), fetch=True), Stmt(Sql("SELECT 1"), fetch=True)])
        return rows[0][0]

    assert (saver.db.run(plan()) > 0) is prepared
    saver.close()


@pytest.mark.parametrize("bad", [0, -1, True, "5", 1.5])
def test_a_bad_prepare_threshold_is_refused(bad: Any) -> None:
    from langgraph_checkpoint_agent_memory import PostgresSaver
    from langgraph_checkpoint_agent_memory.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="prepare_threshold"):
        PostgresSaver("postgresql://nobody@127.0.0.1:1/none", prepare_threshold=bad)


def test_prepare_threshold_is_for_postgresql_stores_only(tmp_path: Any) -> None:
    from langgraph_checkpoint_agent_memory import create_store
    from langgraph_checkpoint_agent_memory.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="PostgreSQL only, not to sqlite"):
        create_store(f"sqlite:///{tmp_path / 'x.db'}", prepare_threshold=None)
