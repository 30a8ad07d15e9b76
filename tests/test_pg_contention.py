"""Memory's writers on one scope under contention on PostgreSQL: erase, record and a
consolidation job meet in a chosen order, forced by a transaction of the test that holds a
row lock one writer needs, and released once the others wait. Their outcomes, not their
timing, are asserted: no deadlock reaches a caller, nothing of an erased scope remains.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from langgraph_checkpoint_agent_memory import AgentMemory, RuleBasedExtractor, create_store
from tests.helpers import present
from tests.pg import backend_params, libpq_url, pg_database

SCOPE = {"user_id": "u1"}
#: How long a step may take before the test gives up waiting (a bound, never asserted).
PATIENCE = 60.0


@pytest.fixture(params=backend_params("postgres"))
def url(request: pytest.FixtureRequest) -> str:
    return pg_database(request, str(request.param))


@pytest.fixture
def memory(url: str) -> Iterator[AgentMemory[Any]]:
    store = create_store(url)
    yield AgentMemory(store, extractor=RuleBasedExtractor())
    store.close()


def connect(url: str) -> psycopg.Connection[Any]:
    conninfo, kwargs = libpq_url(url)
    return psycopg.connect(conninfo, **kwargs)


def lock_waiters(conn: psycopg.Connection[Any]) -> int:
    """How many other sessions of this database wait for a lock."""
    row = conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
    ).fetchone()
    assert row is not None
    return int(row[0])


def wait_until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + PATIENCE
    while not check():
        if time.monotonic() > deadline:  # pragma: no cover - a hang, reported as such
            raise AssertionError(f"gave up waiting: {what}")
        time.sleep(0.02)


class Call(threading.Thread):
    """A call in its own thread: :meth:`value` is what it returned, or raises what it
    raised."""

    def __init__(self, call: Callable[[], Any]) -> None:
        super().__init__(daemon=True)
        self.call = call
        self.result: tuple[bool, Any] | None = None

    def run(self) -> None:
        try:
            self.result = (True, self.call())
        except BaseException as exc:
            self.result = (False, exc)

    def value(self) -> Any:
        self.join(PATIENCE)
        assert self.result is not None, "the call did not end"
        ok, value = self.result
        if not ok:
            raise value
        return value


def say(memory: AgentMemory[Any], key: str, where: str) -> str | None:
    return memory.record(
        SCOPE, [{"role": "user", "content": f"I live in {where}"}], thread_id="t1", key=key
    )


def residue(conn: psycopg.Connection[Any]) -> dict[str, int]:
    """The rows left under the scope's shard key, per table."""
    out = {}
    for table in (
        "am_store_items",
        "am_store_chunks",
        "am_store_retractions",
        "am_store_vectors",
        "am_memory_decay",
        "am_memory_scopes",
        "am_memory_pending",
        "am_memory_jobs",
        "am_memory_threads",
    ):
        row = conn.execute(
            f"SELECT count(*) FROM {table} WHERE shard = 'memory.user=u1'"
        ).fetchone()
        assert row is not None
        if row[0]:
            out[table] = int(row[0])
    indexed = conn.execute(  # items whose terms wait to be listed
        "SELECT count(*) FROM am_store_unlisted WHERE shard = 'memory.user=u1'"
    ).fetchone()
    assert indexed is not None
    if indexed[0]:
        out["unlisted"] = int(indexed[0])
    return out


def test_erase_and_a_consolidation_job_queue_instead_of_deadlocking(
    memory: AgentMemory[Any], url: str
) -> None:
    """Erase deletes the scope's items, then waits (for the test's lock on its decay rows);
    a consolidation job then writes the same items. Today's order is: the job waits for
    erase, erase for the job's ledger row: a deadlock. Taken in one order, they queue."""
    say(memory, "e1", "Paris")
    assert memory.consolidate().completed == 1
    say(memory, "e2", "Rome")
    with connect(url) as blocker, connect(url) as watch:
        watch.autocommit = True
        blocker.execute("SELECT 1 FROM am_memory_decay FOR UPDATE")
        erase = Call(lambda: memory.erase(SCOPE))
        erase.start()
        wait_until(lambda: lock_waiters(watch) >= 1, "erase waits for the test's lock")
        consolidate = Call(memory.consolidate)
        consolidate.start()
        wait_until(
            lambda: lock_waiters(watch) >= 2 or not consolidate.is_alive(),
            "the job waits, or is done",
        )
        blocker.rollback()
        erased = erase.value()
        report = consolidate.value()
    assert erased["scopes"] == 1
    assert all(job.status in ("completed", "erased") for job in report.jobs), report.jobs


