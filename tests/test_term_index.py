"""Blocks of postings (``store/blocks.py``): a query of common words ranks from packed blocks
and the postings written since, and answers exactly as the postings alone do, through
writes, rewrites and deletes after a block was built; the blocks go with their namespace.

The thresholds are lowered so a few hundred items make terms common; the answers are checked
against the same store with blocks off (the query reading every posting, as before)."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from langgraph_checkpoint_agent_memory import AgentMemoryStore
from langgraph_checkpoint_agent_memory.db.database import Batch, Plan, Stmt
from langgraph_checkpoint_agent_memory.db.dialect import Sql
from langgraph_checkpoint_agent_memory.store import blocks as B
from langgraph_checkpoint_agent_memory.store import search as S
from tests.helpers import Recorder
from tests.pg import backend_params

WORDS = [
    *("order", "invoice", "delivery", "supplier", "berlin"),
    *("munich", "paris", "coffee", "printer", "refund"),
]


def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """A term in 12 items is common; 6 new postings of one call for its block again."""
    monkeypatch.setattr(B, "MIN_DF", 12)
    monkeypatch.setattr(B, "MIN_POSTINGS", 12)
    monkeypatch.setattr(B, "BUILD_AT", 6)
    monkeypatch.setattr(B, "BUILD_MIN", 6)
    monkeypatch.setattr(B, "FRESH_CAP", 60)


@pytest.fixture(autouse=True)
def _small(monkeypatch: pytest.MonkeyPatch) -> None:
    small_blocks(monkeypatch)


Ranked = list[tuple[tuple[str, str], float]]


def bm25(store: AgentMemoryStore, ns: tuple[str, ...], query: str, want: int, on: bool) -> Ranked:
    """The store's BM25 list for ``query`` under ``ns``, from blocks (``on``) or from the
    postings alone."""
    store.dialect.posting_blocks = on
    try:
        groups = [[t] for t in S.terms(query)]
        base = {**store.statements.prefix_params(ns), "now": time.time()}
        how = ((), base, want, False, False)
        plan = store.ranker._bm25_plan(groups, [1.0] * len(groups), how, {}, True)
        return store.db.run(plan)
    finally:
        del store.dialect.posting_blocks


def same_answer(got: Ranked, expected: Ranked) -> None:
    """The same scores in the same order, and the same items at every score above the last
    one (items tied at the last score may differ: either is a right answer)."""
    assert [round(s, 9) for _, s in got] == [round(s, 9) for _, s in expected]
    if got:
        last = round(got[-1][1], 9)
        assert {k for k, s in got if round(s, 9) > last} == {
            k for k, s in expected if round(s, 9) > last
        }


def text(rng: random.Random) -> dict[str, Any]:
    return {"text": " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 9)))}


@pytest.fixture
def store(make_store: Callable[..., AgentMemoryStore]) -> Iterator[AgentMemoryStore]:
    yield make_store()


def test_a_common_term_is_ranked_from_its_block(store: AgentMemoryStore) -> None:
    rng = random.Random(3)
    for i in range(120):
        store.put(("docs", "a"), f"k{i}", text(rng))
    sent = Recorder(store)
    expected = bm25(store, ("docs",), "printer refund", 10, on=False)
    assert not sent.took("am_store_blocks")
    got = bm25(store, ("docs",), "printer refund", 10, on=True)
    same_answer(got, expected)
    assert sent.count("INSERT INTO am_store_blocks") == 2  # one block per common term
    assert len(got) == 10
    # the blocks serve the next query: nothing is built again
    built = sent.count("INSERT INTO am_store_blocks")
    same_answer(bm25(store, ("docs",), "refund printer", 10, on=True), expected)
    assert sent.count("INSERT INTO am_store_blocks") == built


def test_writes_after_a_build_are_in_the_answer(store: AgentMemoryStore) -> None:
    """New items, rewritten ones (a term added, a term dropped) and deleted ones, in the
    namespace of the blocks and in another one the query also covers."""
    rng = random.Random(5)
    for i in range(120):
        store.put(("docs", "a"), f"k{i}", text(rng))
    bm25(store, ("docs",), "printer refund coffee", 8, on=True)  # builds the blocks
    store.put(("docs", "a"), "new", {"text": "printer printer refund"})
    store.put(("docs", "a"), "k1", {"text": "printer refund"})
    store.put(("docs", "a"), "k2", {"text": "nothing of it"})
    for i in range(3, 40):
        store.delete(("docs", "a"), f"k{i}")
    store.put(("docs", "b"), "other", {"text": "refund refund printer"})
    for query in ("printer refund coffee", "printer", "berlin refund"):
        for want in (1, 4, 8, 40):
            expected = bm25(store, ("docs",), query, want, on=False)
            same_answer(bm25(store, ("docs",), query, want, on=True), expected)
            exact = bm25(store, ("docs", "a"), query, want, on=False)
            same_answer(bm25(store, ("docs", "a"), query, want, on=True), exact)


@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(seed=st.integers(0, 10_000), want=st.sampled_from([1, 3, 10, 30]))
def test_any_history_of_writes_gets_the_postings_answer(
    make_store: Callable[..., AgentMemoryStore], seed: int, want: int
) -> None:
    store = make_store()
    rng = random.Random(seed)
    ns = ("h", str(seed))
    for step in range(200):
        key = f"k{rng.randrange(60)}"
        if rng.random() < 0.2:
            store.delete(ns, key)
        else:
            store.put(ns, key, text(rng))
        if step % 25 == 24:
            query = " ".join(rng.sample(WORDS, rng.randint(1, 3)))
            expected = bm25(store, ns, query, want, on=False)
            same_answer(bm25(store, ns, query, want, on=True), expected)


def test_search_reads_blocks_and_lists_the_same_items(store: AgentMemoryStore) -> None:
    rng = random.Random(9)
    for i in range(150):
        store.put(("s",), f"k{i}", text(rng))
    store.dialect.posting_blocks = False
    try:
        before = [i.key for i in store.search(("s",), query="refund for the printer", limit=5)]
        assert len(before) == 5
    finally:
        del store.dialect.posting_blocks
    sent = Recorder(store)
    after = [i.key for i in store.search(("s",), query="refund for the printer", limit=5)]
    assert sent.took("am_store_blocks")
    assert after == before  # two terms: ties are exact, broken by key on both paths
    same_answer(
        bm25(store, ("s",), "refund printer", 20, on=True),
        bm25(store, ("s",), "refund printer", 20, on=False),
    )


def test_items_tied_by_the_hundred_are_ranked_from_blocks(store: AgentMemoryStore) -> None:
    """Two words, each once in a random half of items of one length: a hundred items tie for
    the best score. Blocks rank them as the postings do (the tie broken by namespace and
    key), through writes since the build, instead of standing aside for a minute."""
    rng = random.Random(4)

    def tied(i: int) -> dict[str, Any]:
        first = "printer" if rng.random() < 0.5 else "munich"
        second = "refund" if rng.random() < 0.5 else "paris"
        return {"text": f"{first} {second} order invoice"}

    for i in range(400):
        store.put(("t", "a" if i % 3 else "b"), f"k{i}", tied(i))
    sent = Recorder(store)
    for want in (1, 5, 20):
        expected = bm25(store, ("t",), "printer refund", want, on=False)
        assert bm25(store, ("t",), "printer refund", want, on=True) == expected
        exact = bm25(store, ("t", "a"), "printer refund", want, on=False)
        assert bm25(store, ("t", "a"), "printer refund", want, on=True) == exact
    assert sent.took("am_store_blocks")
    assert not store.ranker.blocks.declines(("t", False, ("printer", "refund")))
    store.put(("t", "a"), "k0", {"text": "munich paris order invoice"})  # out of the tie
    store.put(("t", "a"), "k1", {"text": "printer refund order invoice"})  # into it
    store.delete(("t", "a"), "k10")
    for want in (1, 5, 20):
        expected = bm25(store, ("t",), "printer refund", want, on=False)
        assert bm25(store, ("t",), "printer refund", want, on=True) == expected


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.text("ab\u00e9\U0001f600", max_size=10), min_size=1, max_size=60, unique=True),
    st.integers(1, 12),
)
def test_first_tied_is_the_keys_order(keys: list[str], n: int) -> None:
    """The first tied items are the smallest keys, as Python (and the database, in byte
    order) sorts them, whatever their shared beginnings."""
    block = B.pack("ns", [(k, 1, 3) for k in keys])
    entries = np.frombuffer(block.postings, dtype=B.ENTRY)
    at = np.arange(len(keys), dtype=np.int64)
    first = B.first_tied(at, [B.Block("t", "ns", "ns", 1, entries, block.keys)], [], n)
    assert [k for _, k, _ in first] == sorted(keys)[:n]


def test_writers_and_a_reader_building_blocks_lose_nothing(store: AgentMemoryStore) -> None:
    """Writers put and delete while a reader's queries build and rebuild blocks (a build
    never waits on a write's postings: it leaves them unpacked); then the answer is the
    postings' own."""
    rng = random.Random(11)
    for i in range(120):
        store.put(("c", "a"), f"k{i}", text(rng))
    errors: list[BaseException] = []

    def write(seed: int) -> None:
        mine = random.Random(seed)
        try:
            for _ in range(150):
                key = f"k{mine.randrange(160)}"
                if mine.random() < 0.25:
                    store.delete(("c", "a"), key)
                else:
                    store.put(("c", "a"), key, text(mine))
        except BaseException as exc:
            errors.append(exc)

    writers = [threading.Thread(target=write, args=(seed,)) for seed in (1, 2)]
    for w in writers:
        w.start()
    queries = 0
    while any(w.is_alive() for w in writers) or queries < 5:
        store.search(("c",), query="printer refund coffee", limit=5)
        queries += 1
    for w in writers:
        w.join()
    assert errors == []
    for query in ("printer refund coffee", "order berlin"):
        same_answer(
            bm25(store, ("c",), query, 12, on=True), bm25(store, ("c",), query, 12, on=False)
        )


