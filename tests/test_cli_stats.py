"""``agent-memory stats`` on SQLite, PostgreSQL, PgBouncer in transaction mode and Citus: the
figures it prints are those of the data written (threads with TTLs, episodes pending and
parked, failed jobs), its sizes are the database's, and as a read it creates and changes
nothing."""

from __future__ import annotations

import hashlib
import re
import secrets
import time
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from langgraph_checkpoint_agent_memory import AgentMemory, create_store
from langgraph_checkpoint_agent_memory.cli import main
from langgraph_checkpoint_agent_memory.db import health
from langgraph_checkpoint_agent_memory.db.schema import metadata
from langgraph_checkpoint_agent_memory.memory import CallableExtractor
from tests.helpers import FakeClock, row_counts
from tests.pg import backend_params, libpq_url
from tests.test_cli_retention import run, saver_for
from tests.test_retention import chat_graph, talk

HOUR = 3600.0


@pytest.fixture(params=backend_params("sqlite", "postgres", "pgbouncer", "citus"))
def backend(request: pytest.FixtureRequest) -> str:
    """SQLite, each PostgreSQL server, PgBouncer in transaction mode and the Citus cluster
    (tests/pg.py)."""
    return str(request.param)


def populate(url: str) -> float:
    """Known data, written an hour ago by the apps' clocks: thread ``old`` (TTL one minute:
    expired), ``soon`` (expires in half an hour), ``later`` (in three hours), each with an
    incompressible message; the scope ``user=carol``'s episode parked by a job that failed
    for good, ``user=dave``'s pending after a failed job, and two pending episodes of
    ``user=alice``. Returns when ``dave``'s episode was recorded."""
    then = time.time() - HOUR
    past = FakeClock(start=then)
    saver = saver_for(url, ttl_seconds=60, clock=past, activity_precision=0)
    for thread, ttl in (("old", None), ("soon", 1.5 * HOUR), ("later", 4 * HOUR)):
        config: Any = {"configurable": {"thread_id": thread}}
        if ttl is not None:
            config["configurable"]["ttl_seconds"] = int(ttl)
        message = HumanMessage(secrets.token_urlsafe(30_000))  # 40 kB that do not compress
        chat_graph(saver).invoke({"messages": [message]}, config)
        talk(chat_graph(saver), config, 2)
    saver.close()
    store = create_store(url)
    nope = CallableExtractor(lambda prompt: "nope")
    gives_up = AgentMemory(store, extractor=nope, max_attempts=1, clock=past)
    gives_up.record("user=carol", [{"role": "user", "content": "I sail"}])
    assert gives_up.consolidate().failed == 1  # parked at once
    retries = AgentMemory(store, extractor=nope, max_attempts=5, clock=past)
    retries.record("user=dave", [{"role": "user", "content": "I cook"}])
    assert retries.consolidate().failed == 1  # failed, backing off, still pending
    past.advance(600)
    for said in ("I run", "I swim"):
        retries.record("user=alice", [{"role": "user", "content": said}])
    store.close()
    return then


def thread_bytes(capsys: pytest.CaptureFixture[str], url: str) -> int:
    """What the checkpoint tables hold as values, as ``threads`` measures it."""
    code, threads, _ = run(capsys, "threads", "--url", url, "--json")
    assert code == 0
    return sum(t["bytes"] for t in threads)


def server_size(url: str, function: str, table: str) -> int:
    """``function(table)`` (a size function of PostgreSQL or Citus), asked directly."""
    import psycopg

    conninfo, options = libpq_url(url)
    with psycopg.connect(conninfo, **options) as conn:
        row = conn.execute(f"SELECT {function}('{table}')").fetchone()
    assert row is not None
    return int(row[0])