def test_a_record_during_erase_leaves_no_orphan_and_can_be_repeated(
    memory: AgentMemory[Any], url: str
) -> None:
    """A record that commits while erase is between its deletes (held there by the test's
    lock on an item) must not leave half an episode behind (its item without its place in
    the queue, its text index without its item), and recording the same key again, twice
    at once, stores it once and returns normally in both callers."""
    say(memory, "e0", "Paris")
    with connect(url) as blocker, connect(url) as watch:
        watch.autocommit = True
        blocker.execute("SELECT 1 FROM am_store_items WHERE key = 'e0' FOR UPDATE")
        erase = Call(lambda: memory.erase(SCOPE))
        erase.start()
        wait_until(lambda: lock_waiters(watch) >= 1, "erase waits for the test's lock")
        record = Call(lambda: say(memory, "k", "Rome"))
        record.start()
        wait_until(
            lambda: lock_waiters(watch) >= 2 or not record.is_alive(),
            "the record waits, or is done",
        )
        blocker.rollback()
        erase.value()
        assert record.value() == "k"
        # the record went in before the erase (nothing left) or after it (all of it)
        left = residue(watch)
        assert not left or (
            left.get("am_store_items") == left.get("unlisted") == 1
            and "am_store_chunks" not in left
            and "am_store_retractions" not in left
            and left.get("am_memory_pending") == 1
            and left.get("am_memory_scopes") == 1
        ), left
        again = [Call(lambda: say(memory, "k", "Rome")) for _ in range(2)]
        for call in again:
            call.start()
        assert [call.value() for call in again] == ["k", "k"]
        assert [e.key for e in memory.episodes(SCOPE)] == ["k"]
        assert residue(watch)["am_memory_pending"] == 1


def test_a_read_racing_a_sweep_sees_the_thread_kept_or_gone(url: str) -> None:
    """A sweeper claims an expired thread (by its clock) and, before it commits, a reader
    whose clock still finds the thread live reads it. The reader must see the thread as the
    sweep leaves it: gone (its next write then starts afresh), not read live and then
    refused with ThreadDeletedError at its next write."""
    from langgraph_checkpoint_agent_memory.checkpoint.backends import PostgresSaver
    from tests.helpers import FakeClock, config_for, make_checkpoint

    def put(saver: PostgresSaver, value: int, parent: Any = None) -> Any:
        config = config_for("t", parent["configurable"]["checkpoint_id"] if parent else None)
        checkpoint = make_checkpoint({"x": [value]}, step=value, version=value)
        return saver.put(config, checkpoint, {"step": value}, {"x": value})

    reader_clock, sweeper_clock = FakeClock(start=1_800_000_000.0), FakeClock(start=0.0)
    reader = PostgresSaver(url, ttl_seconds=100, clock=reader_clock, activity_precision=0)
    sweeper = PostgresSaver(url, ttl_seconds=100, clock=sweeper_clock)
    try:
        put(reader, 1)
        reader.stop_sweeper()  # the test's sweeper is the one that sweeps
        reader_clock.advance(99)  # live for the reader, about to expire
        sweeper_clock.advance(1_800_000_000.0 + 101)  # expired for the sweeper
        with connect(url) as blocker, connect(url) as watch:
            watch.autocommit = True
            # the sweep claims the thread, then waits for the test's lock on its checkpoint
            blocker.execute("SELECT 1 FROM am_checkpoints WHERE thread_id = 't' FOR UPDATE")
            sweep = Call(sweeper.sweep)
            sweep.start()
            wait_until(lambda: lock_waiters(watch) >= 1, "the sweep waits for the test's lock")
            read = Call(lambda: reader.get_tuple(config_for("t")))
            read.start()
            wait_until(
                lambda: lock_waiters(watch) >= 2 or not read.is_alive(),
                "the read waits, or is done",
            )
            blocker.rollback()
            assert sweep.value() == ["t"]
            seen = read.value()
        # the thread is gone: a reader that saw it gone starts afresh; one that saw it
        # live must be able to continue it
        put(reader, 2, parent=seen.config if seen is not None else None)
        assert present(reader.get_tuple(config_for("t"))).metadata["step"] == 2
    finally:
        reader.close()
        sweeper.close()