async def test_async_search_reads_blocks_too(store: AgentMemoryStore) -> None:
    rng = random.Random(12)
    for i in range(100):
        await store.aput(("as",), f"k{i}", text(rng))
    sent = Recorder(store)
    found = await store.asearch(("as",), query="printer refund", limit=4)
    store.dialect.posting_blocks = False
    try:
        expected = await store.asearch(("as",), query="printer refund", limit=4)
    finally:
        del store.dialect.posting_blocks
    assert [i.key for i in found] == [i.key for i in expected]
    assert len(found) == 4
    assert sent.texts == []  # the async path ran (the recorder sees sync runs only)
    rows = blocks_under(store, "as")
    assert rows == 2


def test_words_spread_over_small_namespaces_are_read_as_postings(
    store: AgentMemoryStore,
) -> None:
    """Above 40 users of 5 items each, a common word has too few postings in any one
    namespace for a block: the query reads postings, and the next ones do not look again."""
    rng = random.Random(13)
    for user in range(40):
        for i in range(5):
            store.put(("users", f"u{user}"), f"k{i}", text(rng))
    sent = Recorder(store)
    for _ in range(3):
        same_answer(
            bm25(store, ("users",), "printer refund", 10, on=True),
            bm25(store, ("users",), "printer refund", 10, on=False),
        )
    assert sent.count("FROM am_store_blocks") == 1  # the first query looked, once
    assert blocks_under(store, "users") == 0


