"""PostgreSQL outages, restarts and refusals on a server of the test's own (stopped and
restarted with ``pg_ctl``): every failure reaches the caller as the package's error, a
restart costs no call on idle pooled connections, and a definite refusal fails at once,
saying what was refused."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

psycopg = pytest.importorskip("psycopg")
psycopg_pool = pytest.importorskip("psycopg_pool")

from langgraph_checkpoint_agent_memory import (  # noqa: E402
    AgentMemory,
    PostgresSaver,
    create_store,
)
from langgraph_checkpoint_agent_memory.errors import DatabaseUnavailableError  # noqa: E402
from tests.helpers import config_for, make_checkpoint, present  # noqa: E402
from tests.pg import SERVER_IDS, SERVERS  # noqa: E402
from tests.servers import LocalPostgres, runuser  # noqa: E402

pytestmark = pytest.mark.postgres


class Server:
    """A throwaway cluster this module may stop and restart."""

    def __init__(self, local: LocalPostgres) -> None:
        self.local = local
        self.url = local.create_database()

    def pg_ctl(self, *args: str) -> None:
        cmd = [str(self.local.bindir / "pg_ctl"), "-D", str(self.local.data), "-w", *args]
        if self.local.as_root:
            cmd = [runuser(), "-u", self.local.os_user, "--", *cmd]
        subprocess.run(cmd, check=True, capture_output=True)

    def stop(self) -> None:
        self.pg_ctl("-m", "fast", "stop")

    def start(self) -> None:
        local = self.local
        options = f"-p {local.port} -c listen_addresses=127.0.0.1 -k {local.root} -c fsync=off"
        self.pg_ctl("-o", options, "-l", str(local.root / "server.log"), "start")

    def restart(self) -> None:
        self.stop()
        self.start()


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    binaries = SERVERS[SERVER_IDS[0]] if SERVER_IDS else None
    if binaries is None:
        pytest.skip("no PostgreSQL server this machine can start")
    with LocalPostgres(binaries, fsync=False) as local:
        yield Server(local)


@pytest.fixture
def up(server: Server) -> Iterator[Server]:
    """The server, running at the start and at the end of the test."""
    yield server
    try:
        with psycopg.connect(server.url, connect_timeout=2):
            return
    except psycopg.OperationalError:
        server.start()


def _calls(url: str, connect_timeout: float = 10) -> tuple[PostgresSaver, Any, AgentMemory[Any]]:
    """A saver, a store and a memory whose pooled connections go out unchecked for 60 s,
    so a call meets what the outage did to them."""
    options: dict[str, Any] = {"connect_timeout": connect_timeout, "check_after_idle": 60}
    saver = PostgresSaver(url, **options)
    store = create_store(url, **options)
    memory = AgentMemory(store)
    saver.setup()
    saver.put(config_for("t"), make_checkpoint({"x": [1]}), {}, {"x": 1})
    store.put(("docs",), "a", {"text": "hello"})
    memory.record("user=alice", [{"role": "user", "content": "I moved to Berlin"}])
    return saver, store, memory


def _each_call(
    saver: PostgresSaver, store: Any, memory: AgentMemory[Any], n: int
) -> dict[str, Any]:
    return {
        "saver.put": lambda: saver.put(
            config_for("t"), make_checkpoint({"x": [n]}, step=n, version=n), {}, {"x": n}
        ),
        "saver.get_tuple": lambda: saver.get_tuple(config_for("t")),
        "store.put": lambda: store.put(("docs",), f"k{n}", {"text": "again"}),
        "store.search": lambda: store.search(("docs",), filter={"text": "hello"}),
        "memory.record": lambda: memory.record(
            "user=alice", [{"role": "user", "content": f"turn {n}"}]
        ),
        "memory.facts": lambda: memory.facts("user=alice"),
    }


def test_an_outage_is_database_unavailable_for_every_call(up: Server) -> None:
    saver, store, memory = _calls(up.url, connect_timeout=2)
    up.stop()
    for name, call in _each_call(saver, store, memory, 2).items():
        with pytest.raises(DatabaseUnavailableError) as raised:
            call()
        assert "\n" not in str(raised.value), name
    up.start()
    for call in _each_call(saver, store, memory, 3).values():
        call()  # the same objects work again once the server is back
    saver.close()
    store.close()


def test_a_restart_between_two_calls_costs_no_call(up: Server) -> None:
    """Idle pooled connections a restart closed are found broken at checkout and
    replaced, though they sat unused for far less than ``check_after_idle``."""
    saver, store, memory = _calls(up.url)
    try:
        up.restart()
        for call in _each_call(saver, store, memory, 4).values():
            call()
        latest = present(saver.get_tuple(config_for("t")))
        assert latest.checkpoint["channel_values"] == {"x": [4]}
    finally:
        saver.close()
        store.close()


async def test_a_restart_between_two_async_calls_costs_no_call(up: Server) -> None:
    import asyncio

    saver, store, memory = _calls(up.url)
    try:
        names = list(_each_call(saver, store, memory, 0))
        for n, name in enumerate(names):  # the async pools of this loop hold connections
            await _acall(saver, store, memory, name, n)
        await asyncio.to_thread(up.restart)
        for n, name in enumerate(names):
            await _acall(saver, store, memory, name, n)
        latest = present(await saver.aget_tuple(config_for("t")))
        assert latest.checkpoint["channel_values"] == {"x": [4]}
    finally:  # a failure must not leave pools behind
        await saver.aclose()
        await store.aclose()


async def _acall(
    saver: PostgresSaver, store: Any, memory: AgentMemory[Any], name: str, n: int
) -> Any:
    if name == "saver.put":
        return await saver.aput(
            config_for("t"), make_checkpoint({"x": [4]}, step=4, version=4), {}, {"x": 4}
        )
    if name == "saver.get_tuple":
        return await saver.aget_tuple(config_for("t"))
    if name == "store.put":
        return await store.aput(("docs",), f"a{n}", {"text": "again"})
    if name == "store.search":
        return await store.asearch(("docs",), filter={"text": "hello"})
    if name == "memory.record":
        return await memory.arecord("user=alice", [{"role": "user", "content": f"a{n}"}])
    return await memory.afacts("user=alice")


def _counting_connects(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    attempts: list[str] = []
    real = psycopg.Connection.connect.__func__

    def connect(cls: Any, /, conninfo: str = "", **kwargs: Any) -> Any:
        attempts.append(conninfo)
        return real(cls, conninfo, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "connect", classmethod(connect))
    # psycopg.connect is the classmethod bound at import: count it too
    monkeypatch.setattr(psycopg, "connect", psycopg.Connection.connect)
    return attempts


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ("/no_such_db", 'database "no_such_db" does not exist'),
        ("role", 'role "no_such_role" does not exist'),
        ("port", "Connection refused"),
    ],
)
def test_a_definite_refusal_fails_at_once_saying_what(
    up: Server, monkeypatch: pytest.MonkeyPatch, change: str, said: str
) -> None:
    """One attempt, not retries for ``connect_timeout`` seconds: the server said no."""
    url = up.url
    if change == "role":
        url = url.replace(f"//{up.local.user}@", "//no_such_role@")
    elif change == "port":
        url = url.replace(f":{up.local.port}/", ":9/")
    else:
        url = url.rsplit("/", 1)[0] + change
    attempts = _counting_connects(monkeypatch)
    saver = PostgresSaver(url, connect_timeout=10)
    with pytest.raises(DatabaseUnavailableError, match=said) as raised:
        saver.get_tuple(config_for("t"))
    assert "\n" not in str(raised.value)
    assert len(attempts) == 1


def test_an_open_pool_rides_out_a_short_outage(up: Server) -> None:
    """Once a pool is open, a refused connection is an outage, not a mistake: the pool
    keeps trying for ``connect_timeout`` seconds."""
    import threading

    saver = PostgresSaver(up.url, connect_timeout=60)
    assert saver.get_tuple(config_for("nothing")) is None
    up.stop()
    starter = threading.Timer(0.5, up.start)
    starter.start()
    try:
        assert saver.get_tuple(config_for("nothing")) is None
    finally:
        starter.join()
    saver.close()


@pytest.mark.parametrize(
    ("error", "definite"),
    [
        (psycopg.OperationalError('failed: FATAL:  database "x" does not exist'), True),
        (psycopg.OperationalError("failed: FATAL:  password authentication failed"), True),
        (psycopg.OperationalError("failed: FATAL:  sorry, too many clients already"), False),
        (psycopg.OperationalError("failed: FATAL:  the database system is shutting down"), False),
        (psycopg.OperationalError("connection timeout expired"), False),
        (psycopg.OperationalError("failed: FATAL:  the database system is starting up"), False),
        (psycopg.OperationalError('failed: FATAL:  role "y" does not exist'), True),
        (
            psycopg.OperationalError(
                'connection failed: connection to server at "127.0.0.1", port 9 failed: '
                "Connection refused\n\tIs the server running on that host?"
            ),
            True,
        ),
    ],
)
def test_which_connect_failures_are_definite(error: Exception, definite: bool) -> None:
    from langgraph_checkpoint_agent_memory.db.postgres import definite_refusal

    assert definite_refusal(error) is definite


def test_a_client_side_failure_mid_pipeline_is_database_unavailable(up: Server) -> None:
    """libpq's own failures carry no SQLSTATE; on a socket closed mid-pipeline psycopg
    raises one ("cannot exit pipeline mode while busy") before it marks the connection
    broken. A server's error about a statement stays as it is."""
    from langgraph_checkpoint_agent_memory.db.postgres import PgSession

    with psycopg.connect(up.url, autocommit=True) as conn:
        session = PgSession(conn)
        busy = psycopg.OperationalError("cannot exit pipeline mode while busy")
        assert isinstance(session.lost(busy), DatabaseUnavailableError)
        shutdown = psycopg.errors.AdminShutdown("terminating connection")
        assert isinstance(session.lost(shutdown), DatabaseUnavailableError)
        cancelled = psycopg.errors.QueryCanceled("canceling statement due to statement timeout")
        assert session.lost(cancelled) is cancelled