def test_a_write_that_raced_an_erase_reads_as_a_thread_gone_and_starts_afresh(url: str) -> None:
    """A graph step read the thread, another process erased it, then the step's write
    committed: the write's appended list names a base the erase removed. Reading the thread
    answers as for a thread that is gone (no "damaged" error, no KeyError), in get_tuple and
    the DeltaChannel history, and the next write starts it afresh."""
    from langgraph_checkpoint_agent_memory.checkpoint.backends import PostgresSaver
    from tests.helpers import config_for, make_checkpoint

    writer, eraser = PostgresSaver(url), PostgresSaver(url)
    try:
        said = ["hello"]
        first = writer.put(
            config_for("t"), make_checkpoint({"x": said}, step=1, version=1), {}, {"x": 1}
        )
        eraser.erase_threads(["t"])
        # the step's write, decided before the erase: the list grew by one item
        late = make_checkpoint({"x": [*said, "again"]}, step=2, version=2)
        writer.put(first, late, {}, {"x": 2})
        # another process (no list of this thread in memory) reads what is stored
        assert eraser.get_tuple(config_for("t")) is None
        history = eraser.get_delta_channel_history(config=config_for("t"), channels=["x"])
        assert history == {"x": {"writes": []}}
        fresh = make_checkpoint({"x": ["anew"]}, step=3, version=1)
        writer.put(config_for("t"), fresh, {}, {"x": 1})
        assert present(eraser.get_tuple(config_for("t"))).checkpoint["channel_values"] == {
            "x": ["anew"]
        }
    finally:
        writer.close()
        eraser.close()


def test_a_connection_a_pipelined_batch_failed_on_is_not_handed_out_again(url: str) -> None:
    """After an error inside a pipeline, psycopg's cache of prepared statements and the
    server's may disagree ("prepared statement _pg3_N does not exist" on a later call): the
    pool gets that connection back closed, so it is replaced, and the same statements run
    again without error, sync and async."""
    import asyncio

    from langgraph_checkpoint_agent_memory.db.database import Batch, Plan, Stmt
    from langgraph_checkpoint_agent_memory.db.dialect import Sql
    from langgraph_checkpoint_agent_memory.db.postgres import PostgresDatabase

    db = PostgresDatabase(url, prepare_threshold=1, pool_size=1)
    pids = Sql("SELECT pg_backend_pid()")
    count = Sql("SELECT count(*) FROM pg_class WHERE relpages >= %(n)s")
    divide = Sql("SELECT 1 / %(d)s")

    def batch(d: int) -> Plan[int]:
        pid, _, _, _ = yield Batch(
            [
                Stmt(pids, fetch=True),
                Stmt(count, {"n": 0}, fetch=True),
                Stmt(divide, {"d": d}, fetch=True),
                Stmt(count, {"n": 1}, fetch=True),
            ]
        )
        return int(pid[0][0])

    def pid() -> Plan[int]:
        [rows] = yield Batch([Stmt(pids, fetch=True)])
        return int(rows[0][0])

    try:
        first = db.run(batch(1))
        assert db.run(batch(1)) == first  # one connection; its statements prepared now
        with pytest.raises(psycopg.errors.DivisionByZero):
            db.run(batch(0))
        assert db.run(batch(1)) != first  # a new connection
        assert db.run(batch(1)) == db.run(pid())

        async def on_the_loop() -> None:
            first = await db.arun(batch(1))
            assert await db.arun(batch(1)) == first
            with pytest.raises(psycopg.errors.DivisionByZero):
                await db.arun(batch(0))
            assert await db.arun(batch(1)) != first

        asyncio.run(on_the_loop())
    finally:
        db.close()


def test_an_erase_and_a_fresh_start_over_an_expired_thread_queue(url: str) -> None:
    """A write that starts an expired thread afresh locks its activity row, then deletes
    the ended history; an erase of the thread (held by the test after its first deletes)
    must take the same rows in the same order: both end, nothing of the old history stays."""
    from langgraph_checkpoint_agent_memory.checkpoint.backends import PostgresSaver
    from tests.helpers import FakeClock, config_for, make_checkpoint

    wall = FakeClock(start=1_800_000_000.0)
    writer = PostgresSaver(url, ttl_seconds=100, clock=wall, activity_precision=0)
    eraser = PostgresSaver(url)
    try:
        writer.put(config_for("t"), make_checkpoint({"x": [1]}, step=1, version=1), {}, {"x": 1})
        writer.stop_sweeper()
        wall.advance(101)  # expired, not swept: its rows are still there
        with connect(url) as blocker, connect(url) as watch:
            watch.autocommit = True
            blocker.execute("SELECT 1 FROM am_checkpoints WHERE thread_id = 't' FOR UPDATE")
            erase = Call(lambda: eraser.erase_threads(["t"]))
            erase.start()
            wait_until(lambda: lock_waiters(watch) >= 1, "the erase waits for the test's lock")
            fresh = make_checkpoint({"x": [2]}, step=2, version=1)
            start = Call(lambda: writer.put(config_for("t"), fresh, {}, {"x": 1}))
            start.start()
            wait_until(
                lambda: lock_waiters(watch) >= 2 or not start.is_alive(),
                "the fresh start waits, or is done",
            )
            blocker.rollback()
            erase.value()
            start.value()
        # the fresh start came after the erase (it is there) or before it (erased too)
        found = eraser.get_tuple(config_for("t"))
        assert found is None or found.checkpoint["channel_values"] == {"x": [2]}
    finally:
        writer.close()
        eraser.close()