def test_a_database_that_refuses_the_build_gets_the_postings_answer(
    store: AgentMemoryStore, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A search must not fail for want of blocks: where the build is refused (a read-only
    replica or file, a locked SQLite database), the postings answer, and the next queries
    do not try again for a while."""

    rng = random.Random(14)
    for i in range(100):
        store.put(("ro",), f"k{i}", text(rng))

    def refused(*args: Any) -> Plan[int]:
        yield Batch([Stmt(Sql("UPDATE no_such_table SET x = 1"))], write=True)
        return 0

    monkeypatch.setattr(B, "build_plan", refused)
    expected = bm25(store, ("ro",), "printer refund", 6, on=False)
    sent = Recorder(store)
    with caplog.at_level("WARNING"):
        same_answer(bm25(store, ("ro",), "printer refund", 6, on=True), expected)
    assert "reads postings, not blocks" in caplog.text
    looked = sent.count("FROM am_store_blocks")
    same_answer(bm25(store, ("ro",), "printer refund", 6, on=True), expected)
    assert sent.count("FROM am_store_blocks") == looked == 1


def test_a_small_namespace_gets_its_block_sooner(
    store: AgentMemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A block is built again when the postings written since are an eighth of it, at
    least ``BUILD_MIN`` and at most ``BUILD_AT``: a small namespace's unpacked postings
    do not wait for ``BUILD_AT`` (each query would read them one by one), a large one's
    block is not rebuilt for a few."""
    monkeypatch.setattr(B, "BUILD_AT", 40)
    rng = random.Random(15)
    for i in range(480):
        store.put(("g", "big"), f"k{i}", {"text": f"refund {rng.choice(WORDS)}"})
    for i in range(8):
        store.put(("g", "small"), f"k{i}", {"text": "refund"})
    sent = Recorder(store)
    bm25(store, ("g",), "refund", 5, on=True)
    assert sent.count("INSERT INTO am_store_blocks") == 2  # 480 and 8 new: both built
    for i in range(8, 16):  # 8 more: an eighth of 8 is 1, so BUILD_MIN (6) decides
        store.put(("g", "small"), f"k{i}", {"text": "refund"})
    for i in range(480, 500):  # 20 more: an eighth of 480 is 60, so BUILD_AT (40) decides
        store.put(("g", "big"), f"k{i}", {"text": "refund"})
    sent = Recorder(store)
    same_answer(
        bm25(store, ("g",), "refund", 30, on=True), bm25(store, ("g",), "refund", 30, on=False)
    )
    assert sent.count("INSERT INTO am_store_blocks") == 1  # the small namespace's alone
    assert [B.build_at(n) for n in (0, 8, 480, 4000)] == [6, 6, 40, 40]


def test_a_query_due_more_builds_than_it_may_do_leaves_them_to_the_next(
    store: AgentMemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each query builds at most ``BUILDS_PER_QUERY`` blocks; one that left some due is
    answered by the postings, and the next query builds on (it does not give up on blocks
    for a minute, as when the words are spread over small namespaces)."""

    monkeypatch.setattr(B, "BUILDS_PER_QUERY", 1)
    rng = random.Random(16)
    for i in range(300):  # each word in about 120 items: more than FRESH_CAP (60) unpacked
        store.put(("due",), f"k{i}", text(rng))
    expected = bm25(store, ("due",), "printer refund", 10, on=False)
    sent = Recorder(store)
    for built in (1, 2, 2):
        same_answer(bm25(store, ("due",), "printer refund", 10, on=True), expected)
        assert sent.count("INSERT INTO am_store_blocks") == built
    assert blocks_under(store, "due") == 2


def test_a_namespace_delete_takes_its_blocks(store: AgentMemoryStore) -> None:
    rng = random.Random(2)
    for i in range(60):
        store.put(("gone", "x"), f"k{i}", text(rng))
        store.put(("kept", "y"), f"k{i}", text(rng))
    bm25(store, ("gone",), "printer refund", 5, on=True)
    bm25(store, ("kept",), "printer refund", 5, on=True)
    assert blocks_under(store, "gone") and blocks_under(store, "kept")
    store.delete_namespace(("gone",))
    assert not blocks_under(store, "gone")
    assert blocks_under(store, "kept")
    assert bm25(store, ("gone",), "printer refund", 5, on=True) == []


@pytest.mark.parametrize("store_backend", backend_params("postgres", "citus"), indirect=True)
def test_postgresql_reads_postings_from_their_key_and_vacuums_them_soon(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    """The postings' primary key includes ``tf`` and ``dl``, so BM25 reads them from it
    alone; and autovacuum takes them at 1% dead (and 10,000), not at a fifth: a build
    marks up to all of a common term's postings, each then a dead entry of the index of
    unpacked postings that queries step over until a vacuum."""
    store = make_store()
    store.put(("docs",), "k", {"text": "printer refund"})
    assert postings_upkeep(store) == (["tf", "dl"], VACUUM_SOONER)
    if store.dialect.distributed:  # and on every shard, where the rows are
        assert shards_upkeep(store) == {f"2 {','.join(VACUUM_SOONER)}"}


VACUUM_SOONER = ["autovacuum_vacuum_scale_factor=0.01", "autovacuum_vacuum_threshold=10000"]


def postings_upkeep(store: AgentMemoryStore) -> tuple[list[str], list[str]]:
    """The columns the postings' primary key includes, and their table's storage options."""

    def plan() -> Plan[tuple[list[str], list[str]]]:
        included = Sql(
            "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
            "AND a.attnum = ANY(i.indkey[i.indnkeyatts:]) "
            "WHERE i.indrelid = to_regclass('am_store_terms') AND i.indisprimary "
            "ORDER BY array_position(i.indkey::int2[], a.attnum)"
        )
        options = Sql("SELECT reloptions FROM pg_class WHERE oid = to_regclass('am_store_terms')")
        columns, [(found,)] = yield Batch([Stmt(included, fetch=True), Stmt(options, fetch=True)])
        return [c for (c,) in columns], sorted(found or [])

    return store.db.run(plan())


def shards_upkeep(store: AgentMemoryStore) -> set[str]:
    """Citus: each shard's count of columns its primary key includes, and its options."""

    def plan() -> Plan[set[str]]:
        sql = Sql(
            # the shard's name in place of %s (doubled for psycopg)
            "SELECT result FROM run_command_on_shards('am_store_terms', $c$SELECT "
            "(SELECT indnatts - indnkeyatts FROM pg_index WHERE indrelid = c.oid "
            "AND indisprimary) || ' ' || array_to_string(c.reloptions, ',') "
            "FROM pg_class c WHERE c.oid = '%%s'::regclass$c$)"
        )
        [rows] = yield Batch([Stmt(sql, fetch=True)])
        return {str(r) for (r,) in rows}

    return store.db.run(plan())


def blocks_under(store: AgentMemoryStore, root: str) -> int:
    def plan() -> Plan[int]:
        sql = Sql(
            "SELECT count(*) FROM am_store_blocks "
            f"WHERE shard = '{root}' OR (shard >= '{root}.' AND shard < '{root}/')"
        )
        [rows] = yield Batch([Stmt(sql, fetch=True)])
        return int(rows[0][0])

    return store.db.run(plan())


# -- the ranking here, against brute force -----------------------------------------------


@settings(max_examples=150, deadline=None)
@example(  # items rewritten in either namespace, each with postings of two terms
    postings=[(1, "a", 1), (1, "b", 2), (2, "a", 2), (17, "a", 1), (17, "c", 3), (18, "c", 1)],
    want=2,
    rewritten={1, 17},
    new=set(),
)
@example(  # a new item of one term only, fresh postings of some of the blocks' terms
    postings=[(1, "a", 1), (2, "b", 2), (3, "c", 1), (4, "b", 1), (4, "c", 2), (20, "b", 3)],
    want=3,
    rewritten={4},
    new={2},
)
@given(
    st.lists(
        st.tuples(st.integers(0, 30), st.sampled_from("abc"), st.integers(1, 4)),
        min_size=1,
        max_size=80,
        unique_by=lambda r: (r[0], r[1]),
    ),
    st.integers(1, 12),
    st.sets(st.integers(0, 30), max_size=6),
    st.sets(st.integers(0, 30), max_size=6),
)
def test_candidates_and_settled_are_the_brute_force_ranking(
    postings: list[tuple[int, str, int]], want: int, rewritten: set[int], new: set[int]
) -> None:
    """Blocks of every posting but the new items', one per term and namespace (items 0-15
    in one, 16-30 in another, with the same keys), the rewritten items' postings fresh too
    (their block entries must give way), the new items' fresh alone: the settled answer is
    brute force's, whenever it settles without any stale entry; and the blocks' cached
    :class:`~.blocks.Items` serve the next query unchanged."""
    weights = B.Weights({"a": 1.0, "b": 0.7, "c": 0.3}, 0.3, 0.05)
    dl = {i: 3 + i % 5 for i in range(31)}
    ns = {i: "ns" if i < 16 else "mx" for i in range(31)}
    rewritten |= new
    blocks = []
    for prefix in ("ns", "mx"):
        for term in "abc":
            rows = [
                (f"k{i % 16}", tf, dl[i])
                for i, t, tf in postings
                if t == term and i not in new and ns[i] == prefix
            ]
            if rows:
                block = B.pack(prefix, rows)
                entries = np.frombuffer(block.postings, dtype=B.ENTRY)
                blocks.append((B.Block(term, prefix, prefix, 1, entries, block.keys), block))
    fresh = [
        B.Fresh(t, ns[i], ns[i], f"k{i % 16}", tf, dl[i]) for i, t, tf in postings if i in rewritten
    ]
    truth: dict[tuple[str, str], float] = {}
    for i, t, tf in postings:
        key = (ns[i], f"k{i % 16}")
        truth[key] = truth.get(key, 0.0) + weights.score(t, tf, dl[i])
    ranked = [b for b, _ in blocks]
    items = B.items_of(ranked)
    found = B.candidates(ranked, fresh, weights, 2 * want, items)
    assert found is not None
    keys = []
    for source in found.sources:
        if source.block < 0:
            f = fresh[source.position]
            keys.append((f.prefix, f.key))
        else:
            packed = blocks[source.block][1]
            at = B.keys_at(packed.keys, packed.entries, [source.position])[0]
            keys.append((blocks[source.block][0].prefix, at))
    # no entry is stale (a rewritten item's block entries all give way to its fresh
    # postings), so each candidate's score here is its true one
    assert [round(s, 9) for s in found.scores] == [round(truth[k], 9) for k in keys]
    answer = B.settled([(k, truth[k]) for k in keys], found.bound, want)
    assert answer is not None  # nothing stale: the candidates' own scores bound the rest
    best = sorted(truth.items(), key=lambda e: (-e[1], e[0]))[:want]
    assert [round(s, 9) for _, s in answer] == [round(s, 9) for _, s in best]
    # the query left the cached items as they were: the next one ranks as a fresh numbering
    assert B.candidates(ranked, [], weights, want, items) == B.candidates(ranked, [], weights, want)