def test_stats_reports_the_data_written(
    database_url: str, backend: str, capsys: pytest.CaptureFixture[str]
) -> None:
    recorded = populate(database_url)
    before = row_counts(database_url)
    code, data, _ = run(capsys, "stats", "--url", database_url, "--json")
    assert code == 0

    backlog = data["backlog"]
    assert (backlog["pending_episodes"], backlog["scopes"]) == (3, 2)  # dave's, alice's two
    assert backlog["oldest_pending_at"] == pytest.approx(recorded)  # dave's
    assert backlog["oldest_pending_age_seconds"] == pytest.approx(HOUR, abs=60)
    assert data["jobs"] == {"parked_episodes": 1, "failed_jobs": 1, "parked_jobs": 1}
    assert data["threads"] == {"total": 3, "expired": 1, "expiring": 1, "within_seconds": HOUR}

    size = data["size"]
    expected = {
        "sqlite": "dbstat",
        "citus": "citus_total_relation_size",
    }.get(backend.removeprefix("postgres-"), "pg_total_relation_size")
    assert size["measured_by"] == expected
    # every table the apps' setups created (no key store: nothing is encrypted)
    assert set(size["tables"]) == set(health.TABLE_NAMES) - {"am_keys"}
    assert list(size["components"]) == ["checkpoint", "store", "memory", "migrations"]
    assert sum(size["components"].values()) == size["total_bytes"] == sum(size["tables"].values())
    # the tables hold at least the values the threads store (30 kB messages, incompressible)
    stored = thread_bytes(capsys, database_url)
    assert stored > 3 * 40_000
    assert size["components"]["checkpoint"] >= stored
    assert all(n > 0 for n in size["tables"].values())
    if backend == "sqlite":
        assert size["file_bytes"] >= size["total_bytes"]
    else:
        assert size["file_bytes"] is None
        blobs = size["tables"]["am_checkpoint_blobs"]
        assert blobs == server_size(database_url, expected, "am_checkpoint_blobs")
        if expected.startswith("citus"):  # the rows are in shards: the coordinator's is empty
            coordinator = server_size(database_url, "pg_total_relation_size", "am_checkpoint_blobs")
            assert blobs > coordinator + 90_000

    code, wider, _ = run(
        capsys, "stats", "--url", database_url, "--json", "--within", str(5 * HOUR)
    )
    assert wider["threads"]["expiring"] == 2 and wider["threads"]["expired"] == 1
    code, text, _ = run(capsys, "stats", "--url", database_url)
    assert code == 0
    for line in ("pending episodes", "3 in 2 scope(s)", "parked jobs", "expiring within 1.0 h"):
        assert line in text, text
    assert f"database size ({expected})" in text and "checkpoint" in text
    assert row_counts(database_url) == before  # read only: nothing written


def test_sqlite_without_dbstat_reports_sizes_as_unknown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sqlite3 library built without the ``dbstat`` table: each size is unknown (null),
    the file's size is still given."""
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    assert main(["migrate", "--url", url]) == 0
    capsys.readouterr()
    monkeypatch.setattr(health, "DBSTAT", "no_such_dbstat")
    code, data, _ = run(capsys, "stats", "--url", url, "--json")
    assert code == 0
    size = data["size"]
    assert size["measured_by"] is None and size["total_bytes"] is None
    assert set(size["tables"]) == set(health.TABLE_NAMES)
    assert set(size["tables"].values()) == {None}
    assert set(size["components"].values()) == {None}
    assert size["file_bytes"] == (tmp_path / "memory.db").stat().st_size
    code, text, _ = run(capsys, "stats", "--url", url)
    assert "per table unknown" in text and "unknown" in text


def test_every_table_of_the_schema_is_in_one_component() -> None:
    assert sorted(health.TABLE_NAMES) == sorted(metadata.tables)
    assert len(set(health.TABLE_NAMES)) == len(health.TABLE_NAMES)


def test_a_missing_sqlite_database_is_not_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'absent' / 'memory.db'}"
    code, _, err = run(capsys, "stats", "--url", url)
    assert code == 2 and err.count("\n") == 1 and "does not exist" in err
    assert err.startswith("agent-memory stats: error:")
    assert not (tmp_path / "absent").exists()