def test_a_coordinator_whose_postmaster_died_is_database_unavailable(up: Server) -> None:
    """Citus's coordinator reports its postmaster's death while it waits on a worker as
    ``postmaster was shut down, exiting`` under SQLSTATE XX000 (it gives no code of its
    own): the database is unavailable, in a lone statement and in a pipeline, sync and
    async. Raised here by the server itself with that code and message; another XX000
    error stays as it is."""
    import asyncio

    from langgraph_checkpoint_agent_memory.db.database import Batch, Stmt
    from langgraph_checkpoint_agent_memory.db.dialect import Sql
    from langgraph_checkpoint_agent_memory.db.postgres import PgSession

    def raising(message: str) -> Stmt:
        return Stmt(
            Sql(
                "DO $$ BEGIN RAISE EXCEPTION USING ERRCODE = 'XX000', "
                f"MESSAGE = '{message}'; END $$"
            )
        )

    def plan(message: str, *, alone: bool) -> Any:
        statements = [raising(message)] if alone else [Stmt(Sql("SELECT 1")), raising(message)]
        yield Batch(statements, write=True)

    saver = PostgresSaver(up.url)
    for alone in (True, False):
        with pytest.raises(DatabaseUnavailableError, match="postmaster was shut down"):
            saver.db.run(plan("postmaster was shut down, exiting", alone=alone))
        with pytest.raises(psycopg.errors.InternalError_, match="no such block"):
            saver.db.run(plan("no such block", alone=alone))

    async def calls() -> None:
        for alone in (True, False):
            with pytest.raises(DatabaseUnavailableError, match="postmaster was shut down"):
                await saver.db.arun(plan("postmaster was shut down, exiting", alone=alone))
        await saver.db.aclose()

    asyncio.run(calls())
    with psycopg.connect(up.url, autocommit=True) as conn:
        session = PgSession(conn)
        gone = psycopg.errors.InternalError_("postmaster was shut down, exiting")
        assert isinstance(session.lost(gone), DatabaseUnavailableError)
        other = psycopg.errors.InternalError_("could not find block containing chunk")
        assert session.lost(other) is other