@pytest.fixture(params=backend_params("sqlite", "postgres"))
def any_url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    backend = str(request.param)
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'memory.db'}"
    return pg_database(request, backend)


def test_a_job_whose_scope_is_erased_while_it_runs_ends_erased(any_url: str) -> None:
    """The scope is erased while the job's extractor runs (outside any transaction): the
    job writes nothing and ends "erased", not a failure to retry or a lost lease."""
    from langgraph_checkpoint_agent_memory.memory import Extraction, ExtractionRequest

    store = create_store(any_url)
    memory: AgentMemory[Any] = AgentMemory(store, extractor=RuleBasedExtractor())

    class ErasedMeanwhile(RuleBasedExtractor):
        def extract(self, request: ExtractionRequest) -> Extraction:
            memory.erase(SCOPE)
            return super().extract(request)

    try:
        say(memory, "e1", "Paris")
        memory.extractor = ErasedMeanwhile()
        report = memory.consolidate()
        assert [job.status for job in report.jobs] == ["erased"]
        assert report.failed == 0
        assert memory.facts(SCOPE) == [] and memory.episodes(SCOPE) == []
        assert memory.jobs() == []
    finally:
        store.close()


def test_a_transaction_the_server_aborted_for_another_runs_again(tmp_path: Any) -> None:
    """Set-based writes across scopes (decay, retry of every scope) run again, from a plan
    built anew, when the server aborts them as a deadlock's victim or for serialization,
    a bounded number of times; any other error reaches the caller at once."""
    from langgraph_checkpoint_agent_memory.db.database import Batch, Plan
    from langgraph_checkpoint_agent_memory.memory.context import ATTEMPTS

    class Aborted(Exception):
        def __init__(self, sqlstate: str) -> None:
            super().__init__(sqlstate)
            self.sqlstate = sqlstate

    store = create_store(f"sqlite:///{tmp_path / 'memory.db'}")
    memory: AgentMemory[Any] = AgentMemory(store, extractor=RuleBasedExtractor())
    built: list[int] = []

    def plan(fail_first: int, sqlstate: str) -> Callable[[], Plan[int]]:
        def make() -> Plan[int]:
            built.append(1)
            yield Batch([])
            if len(built) <= fail_first:
                raise Aborted(sqlstate)
            return len(built)

        return make

    try:
        assert memory.context.run_again(plan(ATTEMPTS - 1, "40P01")) == ATTEMPTS
        built.clear()
        with pytest.raises(Aborted):
            memory.context.run_again(plan(ATTEMPTS, "40001"))
        assert len(built) == ATTEMPTS
        built.clear()
        with pytest.raises(Aborted):
            memory.context.run_again(plan(1, "23505"))  # a unique violation: not again
        assert len(built) == 1
        assert memory.decay() == 0 and memory.retry() == 0
    finally:
        store.close()


def test_a_rewrite_during_a_merge_takes_its_old_terms_out_of_the_lists(url: str) -> None:
    """A merge locks a namespace's unlisted items, then waits (for the test's lock on a
    retraction); a rewrite of one of those items waits for the merge, which lists the item's
    old terms. The rewrite must then retract them, as a rewrite of any listed item does: the
    old words stop matching the item, at once and after the next merge."""
    merger, writer = create_store(url), create_store(url)
    try:
        ns = ("docs", "merge")
        merger.put(ns, "k0", {"text": "printer"})
        merger.db.run(merger.ranker.merge_plan("docs.merge"))
        merger.put(ns, "k0", {"text": "refund"})  # listed, rewritten: a retraction
        merger.put(ns, "k1", {"text": "coffee"})  # not yet listed
        with connect(url) as blocker, connect(url) as watch:
            watch.autocommit = True
            blocker.execute("SELECT 1 FROM am_store_retractions FOR UPDATE")
            merge = Call(lambda: merger.db.run(merger.ranker.merge_plan("docs.merge")))
            merge.start()
            wait_until(lambda: lock_waiters(watch) >= 1, "the merge waits for the test's lock")
            rewrite = Call(lambda: writer.put(ns, "k1", {"text": "berlin"}))
            rewrite.start()
            wait_until(
                lambda: lock_waiters(watch) >= 2 or not rewrite.is_alive(),
                "the rewrite waits for the merge, or is done",
            )
            blocker.rollback()
            merge.value()
            rewrite.value()
        for _ in range(2):
            assert [i.key for i in writer.search(ns, query="berlin")] == ["k1"]
            assert writer.search(ns, query="coffee") == []
            assert writer.search(ns, query="printer") == []
            writer.db.run(writer.ranker.merge_plan("docs.merge"))
    finally:
        merger.close()
        writer.close()
