from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from langgraph_checkpoint_agent_memory import settings
from tests.helpers import FakeClock

PG_URL_ENV = "AGENT_MEMORY_TEST_PG_URL"
HANA_URL_ENV = "AGENT_MEMORY_TEST_HANA_URL"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(autouse=True)
def _isolated_settings(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No test sees another's @agent_config declarations, overrides or environment."""
    saved = dict(settings._registry)
    for name in (
        settings.CONFIG_FILE_ENV,
        "AGENT_MEMORY_URL",
        "VCAP_SERVICES",
        "SERVICE_BINDING_ROOT",
    ):
        monkeypatch.delenv(name, raising=False)
    yield
    settings._registry.clear()
    settings._registry.update(saved)
    settings.clear_override()


class PgServer:
    """A PostgreSQL server for the session: the one in AGENT_MEMORY_TEST_PG_URL, or a
    throwaway cluster started from the machine's server binaries."""

    def __init__(self) -> None:
        self.local: Any = None
        url = os.environ.get(PG_URL_ENV)
        if url:
            self.url = url
        else:
            from langgraph_checkpoint_agent_memory.testing import LocalPostgres

            self.local = LocalPostgres(fsync=False)
            self.url = self.local.start()

    def fresh_database(self) -> str:
        import uuid

        import psycopg

        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url.rsplit("/", 1)[0] + f"/{name}"

    def stop(self) -> None:
        if self.local is not None:
            self.local.stop()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    from langgraph_checkpoint_agent_memory.testing import find_pg_bin

    if not os.environ.get(PG_URL_ENV) and find_pg_bin() is None:
        pytest.skip(f"no PostgreSQL server binaries on this machine and {PG_URL_ENV} is unset")
    server = PgServer()
    yield server
    server.stop()


@pytest.fixture
def pg_url(pg_server: PgServer) -> str:
    """A fresh, empty database for this test."""
    return pg_server.fresh_database()


BACKENDS = ["sqlite", "postgres"]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def database_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """A URL for an empty database of the parametrized backend."""
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'memory.db'}"
    return request.getfixturevalue("pg_url")


@pytest.fixture
def make_saver(database_url: str) -> Iterator[Callable[..., Any]]:
    """Open savers on this test's database; all are closed at the end."""
    from langgraph_checkpoint_agent_memory.checkpoint.backends import PostgresSaver, SqliteSaver

    opened: list[Any] = []

    def make(**kwargs: Any) -> Any:
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


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def store_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make_store(
    store_backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Callable[..., Any]]:
    """Open stores of the parametrized backend on one database; all closed at the end."""
    from langgraph_checkpoint_agent_memory import create_store

    url = {
        "memory": None,
        "sqlite": f"sqlite:///{tmp_path / 'store.db'}",
    }.get(store_backend) or (
        request.getfixturevalue("pg_url") if store_backend == "postgres" else None
    )
    opened: list[Any] = []

    def make(**kwargs: Any) -> Any:
        store = create_store(url, **kwargs)
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()