def test_an_empty_postgresql_database_is_left_alone(
    pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """As the other read commands: one line, status 1, and still no table."""
    code, _, err = run(capsys, "stats", "--url", pg_url, "--json")
    assert code == 1 and err.count("\n") == 1 and "no agent memory database" in err
    assert row_counts(pg_url) == {}


def test_a_file_read_is_left_as_it_was(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "memory.db"
    populate(f"sqlite:///{path}")
    files = sorted(p.name for p in tmp_path.iterdir())
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    for args in ([], ["--json"]):
        assert run(capsys, "stats", "--url", str(path), *args)[0] == 0
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest
    assert sorted(p.name for p in tmp_path.iterdir()) == files


def test_within_must_be_positive(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "stats", "--within", "0", "--url", str(tmp_path / "m.db"))
    assert code == 2 and "--within" in err


def test_the_statements_compile_for_hana() -> None:
    """SAP HANA cannot run here: the statements are compiled by sqlalchemy-hana and checked
    against HANA's rules, driven with canned rows."""
    from langgraph_checkpoint_agent_memory.db.database import drive
    from langgraph_checkpoint_agent_memory.db.hana import HanaDialect
    from langgraph_checkpoint_agent_memory.db.memory import MemorySql, backlog_plan, failures_plan
    from langgraph_checkpoint_agent_memory.db.store import StoreStatements
    from tests.test_dialect_sql import HANA_FORBIDDEN

    d = HanaDialect()
    seen: list[Any] = []
    answers = {
        "m_table_persistence_statistics": [("AM_CHECKPOINTS", 4096), ("AM_OTHER", 1)],
        "min(am_memory_pending.recorded_at)": [(2, 1, 10.0)],
        "GROUP BY am_memory_jobs.status": [("failed", 3)],
        "count(CASE": [(1, 3)],
    }

    def execute(batch: Any) -> list[Any]:
        out = []
        for stmt in batch.statements:
            seen.append(stmt.sql)
            rows = [v for k, v in answers.items() if k in stmt.sql.text]
            out.append(rows[0] if rows else [(0,)])
        return out

    sizes = drive(health.sizes_plan(d), execute)
    assert sizes.measured_by == "M_TABLE_PERSISTENCE_STATISTICS"
    assert sizes.tables == {"am_checkpoints": 4096}
    counts = drive(health.thread_counts_plan(d, 100.0, 10.0), execute)
    assert (counts.expired, counts.expiring) == (1, 2)
    sql = MemorySql(d, StoreStatements(d))
    backlog = drive(backlog_plan(sql, 20.0), execute)
    assert (backlog.pending, backlog.scopes, backlog.oldest_age) == (2, 1, 10.0)
    assert drive(failures_plan(sql), execute)["failed_jobs"] == 3
    assert len(seen) == 6
    for compiled in seen:
        upper = compiled.text.upper()
        for bad in HANA_FORBIDDEN:
            assert bad not in upper, f"{bad!r} in {compiled.text}"
        assert " FROM " in f" {upper.replace(chr(10), ' ')}", compiled.text
        assert compiled.names is not None and upper.count("?") == len(compiled.names)
    assert "SYS.M_TABLE_PERSISTENCE_STATISTICS" in seen[0].text.upper()
    assert "CURRENT_SCHEMA" in seen[0].text


@pytest.mark.parametrize("citus", [False, True])
def test_the_size_statement_parses_as_postgresql(citus: bool) -> None:
    """Offline, both forms (Citus's too) through PostgreSQL's own parser."""
    from langgraph_checkpoint_agent_memory.db.database import drive
    from langgraph_checkpoint_agent_memory.db.postgres import PostgresDialect

    pglast = pytest.importorskip("pglast")
    seen: list[str] = []

    def execute(batch: Any) -> list[Any]:
        seen.extend(stmt.sql.text for stmt in batch.statements)
        return [[(citus,)] if len(seen) == 1 else [(7,) * len(health.TABLE_NAMES)]]

    sizes = drive(health.sizes_plan(PostgresDialect()), execute)
    assert set(sizes.tables.values()) == {7} and sizes.total == 7 * len(health.TABLE_NAMES)
    assert ("citus_total_relation_size" in seen[1]) is citus
    pglast.parse_sql(re.sub(r"%\((\w+)\)s", r"$1", seen[1]))
