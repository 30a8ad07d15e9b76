from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from langgraph_checkpoint_agent_memory import AgentMemoryStore, SQLSaver, settings
from tests.helpers import PACKAGE_ENVIRONMENT, FakeClock
from tests.pg import (
    SERVER_IDS,
    PgServer,
    PgServers,
    backend_params,
    is_postgres,
    pg_database,
    pg_params,
)

HANA_URL_ENV = "AGENT_MEMORY_TEST_HANA_URL"

#: Set to 1 to run every PostgreSQL test on every server of the machine.
EVERY_SERVER_ENV = "AGENT_MEMORY_TEST_EVERY_SERVER"

#: Test modules whose PostgreSQL tests run on every server of the machine: those where the
#: server's version or pgvector changes what the package does (conformance, the store's
#: searches and vectors, schemas, migrations, first starts, keys). The other modules run on
#: the first server (with PgBouncer in front of it and Citus built on it): their SQL is the
#: same on every version, and running them again on the second server cost CI minutes
#: without finding anything the first did not. ``AGENT_MEMORY_TEST_EVERY_SERVER=1`` runs
#: everything everywhere.
EVERY_SERVER_MODULES = frozenset(
    {
        "test_codec_rows",
        "test_crypto",
        "test_dialect_sql",
        "test_encryption_store",
        "test_fresh_start",
        "test_memory_dates",
        "test_memory_fact_search",
        "test_memory_tools",
        "test_migrations",
        "test_pg_schema",
        "test_pg_servers",
        "test_posting_blocks",
        "test_shard",
        "test_sql_conformance",
        "test_store",
        "test_store_lexical",
        "test_store_properties",
        "test_store_settings",
        "test_store_vectors",
    }
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the later servers' runs of the modules outside :data:`EVERY_SERVER_MODULES`."""
    later = SERVER_IDS[1:]
    if not later or os.environ.get(EVERY_SERVER_ENV) == "1":
        return
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        module = item.nodeid.split("::", 1)[0].rsplit("/", 1)[-1].removesuffix(".py")
        elsewhere = module not in EVERY_SERVER_MODULES and _runs_on(item, later)
        (drop if elsewhere else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def _runs_on(item: pytest.Item, servers: list[str]) -> bool:
    """Whether one of the item's parameters names one of ``servers`` (``pg18vector``,
    ``postgres-pg18vector``)."""
    params = getattr(item, "callspec", None)
    values = [v for v in (params.params.values() if params else ()) if isinstance(v, str)]
    return any(v == sid or v.endswith("-" + sid) for v in values for sid in servers)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(autouse=True)
def _isolated_settings(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No test sees another's @agent_config declarations, overrides or environment, even one
    that a docstring example set in ``os.environ`` directly."""
    environ = dict(os.environ)
    saved = dict(settings._registry)
    for name in PACKAGE_ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    yield
    settings._registry.clear()
    settings._registry.update(saved)
    settings.clear_override()
    if dict(os.environ) != environ:
        os.environ.clear()
        os.environ.update(environ)


@pytest.fixture(scope="session")
def pg_servers() -> Iterator[PgServers]:
    """Every PostgreSQL server of the session (tests/pg.py), each started on first use."""
    servers = PgServers()
    yield servers
    servers.stop()


@pytest.fixture(params=pg_params())
def pg_server(request: pytest.FixtureRequest, pg_servers: PgServers) -> PgServer:
    """One PostgreSQL server; a test that uses it runs once per server (``[pg15]``,
    ``[pg18vector]``)."""
    return pg_servers.get(str(request.param))


@pytest.fixture
def pg_url(pg_server: PgServer) -> Iterator[str]:
    """A fresh, empty database for this test, dropped after it."""
    url = pg_server.fresh_database()
    yield url
    pg_server.drop(url)


BACKENDS = backend_params("sqlite", "postgres")


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def database_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """A URL for an empty database of the parametrized backend."""
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'memory.db'}"
    return pg_database(request, backend)


@pytest.fixture
def make_saver(database_url: str) -> Iterator[Callable[..., SQLSaver]]:
    """Open savers on this test's database; all are closed at the end."""
    from langgraph_checkpoint_agent_memory.checkpoint.backends import PostgresSaver, SqliteSaver

    opened: list[SQLSaver] = []

    def make(**kwargs: Any) -> SQLSaver:
        cls = SqliteSaver if database_url.startswith("sqlite") else PostgresSaver
        saver = cls(database_url, **kwargs)
        opened.append(saver)
        return saver

    yield make
    for saver in opened:
        saver.stop_sweeper()
        try:
            saver.db.close()
        except Exception:
            pass


#: The backends of the store's tests (parametrized in :func:`pytest_generate_tests`).
STORE_BACKENDS = backend_params("memory", "sqlite", "postgres")


@pytest.fixture
def store_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


#: Test modules (by name prefix) whose stores of :func:`make_store` run both without and
#: with encryption at rest; the others use plain stores only.
ENCRYPTED_MODULES = ("test_store",)


def _store_cases(backends: list[Any]) -> list[Any]:
    """``(backend, plain|encrypted)`` cases of the modules of :data:`ENCRYPTED_MODULES`: plain
    on every backend of the module, encrypted on memory and SQLite. Encryption on PostgreSQL
    (both servers, pgvector's column left out), PgBouncer and Citus is
    tests/test_encryption_store.py's and the encrypted conformance suite's: the store's whole
    suite again on each server would add minutes to every run for what those show."""
    cases = []
    for backend in backends:
        marks = getattr(backend, "marks", ())
        value = _value(backend)
        cases.append(pytest.param(value, "plain", marks=marks, id=f"{value}-plain"))
        if not is_postgres(value):
            cases.append(pytest.param(value, "encrypted", marks=marks, id=f"{value}-encrypted"))
    return cases


def _value(param: Any) -> str:
    return str(param.values[0] if hasattr(param, "values") else param)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    names = metafunc.fixturenames
    if "store_backend" not in names:
        return
    own = any(
        "store_backend" in str(m.args[0]) for m in metafunc.definition.iter_markers("parametrize")
    )
    both = metafunc.module.__name__.rsplit(".", 1)[-1].startswith(ENCRYPTED_MODULES)
    backends = getattr(metafunc.module, "STORE_BACKENDS", STORE_BACKENDS)
    if not own and both and "store_encryption" in names:
        cases = _store_cases(backends)
        metafunc.parametrize(("store_backend", "store_encryption"), cases, indirect=True)
        return
    if not own:
        metafunc.parametrize("store_backend", backends, indirect=True)
    if "store_encryption" in names:
        metafunc.parametrize("store_encryption", ["plain"], indirect=True)


@pytest.fixture
def store_encryption(request: pytest.FixtureRequest) -> str | bool:
    """Stores of :func:`make_store` without encryption, and, in the modules of
    :data:`ENCRYPTED_MODULES`, with it (one master key per test, so stores reopened in a
    test read what earlier ones wrote): the same tests, the same results."""
    if request.param == "plain":
        return False
    from langgraph_checkpoint_agent_memory import generate_master_key

    return generate_master_key()


@pytest.fixture
def make_store(
    store_backend: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    store_encryption: str | bool,
) -> Iterator[Callable[..., AgentMemoryStore]]:
    """Open stores of the parametrized backend on one database, with and without
    encryption (``store_encryption``); all closed at the end."""
    from langgraph_checkpoint_agent_memory import create_store

    url = {
        "memory": None,
        "sqlite": f"sqlite:///{tmp_path / 'store.db'}",
    }.get(store_backend) or (
        pg_database(request, store_backend) if is_postgres(store_backend) else None
    )
    opened: list[AgentMemoryStore] = []

    def make(**kwargs: Any) -> AgentMemoryStore:
        kwargs.setdefault("encryption", store_encryption)
        store = create_store(url, **kwargs)
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()