def _switch_off_the_checkout_check(monkeypatch: pytest.MonkeyPatch) -> None:
    from langgraph_checkpoint_agent_memory.db import postgres

    monkeypatch.setattr(postgres, "closed_by_server", lambda conn: None)


def test_a_read_found_lost_at_first_use_is_sent_again_a_write_is_not(
    up: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A connection lost in a way the checkout check cannot see (cut without the server's
    goodbye; simulated by turning that check off) fails at its first batch: a read is sent
    again on a fresh connection; a write, which may have been applied, is not."""
    _switch_off_the_checkout_check(monkeypatch)
    # one connection: the call after the failed write gets the fresh one
    saver = PostgresSaver(up.url, pool_size=1, connect_timeout=10, check_after_idle=60)
    stored = saver.put(config_for("t"), make_checkpoint({"x": [1]}), {}, {"x": 1})
    up.restart()
    assert present(saver.get_tuple(stored)).checkpoint["channel_values"] == {"x": [1]}
    up.restart()
    with pytest.raises(DatabaseUnavailableError, match="lost"):
        saver.put(config_for("t"), make_checkpoint({"x": [2]}, step=2, version=2), {}, {"x": 2})
    saver.put(config_for("t"), make_checkpoint({"x": [3]}, step=3, version=3), {}, {"x": 3})
    latest = present(saver.get_tuple(config_for("t")))
    assert latest.checkpoint["channel_values"] == {"x": [3]}
    saver.close()


async def test_an_async_read_found_lost_at_first_use_is_sent_again_a_write_is_not(
    up: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    _switch_off_the_checkout_check(monkeypatch)
    saver = PostgresSaver(up.url, pool_size=1, connect_timeout=10, check_after_idle=60)
    stored = await saver.aput(config_for("t"), make_checkpoint({"x": [1]}), {}, {"x": 1})
    await asyncio.to_thread(up.restart)
    assert present(await saver.aget_tuple(stored)).checkpoint["channel_values"] == {"x": [1]}
    await asyncio.to_thread(up.restart)
    with pytest.raises(DatabaseUnavailableError, match="lost"):
        await saver.aput(
            config_for("t"), make_checkpoint({"x": [2]}, step=2, version=2), {}, {"x": 2}
        )
    await saver.aput(config_for("t"), make_checkpoint({"x": [3]}, step=3, version=3), {}, {"x": 3})
    latest = present(await saver.aget_tuple(config_for("t")))
    assert latest.checkpoint["channel_values"] == {"x": [3]}
    await saver.aclose()


def test_a_read_lost_while_the_server_is_down_returns_its_connection_once(
    up: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read found lost at first use whose fresh connection cannot be had (the server is
    down) fails as the package's error, the lost connection given back to its pool once:
    the saver works again when the server is back."""
    _switch_off_the_checkout_check(monkeypatch)
    saver = PostgresSaver(up.url, pool_size=1, connect_timeout=2, check_after_idle=60)
    stored = saver.put(config_for("t"), make_checkpoint({"x": [1]}), {}, {"x": 1})
    up.stop()
    with pytest.raises(DatabaseUnavailableError):
        saver.get_tuple(stored)
    up.start()
    assert present(saver.get_tuple(stored)).checkpoint["channel_values"] == {"x": [1]}
    saver.close()
