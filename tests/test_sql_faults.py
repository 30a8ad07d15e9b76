"""Faults: a process killed mid-put, a dropped connection, a closed saver, an unreachable
server. The database stays consistent and errors say what happened without secrets."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from langgraph_checkpoint_agent_memory import SQLSaver, create_checkpointer
from langgraph_checkpoint_agent_memory.errors import ClosedError, DatabaseUnavailableError
from tests.helpers import config_for, make_checkpoint, present

ROOT = Path(__file__).resolve().parent.parent

WRITER = """
import os, sys
from langgraph_checkpoint_agent_memory import create_checkpointer
from tests.helpers import config_for, make_checkpoint
saver = create_checkpointer(url=sys.argv[1])
payload = [os.urandom(64).hex() * 300 for _ in range(40)]  # about 1.5 MB per checkpoint
parent = None
for step in range(1, 100000):
    checkpoint = make_checkpoint({"big": payload, "step": step}, step=step, version=step)
    config = config_for("victim", parent)
    stored = saver.put(config, checkpoint, {"step": step}, {"big": step, "step": step})
    saver.put_writes(stored, [("big", step)], f"task-{step}")
    parent = stored["configurable"]["checkpoint_id"]
    print(step, flush=True)
"""


def integrity(saver: SQLSaver) -> tuple[int, int]:
    """(checkpoints, checkpoints whose blobs are all present); both must be equal."""
    from langgraph_checkpoint_agent_memory.db.database import Batch, Plan, Stmt
    from langgraph_checkpoint_agent_memory.db.dialect import Sql

    def plan() -> Plan[tuple[int, int]]:
        [cps, blobs] = yield Batch(
            [
                Stmt(Sql("SELECT checkpoint_ns, blob_versions FROM am_checkpoints"), fetch=True),
                Stmt(
                    Sql("SELECT checkpoint_ns, channel, version FROM am_checkpoint_blobs"),
                    fetch=True,
                ),
            ]
        )
        have = {tuple(r) for r in blobs}
        whole = sum(all((ns, ch, v) in have for ch, v in json.loads(bv).items()) for ns, bv in cps)
        return len(cps), whole

    return saver.db.run(plan())


@pytest.mark.parametrize("steps", [1, 3, 7])
def test_killed_writer_leaves_last_complete_checkpoint(
    database_url: str, make_saver: Callable[..., SQLSaver], steps: int
) -> None:
    """The writer is killed once it has reported ``steps`` steps, so mid-way through a
    later put, however slowly a busy machine starts it."""
    make_saver().setup()  # the schema exists before the writer starts timing out
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, database_url],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.stdout is not None
    assert proc.stderr is not None
    seen = [proc.stdout.readline() for _ in range(steps)]
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    # read() and not communicate(): readline() may have buffered more lines than it
    # returned, and communicate() reads the pipe beneath that buffer, so they would be lost
    out, err = proc.stdout.read(), proc.stderr.read()
    reported = [int(line) for line in "".join(seen).split() + out.split()]
    assert len(reported) >= steps, f"the writer stopped early: {err[-2000:]}"
    if database_url.startswith("postgresql"):
        _wait_for_other_backends(database_url)
    saver = make_saver()
    total, whole = integrity(saver)
    assert total == whole, "a checkpoint row exists without its blobs"
    assert total in (reported[-1], reported[-1] + 1)  # the last print may not have happened
    latest = present(saver.get_tuple(config_for("victim")))
    step = latest.checkpoint["channel_values"]["step"]
    listed = sorted(t.checkpoint["channel_values"]["step"] for t in saver.list(None))
    assert listed == list(range(1, total + 1)), (listed, reported[-3:])
    assert step == total and len(latest.checkpoint["channel_values"]["big"]) == 40
    if step == reported[-1]:
        assert latest.pending_writes == [(f"task-{step}", "big", step)]


def _wait_for_other_backends(url: str) -> None:
    """A killed client's last statement may still be running in its server backend, which
    commits or rolls it back on its own; inspect the database only once it has ended."""
    import psycopg

    deadline = time.monotonic() + 30
    with psycopg.connect(url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid() AND state <> 'idle'"
            ).fetchone()
            if row and row[0] == 0:
                return
            time.sleep(0.05)
    raise AssertionError("the killed writer's backend never ended")


def test_dropped_connection_raises_then_recovers(pg_url: str) -> None:
    import psycopg

    from langgraph_checkpoint_agent_memory import PostgresSaver
    from langgraph_checkpoint_agent_memory.db.postgres import PostgresDatabase

    saver = PostgresSaver(pg_url)
    stored = saver.put(config_for("t"), make_checkpoint({"x": [1]}), {}, {"x": 1})
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    failures = 0
    # dropped at once, before check_after_idle: each broken pooled connection fails one
    # call, then is replaced (test_pg_connections covers a drop the checks catch)
    for _ in range(10):
        try:
            assert present(saver.get_tuple(stored)).checkpoint["channel_values"] == {"x": [1]}
            break
        except DatabaseUnavailableError:  # never psycopg's own error
            failures += 1
    assert isinstance(saver.db, PostgresDatabase)
    assert failures <= saver.db.pool_size
    saver.put(
        config_for("t", stored["configurable"]["checkpoint_id"]),
        make_checkpoint({"x": [2]}, step=2, version=2),
        {},
        {"x": 2},
    )
    assert present(saver.get_tuple(config_for("t"))).checkpoint["channel_values"] == {"x": [2]}
    saver.close()


def test_closed_saver_says_so(database_url: str) -> None:
    saver = create_checkpointer(url=database_url)
    assert isinstance(saver, SQLSaver)
    saver.put(config_for("t"), make_checkpoint({"x": [1]}), {}, {"x": 1})
    saver.close()
    with pytest.raises(ClosedError, match="closed"):
        saver.get_tuple(config_for("t"))


def test_unreachable_server_is_reported_without_the_password(
    caplog: pytest.LogCaptureFixture,
) -> None:
    url = "postgresql://agent:s3cret-Pa55@127.0.0.1:9/memory"
    saver = create_checkpointer(url=url, connect_timeout=1)
    assert "s3cret" not in repr(saver)
    with caplog.at_level(logging.DEBUG), pytest.raises(DatabaseUnavailableError) as info:
        saver.get_tuple(config_for("t"))
    message = str(info.value)
    assert "127.0.0.1" in message and "s3cret" not in message and "***" in message
    assert all("s3cret" not in r.getMessage() for r in caplog.records)


def test_relaxed_commit_is_set_per_write_transaction_only(pg_url: str) -> None:
    """``synchronous_commit=False`` is a ``SET LOCAL`` of each write's transaction: the
    write runs with it, and the same pooled connection is back to ``on`` right after, so
    no other client of a transaction pooler inherits it."""
    from langgraph_checkpoint_agent_memory import PostgresSaver
    from langgraph_checkpoint_agent_memory.db.database import Batch, Stmt
    from langgraph_checkpoint_agent_memory.db.dialect import Sql

    def show(*, write: bool) -> Any:
        [rows] = yield Batch([Stmt(Sql("SHOW synchronous_commit"), fetch=True)], write=write)
        return rows[0][0]

    def both() -> Any:
        inside = yield from show(write=True)
        after = yield from show(write=False)
        return inside, after

    def failing() -> Any:
        yield Batch([Stmt(Sql("INSERT INTO no_such_table VALUES (1)"))], write=True)

    saver = PostgresSaver(pg_url, synchronous_commit=False, pool_size=1)
    saver.put(config_for("t"), make_checkpoint({"x": [1]}), {}, {"x": 1})
    assert saver.db.run(both()) == ("off", "on")
    with pytest.raises(Exception, match="no_such_table"):  # a relaxed write that fails
        saver.db.run(failing())
    assert saver.db.run(both()) == ("off", "on")  # leaves neither a transaction nor the mode
    assert present(saver.get_tuple(config_for("t"))).checkpoint["channel_values"] == {"x": [1]}
    saver.close()
    strict = PostgresSaver(pg_url, pool_size=1)
    assert strict.db.run(both()) == ("on", "on")
    strict.close()


async def test_many_tasks_on_a_new_sqlite_file(tmp_path: Path) -> None:
    """The first connections of a new file are opened concurrently without 'locked' errors."""
    import asyncio

    from langgraph_checkpoint_agent_memory import SqliteSaver, create_store

    for attempt in range(5):
        saver = SqliteSaver(tmp_path / f"s{attempt}.db")
        await asyncio.gather(
            *(
                saver.aput(config_for(f"t{i}"), make_checkpoint({"x": [i]}), {}, {"x": 1})
                for i in range(12)
            )
        )
        await saver.aclose()
        store = create_store(f"sqlite:///{tmp_path / f'store{attempt}.db'}")
        await asyncio.gather(*(store.aput(("n",), f"k{i}", {"v": i}) for i in range(12)))
        assert len(await store.asearch(("n",), limit=20)) == 12
        await store.aclose()
