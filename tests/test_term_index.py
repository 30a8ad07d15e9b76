"""The store's term index (``store/index.py``, ``db/term_index.py``) on memory, SQLite and
PostgreSQL: a put's terms ride in its item's row; a merge lists a namespace's items once
:data:`~.index.MERGE_AT` of them wait (written by this process, or found by a query) and
leaves its chunks holding exactly the listed items, split at :data:`~.term_index.CHUNK`
entries; a rewritten or deleted item's old terms stop matching at once and after the next
merge; and every answer is brute force BM25 over the items' texts, ties ordered by
namespace and key, through any history of writes, concurrent writers and merges.

The thresholds are lowered so a few dozen items merge and split chunks."""

from __future__ import annotations

import itertools
import os
import random
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from langgraph_checkpoint_agent_memory import AgentMemoryStore
from langgraph_checkpoint_agent_memory import text as T
from langgraph_checkpoint_agent_memory.db.database import Batch, Plan, Stmt
from langgraph_checkpoint_agent_memory.db.dialect import Sql
from langgraph_checkpoint_agent_memory.db.store import rest_params
from langgraph_checkpoint_agent_memory.db.term_index import CHUNK as TERM_CHUNK
from langgraph_checkpoint_agent_memory.db.term_index import (
    LISTED_BYTES,
    UNLISTED_BYTES,
    halves,
    high_parts,
    listed_form,
    term_id,
    unpack_chunks,
)
from langgraph_checkpoint_agent_memory.store import index as I
from langgraph_checkpoint_agent_memory.store import ranking as R
from langgraph_checkpoint_agent_memory.store import search as S
from tests.helpers import INDEXED_ITEMS, FakeClock, Recorder
from tests.pg import libpq_url, pg_database, pg_params

WORDS = [
    *("order", "invoice", "delivery", "supplier", "berlin"),
    *("munich", "paris", "coffee", "printer", "refund"),
]
MERGE_AT = 8
CHUNK = 6
#: The index's own thresholds.
OWN = {"MERGE_AT": I.MERGE_AT, "MERGE_CAP": I.MERGE_CAP, "CHUNK": TERM_CHUNK}

Ranked = list[tuple[tuple[str, str], float]]
_runs = itertools.count()
#: What the test wrote: ``(prefix, key) -> text`` of the live items.
Model = dict[tuple[str, str], str]


def small_index(
    monkeypatch: pytest.MonkeyPatch, merge_at: int = MERGE_AT, cap: int = 4 * MERGE_AT
) -> None:
    """Merges at ``merge_at`` items waiting or written (``cap`` a transaction), chunks of
    :data:`CHUNK` entries (the index's own of its own ``merge_at``)."""
    for module in (I, R):
        monkeypatch.setattr(module, "MERGE_AT", merge_at)
        monkeypatch.setattr(module, "MERGE_WRITES", merge_at)
    monkeypatch.setattr(I, "MERGE_CAP", cap)
    monkeypatch.setattr(I, "CHUNK", CHUNK if merge_at == MERGE_AT else OWN["CHUNK"])


@pytest.fixture(autouse=True)
def _small(monkeypatch: pytest.MonkeyPatch) -> None:
    small_index(monkeypatch)


@pytest.fixture
def store(make_store: Callable[..., AgentMemoryStore]) -> Iterator[AgentMemoryStore]:
    store = make_store()
    store.ranker.stats_seconds = 0.0  # statistics read with every query: exact answers
    yield store


def text(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 9)))


def put(store: AgentMemoryStore, model: Model, ns: tuple[str, ...], key: str, words: str) -> None:
    store.put(ns, key, {"text": words})
    model[(".".join(ns), key)] = words


def delete(store: AgentMemoryStore, model: Model, ns: tuple[str, ...], key: str) -> None:
    store.delete(ns, key)
    model.pop((".".join(ns), key), None)


def bm25(store: AgentMemoryStore, ns: tuple[str, ...], query: str, want: int) -> Ranked:
    """The store's BM25 list for ``query`` under ``ns`` (its scores, not the fused ones)."""
    groups = [[I.form_of(t)] for t in S.terms(query)]
    base = {**store.statements.prefix_params(ns), "now": time.time()}
    how = ((), base, want, False, False)
    scored, _ = store.db.run(store.ranker._bm25_plan(groups, [1.0] * len(groups), how))
    return scored


def brute(model: Model, ns: tuple[str, ...], query: str, want: int) -> Ranked:
    """BM25 over the texts under ``ns``, best first, ties by namespace and key."""
    root = ".".join(ns)
    under = {k: v for k, v in model.items() if k[0] == root or k[0].startswith(root + ".")}
    docs = {k: T.postings(v) for k, v in under.items()}
    avgdl = sum(n for _, n in docs.values()) / len(docs) if docs else 1.0
    k_base, k_len = S.K1 * (1 - S.B), S.K1 * S.B / (avgdl or 1.0)
    scores: dict[tuple[str, str], float] = {}
    for term in S.terms(query):
        df = sum(term in found for found, _ in docs.values())
        w = S.idf(len(docs), df) * (S.K1 + 1)
        for k, (found, dl) in docs.items():
            if (tf := min(found.get(term, 0), 65535)) > 0:
                scores[k] = scores.get(k, 0.0) + w * tf / (k_base + tf + k_len * dl)
    return sorted(scores.items(), key=lambda e: (-round(e[1], 9), e[0]))[:want]


def same_answer(got: Ranked, expected: Ranked) -> None:
    """The same scores in the same order, and the same items at every score above the last
    one: scores equal but for the order of their sums (a word of one item as frequent as
    another's of the same weight) may come in either order, and items tied at the last
    score may differ where the tie goes past the cut (:func:`same_order` of exact ties)."""
    assert [round(s, 9) for _, s in got] == [round(s, 9) for _, s in expected]
    if got:
        last = round(got[-1][1], 9)
        above: dict[float, set[tuple[str, str]]] = {}
        for k, s in got:
            above.setdefault(round(s, 9), set()).add(k)
        for k, s in expected:
            if round(s, 9) > last:
                above[round(s, 9)].discard(k)
        assert all(not keys for score, keys in above.items() if score > last), above


def same_order(got: Ranked, expected: Ranked) -> None:
    """The same items in the same order with the same scores (ties: by namespace, key)."""
    assert [(k, round(s, 9)) for k, s in got] == [(k, round(s, 9)) for k, s in expected]


def rows(store: AgentMemoryStore, sql: str) -> list[tuple[Any, ...]]:
    def plan() -> Plan[list[tuple[Any, ...]]]:
        [found] = yield Batch([Stmt(Sql(sql), fetch=True)])
        return [tuple(r) for r in found]

    return store.db.run(plan())


def chunks_of(store: AgentMemoryStore, prefix: str) -> list[tuple[int, int, int, int, Any]]:
    """``(hi, lo, start, last, (nums, tf, dl))`` of the namespace's chunks."""
    shard = store.statements.shard(prefix)
    rest = rest_params(prefix, shard)["rest"]
    found = rows(
        store,
        "SELECT hi, lo, start, payload FROM am_store_chunks "
        f"WHERE shard = '{shard}' AND rest = '{rest}' ORDER BY hi, lo, start",
    )
    chunks = [
        (hi, lo, start, unpack_chunks([start], [bytes(payload)])[1:])
        for hi, lo, start, payload in found
    ]
    return [(hi, lo, start, int(e[0][-1]), e) for hi, lo, start, e in chunks]


def items_of(store: AgentMemoryStore, prefix: str) -> dict[str, tuple[int, int | None, Any]]:
    """``key -> (num, merged, terms)`` of the namespace's items."""
    found = rows(
        store, f"SELECT key, num, merged, terms FROM {INDEXED_ITEMS} WHERE prefix = '{prefix}'"
    )
    return {k: (n, m, None if t is None else bytes(t)) for k, n, m, t in found}


def assert_lists_hold_the_listed(store: AgentMemoryStore, model: Model, prefix: str) -> None:
    """The namespace's chunks hold exactly its listed items (and the old entries of the
    retracted ones, until the next merge), each term's entries with the item's exact
    frequency and length, numbers ascending, at most :data:`CHUNK` a chunk."""
    items = items_of(store, prefix)
    retracted = {
        n for (n,) in rows(store, f"SELECT num FROM am_store_retractions WHERE prefix = '{prefix}'")
    }
    listed = {n: k for k, (n, merged, _) in items.items() if merged == 1}
    expected: set[tuple[int, int, int, int, int]] = set()
    assert not retracted & set(listed)
    for num, key in listed.items():
        found, dl = T.postings(model[(prefix, key)])
        for term, tf in found.items():
            expected.add((*halves(term_id(term)), num, tf, dl))
        # a listed item keeps the high parts of its terms' ids
        assert sorted(high_parts(items[key][2]).tolist()) == sorted(
            halves(term_id(t))[0] for t in found
        )
    got: set[tuple[int, int, int, int, int]] = set()
    ends: dict[tuple[int, int], int] = {}
    for hi, lo, start, last, (nums, tf, dl) in chunks_of(store, prefix):
        assert 0 < len(nums) <= CHUNK
        assert nums[0] == start and nums[-1] == last and (nums[1:] > nums[:-1]).all()
        assert start > ends.get((hi, lo), 0)  # one term's chunks do not overlap
        ends[(hi, lo)] = last
        got |= {
            (hi, lo, n, f, d)
            for n, f, d in zip(nums.tolist(), tf.tolist(), dl.tolist(), strict=True)
            if n not in retracted
        }
    assert got == expected


# -- a put, a query ------------------------------------------------------------------------


def test_a_put_writes_only_its_item_and_a_query_reads_its_lists_in_one_statement(
    store: AgentMemoryStore,
) -> None:
    store.setup()
    sent = Recorder(store)
    model: Model = {}
    put(store, model, ("docs",), "a", "printer printer refund")
    assert not sent.took("am_store_chunks")
    [(num, merged, terms)] = items_of(store, "docs").values()
    assert merged == 0 and len(terms) == 2 * UNLISTED_BYTES
    sent = Recorder(store)
    same_answer(
        bm25(store, ("docs",), "printer refund paris", 5),
        brute(model, ("docs",), "printer refund paris", 5),
    )
    lists = [t for t in sent.texts if "am_store_chunks" in t]
    assert len(lists) == 1 and "am_store_retractions" in lists[0]
    assert num is not None


def test_a_new_items_row_is_written_once_and_its_terms_wait_in_a_row_of_their_own(
    store: AgentMemoryStore,
) -> None:
    """A new item's put writes its row in its final form (its terms' high parts, what a
    retraction needs) and its terms to list, in one statement on PostgreSQL; the merge lists
    and deletes those, and leaves the item's row as it was."""
    store.setup()
    store.put(("docs",), "first", {"text": "tea"})
    sent = Recorder(store)
    store.put(("docs",), "a", {"text": "printer printer refund"})
    writes = [t for t in sent.texts if "INSERT" in t]
    assert any("am_store_unlisted" in t for t in writes), writes
    if store.dialect.sa.name == "postgresql":
        assert len(writes) == 1, writes
    [(kept,)] = rows(store, "SELECT terms FROM am_store_items WHERE key = 'a'")
    assert len(kept) == 2 * LISTED_BYTES
    [(waiting,)] = rows(store, "SELECT terms FROM am_store_unlisted WHERE key = 'a'")
    assert len(waiting) == 2 * UNLISTED_BYTES
    assert listed_form(bytes(waiting)) == bytes(kept)
    store.db.run(store.ranker.merge_plan("docs"))
    assert rows(store, "SELECT count(*) FROM am_store_unlisted") == [(0,)]
    assert rows(store, "SELECT terms FROM am_store_items WHERE key = 'a'") == [(kept,)]
    assert [i.key for i in store.search(("docs",), query="printer")] == ["a"]


def test_a_search_pages_the_rows_its_candidates_were_read_with(store: AgentMemoryStore) -> None:
    """The read of the candidates by number returns their rows: the page is built from them,
    not read again by key."""
    store.setup()
    for k in range(12):
        store.put(("docs",), f"k{k}", {"text": "printer " + "refund " * k, "n": k})
    sent = Recorder(store)
    found = store.search(("docs",), query="refund", limit=5, offset=2)
    assert [(it.key, it.value["n"]) for it in found] == [(f"k{k}", k) for k in (9, 8, 7, 6, 5)]
    by_key = {store.statements.by_keys(n).text for n in range(1, 65)}
    assert sent.texts and not by_key & set(sent.texts)


# -- merges --------------------------------------------------------------------------------


def test_this_processs_writes_merge_a_namespace_at_merge_at(store: AgentMemoryStore) -> None:
    rng = random.Random(1)
    model: Model = {}
    for i in range(MERGE_AT - 1):
        put(store, model, ("m", "a"), f"k{i}", text(rng))
        put(store, model, ("m", "b"), f"k{i}", text(rng))
    assert rows(store, "SELECT count(*) FROM am_store_chunks") == [(0,)]
    put(store, model, ("m", "a"), "last", text(rng))  # the MERGE_AT-th in m.a
    merged = {k: m for k, (_, m, _) in items_of(store, "m.a").items()}
    assert set(merged.values()) == {1} and len(merged) == MERGE_AT
    assert {m for _, m, _ in items_of(store, "m.b").values()} == {0}
    assert_lists_hold_the_listed(store, model, "m.a")
    assert chunks_of(store, "m.b") == []
    for query in ("printer refund", "berlin", "order coffee paris"):
        same_answer(bm25(store, ("m",), query, 10), brute(model, ("m",), query, 10))


def test_an_item_with_no_term_is_in_no_list_and_goes_like_any_other(
    store: AgentMemoryStore,
) -> None:
    """Text of stopwords or symbols alone counts in the corpus but holds no term: merged,
    rewritten, deleted and swept like any item (its listed form was an empty blob, which
    SQLite's substr turns into NULL)."""
    ns = ("e", "a")
    store.put(ns, "x", {"text": "\U0001f44d"})
    store.put(ns, "y", {"text": "the when did"})
    store.put(ns, "z", {"text": "berlin"})
    store.db.run(store.ranker.merge_plan("e.a"))
    found = rows(store, f"SELECT key, doc_len, terms, merged FROM {INDEXED_ITEMS} ORDER BY key")
    assert found[:2] == [("x", 0, None, None), ("y", 0, None, None)]
    store.delete(ns, "x")
    store.put(ns, "y", {"text": "berlin again"})
    store.db.run(store.ranker.merge_plan("e.a"))
    assert sorted(i.key for i in store.search(ns, query="berlin")) == ["y", "z"]
    assert rows(store, "SELECT count(*) FROM am_store_retractions") == [(0,)]


def test_a_query_merges_what_other_processes_left_unlisted(
    make_store: Callable[..., AgentMemoryStore], store_backend: str
) -> None:
    """Two writers each leave fewer than MERGE_AT items (none merges); a query finding
    MERGE_AT or more waiting merges them, and answers as before."""
    if store_backend == "memory":
        pytest.skip("one process's store: no other writer")
    rng = random.Random(2)
    model: Model = {}
    writers = [make_store(), make_store()]
    for i in range(2 * (MERGE_AT - 1)):
        put(writers[i % 2], model, ("q",), f"k{i}", text(rng))
    reader = make_store()
    reader.ranker.stats_seconds = 0.0
    assert {m for _, m, _ in items_of(reader, "q").values()} == {0}
    before = brute(model, ("q",), "printer refund", 6)
    same_answer(bm25(reader, ("q",), "printer refund", 6), before)
    assert {m for _, m, _ in items_of(reader, "q").values()} == {1}
    assert_lists_hold_the_listed(reader, model, "q")
    same_answer(bm25(reader, ("q",), "printer refund", 6), before)


def test_a_query_merges_soon_where_the_unlisted_are_an_eighth_of_what_it_searched(
    make_store: Callable[..., AgentMemoryStore],
    store_backend: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """MERGE_SOON items waiting in a namespace make a query merge it when they are an
    eighth or more of the items it searched; fewer, or a smaller share of a wider search,
    wait for MERGE_AT. Each answers as before."""
    if store_backend == "memory":
        pytest.skip("one process's store: no other writer")
    small_index(monkeypatch, OWN["MERGE_AT"], OWN["MERGE_CAP"])
    soon = I.MERGE_SOON
    writer = make_store()
    rng = random.Random(8)
    model: Model = {}
    for ns, n in ((("s", "few"), soon - 1), (("s", "many"), soon), (("w", "old"), 8 * soon)):
        for i in range(n):
            put(writer, model, ns, f"k{i}", text(rng))
    writer.db.run(writer.ranker.merge_plan("w.old"))
    for i in range(soon):
        put(writer, model, ("w", "new"), f"k{i}", text(rng))
    reader = make_store()

    def merged(prefix: str) -> set[int | None]:
        return {m for _, m, _ in items_of(reader, prefix).values()}

    for scope, listed, waiting in (
        (("s", "few"), [], ["s.few"]),  # fewer than MERGE_SOON
        (("w",), ["w.old"], ["w.new"]),  # 16 of 144 searched: under an eighth
        (("s", "many"), ["s.many"], []),
        (("w", "new"), ["w.new"], []),  # all of those searched
    ):
        same_answer(
            bm25(reader, scope, "printer refund", 5), brute(model, scope, "printer refund", 5)
        )
        assert all(merged(p) == {1} for p in listed), scope
        assert all(merged(p) == {0} for p in waiting), scope


def test_chunks_split_at_chunk_entries_and_hold_the_listed_items(store: AgentMemoryStore) -> None:
    model: Model = {}
    rng = random.Random(3)
    for i in range(5 * MERGE_AT):
        put(store, model, ("c",), f"k{i:03}", "refund " + text(rng))
    refund = [c for c in chunks_of(store, "c") if (c[0], c[1]) == halves(term_id("refund"))]
    assert [len(c[4][0]) for c in refund] == [CHUNK] * (5 * MERGE_AT // CHUNK) + [
        5 * MERGE_AT % CHUNK
    ]
    assert_lists_hold_the_listed(store, model, "c")
    for query in ("refund", "printer refund", "munich"):
        same_answer(bm25(store, ("c",), query, 50), brute(model, ("c",), query, 50))


# -- retraction ----------------------------------------------------------------------------


def test_a_merge_rewrites_only_the_chunks_whose_range_holds_a_number_it_changes(
    store: AgentMemoryStore,
) -> None:
    """An early item rewritten and a later one deleted: of the ten chunks of a word in
    every item, the merge rewrites the two whose ranges hold their numbers (a chunk past
    CHUNK entries split on its own) and leaves the other eight as they were; the lists
    hold exactly the listed items and every search answers as reading every item would."""
    model: Model = {}
    rng = random.Random(9)
    for i in range(10 * CHUNK):
        put(store, model, ("r",), f"k{i:03}", "refund " + text(rng))
    store.db.run(store.ranker.merge_plan("r"))
    refund = halves(term_id("refund"))

    def refund_chunks() -> dict[int, list[list[int]]]:
        return {
            start: [a.tolist() for a in entries]
            for hi, lo, start, _, entries in chunks_of(store, "r")
            if (hi, lo) == refund
        }

    before = refund_chunks()
    assert len(before) == 10
    put(store, model, ("r",), "k012", "refund refund printer " + text(rng))
    delete(store, model, ("r",), "k040")
    store.db.run(store.ranker.merge_plan("r"))
    after = refund_chunks()
    kept = [start for start, entries in before.items() if after.get(start) == entries]
    assert len(kept) == 8, (before, after)
    assert_lists_hold_the_listed(store, model, "r")
    for query in ("refund", "printer refund", "coffee"):
        same_answer(bm25(store, ("r",), query, 20), brute(model, ("r",), query, 20))


def test_a_rewritten_items_old_terms_stop_matching_at_once_and_after_the_merge(
    store: AgentMemoryStore,
) -> None:
    model: Model = {}
    for i in range(MERGE_AT):
        put(store, model, ("r",), f"k{i}", f"printer {WORDS[i]}")
    assert {m for _, m, _ in items_of(store, "r").values()} == {1}
    put(store, model, ("r",), "k0", "coffee paris")  # printer out
    delete(store, model, ("r",), "k1")
    assert rows(store, "SELECT count(*) FROM am_store_retractions") == [(2,)]
    keys = {k for (_, k), _ in bm25(store, ("r",), "printer", 20)}
    assert keys == {f"k{i}" for i in range(2, MERGE_AT)}
    same_answer(
        bm25(store, ("r",), "printer coffee", 20), brute(model, ("r",), "printer coffee", 20)
    )
    for i in range(MERGE_AT, 2 * MERGE_AT - 2):  # with k0's put and k1's delete: a merge
        put(store, model, ("r",), f"k{i}", "munich")
    assert rows(store, "SELECT count(*) FROM am_store_retractions") == [(0,)]
    assert {m for _, m, _ in items_of(store, "r").values()} == {1}
    assert_lists_hold_the_listed(store, model, "r")
    for query in ("printer", "printer coffee", "paris munich"):
        same_answer(bm25(store, ("r",), query, 20), brute(model, ("r",), query, 20))


@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(seed=st.integers(0, 10_000), want=st.sampled_from([1, 3, 10, 30]))
def test_any_history_of_writes_gets_the_brute_force_answer(
    make_store: Callable[..., AgentMemoryStore], seed: int, want: int
) -> None:
    store = make_store()
    store.ranker.stats_seconds = 0.0
    rng = random.Random(seed)
    ns = ("h", f"{seed}-{next(_runs)}")  # each example its own (one database for all)
    model: Model = {}
    for step in range(120):
        key = f"k{rng.randrange(40)}"
        where = (*ns, rng.choice("ab"))
        if rng.random() < 0.2:
            delete(store, model, where, key)
        else:
            put(store, model, where, key, text(rng))
        if step % 20 == 19:
            query = " ".join(rng.sample(WORDS, rng.randint(1, 3)))
            same_answer(bm25(store, ns, query, want), brute(model, ns, query, want))
            one = (*ns, "a")
            same_answer(bm25(store, one, query, want), brute(model, one, query, want))
    for prefix in (".".join((*ns, "a")), ".".join((*ns, "b"))):
        assert_lists_hold_the_listed(store, model, prefix)


def test_writers_and_readers_merging_lose_nothing(store: AgentMemoryStore) -> None:
    """Two writers put and delete while a reader's queries merge; then every answer and the
    lists are the items' own."""
    rng = random.Random(11)
    model: Model = {}
    for i in range(40):
        put(store, model, ("w",), f"k{i}", text(rng))
    errors: list[BaseException] = []
    lock = threading.Lock()

    def write(seed: int) -> None:
        mine = random.Random(seed)
        try:
            for _ in range(80):
                key = f"k{mine.randrange(60)}"
                with lock:  # the model in the order of the writes
                    if mine.random() < 0.25:
                        delete(store, model, ("w",), key)
                    else:
                        put(store, model, ("w",), key, text(mine))
        except BaseException as exc:
            errors.append(exc)

    writers = [threading.Thread(target=write, args=(seed,)) for seed in (1, 2)]
    for w in writers:
        w.start()
    queries = 0
    while any(w.is_alive() for w in writers) or queries < 5:
        store.search(("w",), query="printer refund coffee", limit=5)
        queries += 1
    for w in writers:
        w.join()
    assert errors == []
    store.db.run(store.ranker.merge_plan("w"))
    assert_lists_hold_the_listed(store, model, "w")
    for query in ("printer refund coffee", "order berlin"):
        same_answer(bm25(store, ("w",), query, 12), brute(model, ("w",), query, 12))


# -- ties, expiry, filters -----------------------------------------------------------------


@pytest.mark.parametrize("ties_read", [I.TIES_READ, 4])
def test_ties_at_the_cut_are_ordered_by_namespace_then_key(
    store: AgentMemoryStore, monkeypatch: pytest.MonkeyPatch, ties_read: int
) -> None:
    """Items of one text in two namespaces tie; the first ``want`` are the smallest
    ``(namespace, key)``, read by number or, past TIES_READ tied, in key order."""
    monkeypatch.setattr(I, "TIES_READ", ties_read)
    model: Model = {}
    rng = random.Random(4)
    keys = [f"k{rng.randrange(10**6):06}" for _ in range(60)]
    for i, key in enumerate(keys):
        put(store, model, ("t", "b" if i % 2 else "a"), key, "printer refund")
        # below a namespace of the shard key: walked after the namespace's own items
        put(store, model, ("t", "b", "deep"), key[::-1], "printer refund")
    put(store, model, ("t", "a"), "zz", "printer printer refund")  # the best, alone
    for want in (1, 5, 20, 70):
        same_order(
            bm25(store, ("t",), "printer refund", want),
            brute(model, ("t",), "printer refund", want),
        )
        same_order(
            bm25(store, ("t", "b"), "refund", want), brute(model, ("t", "b"), "refund", want)
        )


@pytest.mark.parametrize("backend", pg_params())
def test_a_walked_tie_pages_in_the_databases_order_of_keys(
    request: pytest.FixtureRequest, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database may order keys otherwise than Python (an ICU collation puts "a1" before
    "B1"): a tie walked in key order (past TIES_READ tied) keeps the walk's order, so pages
    of any size are slices of one order (sorted again by Python's, the first page of one
    and a page of twelve began with different items)."""
    import psycopg
    from langgraph.store.base import PutOp

    from langgraph_checkpoint_agent_memory import create_store

    monkeypatch.setattr(I, "TIES_READ", 4)
    url = pg_database(request, backend)
    conninfo, kwargs = libpq_url(url)
    with psycopg.connect(conninfo, autocommit=True, **kwargs) as conn:
        if conn.execute("SELECT 1 FROM pg_collation WHERE collname = 'und-x-icu'").fetchone():
            collation = '"und-x-icu"'
        else:
            pytest.skip("this PostgreSQL has no ICU collations")
    store = create_store(url)
    try:
        store.setup()
        with psycopg.connect(conninfo, autocommit=True, **kwargs) as conn:
            conn.execute(
                f'ALTER TABLE am_store_items ALTER COLUMN "key" TYPE varchar(1024) '
                f"COLLATE {collation}"
            )
        keys = [f"{c}{i}" for c in "Bca" for i in range(6)]
        store.batch([PutOp(("tie", "x"), k, {"text": "apple pie"}) for k in keys])
        first = [i.key for i in store.search(("tie",), query="apple", limit=12)]
        assert first == [f"{c}{i}" for c in "aB" for i in range(6)]  # the collation's order
        for size in (1, 3, 4, 5):
            pages = [
                store.search(("tie",), query="apple", limit=size, offset=o)
                for o in range(0, 12 - size + 1, size)
            ]
            paged = [i.key for page in pages for i in page]
            assert paged == first[: len(paged)]
    finally:
        store.close()


@pytest.mark.parametrize("ties_read", [I.TIES_READ, 4])
def test_the_tied_walk_skips_expired_and_filtered_items(
    make_store: Callable[..., AgentMemoryStore], monkeypatch: pytest.MonkeyPatch, ties_read: int
) -> None:
    """Every match ties: the first ones by namespace and key among the live items passing
    the filter, read by number or walked in key order past TIES_READ tied."""
    monkeypatch.setattr(I, "TIES_READ", ties_read)
    clock = FakeClock(start=1_800_000_000)
    store = make_store(clock=clock)
    rng = random.Random(7)
    live: list[tuple[str, str, int]] = []
    for i in range(80):
        prefix, key = ("a", "b")[i % 2], f"k{rng.randrange(10**6):06}"
        expires = i % 3 == 0
        store.put(
            ("tw", prefix),
            key,
            {"text": "printer refund", "n": i % 5},
            ttl=1.0 if expires else None,
        )
        if not expires:
            live.append((f"tw.{prefix}", key, i % 5))
    clock.advance(120)
    sent = Recorder(store)
    for want in (1, 7, 30):
        found = store.search(("tw",), query="refund printer", limit=want)
        assert [(".".join(i.namespace), i.key) for i in found] == sorted(
            (p, k) for p, k, _ in live
        )[:want]
        found = store.search(("tw",), query="printer", filter={"n": {"$gte": 3}}, limit=want)
        assert [(".".join(i.namespace), i.key) for i in found] == sorted(
            (p, k) for p, k, n in live if n >= 3
        )[:want]
    walked = sent.took("ORDER BY am_store_items.prefix, am_store_items.")
    assert walked == (ties_read < len(live))


def test_a_filter_passing_only_lower_scores_reads_past_the_best_sorted(
    store: AgentMemoryStore,
) -> None:
    """Candidates are sorted only as far as the search reads them (four times what it
    wants and the tie at that cut, then more): a filter the database decides that only
    items after a long tie pass still finds the best of those, in score order."""
    from langgraph.store.base import PutOp

    # the first 40 each below the one before, 210 tied, then 50 each lower again
    length = [min(i, 40) if i < 250 else i - 209 for i in range(300)]
    store.batch(
        [
            PutOp(("f", "u"), f"k{i:03}", {"text": "printer " + "ink " * n, "g": str(i >= 250)})
            for i, n in enumerate(length)
        ]
    )
    for want in (1, 3, 20):
        found = store.search(("f",), query="printer", filter={"g": "True"}, limit=want)
        assert [i.key for i in found] == [f"k{i:03}" for i in range(250, 250 + want)]


@given(
    st.lists(st.sampled_from([0.5, 1.0, 1.5, 2.0]), min_size=1, max_size=60),
    st.integers(1, 70),
)
def test_the_best_first_are_a_full_sort_s_head_with_the_tie_at_the_cut_whole(
    scores: list[float], k: int
) -> None:
    """The ``k`` best candidates and every one tying with the ``k``-th are the head of the
    full sort by score then number; the rest is left out."""
    import numpy as np

    nums = np.asarray(random.Random(len(scores)).sample(range(1000), len(scores)))
    order = sorted(zip(nums.tolist(), scores, strict=True), key=lambda e: (-e[1], e[0]))
    got_nums, got_scores = I.best_first(nums, np.asarray(scores), k)
    cut = order[min(k, len(order)) - 1][1]
    head = [e for e in order if e[1] >= cut]
    assert list(zip(got_nums.tolist(), got_scores.tolist(), strict=True)) == head


def test_tens_of_thousands_tied_are_walked_in_key_order(
    make_store: Callable[..., AgentMemoryStore],
    store_backend: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """More than TIES_READ tied items (the index's own thresholds): the first ones by
    namespace and key, without reading every tied item by number."""
    from langgraph.store.base import PutOp

    if store_backend == "memory":
        pytest.skip("the same SQL as SQLite's")
    small_index(monkeypatch, OWN["MERGE_AT"], OWN["MERGE_CAP"])
    store = make_store()
    n = 20_000
    rng = random.Random(5)
    keys = [f"k{i:05}" for i in rng.sample(range(10**5), n)]
    for start in range(0, n, 2000):
        store.batch(
            [
                PutOp(("big", "b" if i % 3 else "a"), keys[i], {"text": "printer"})
                for i in range(start, min(start + 2000, n))
            ]
        )
    expected = sorted(("big.b" if i % 3 else "big.a", k) for i, k in enumerate(keys))
    sent = Recorder(store)
    got = bm25(store, ("big",), "printer", 10)
    assert [k for k, _ in got] == expected[:10]
    assert len({round(s, 9) for _, s in got}) == 1
    by_num = [p for t, p in sent.sent if "am_store_items.num IN" in t or "json_each" in t]
    assert all(len(str(p)) < 100_000 for p in by_num)  # never every tied number at once
    assert sent.took("ORDER BY am_store_items.prefix, am_store_items.")  # the walk


def test_a_walk_of_one_namespace_in_key_order_reads_the_range_of_its_keys(
    tmp_path: Path,
) -> None:
    """The walk of a long tie in the namespace's own items goes on from a key along the
    primary key: SQLite, given ``(prefix, key) > (:a_prefix, :a_key)`` with the prefix
    fixed, walked every namespace of the shard key from the prefix on and sorted it."""
    import sqlite3

    from langgraph_checkpoint_agent_memory import create_store

    path = tmp_path / "walk.db"
    store = create_store(f"sqlite:///{path}")
    store.setup()
    store.close()
    sql = store.statements.in_key_order((), True, True)
    params = {"shard": "a", "ns": "a.b", "now": 0.0, "a_key": "", "n": 10}
    params = sql.bind(params)
    with sqlite3.connect(path) as conn:
        plan = " / ".join(r[3] for r in conn.execute(f"EXPLAIN QUERY PLAN {sql.text}", params))
    assert "TEMP B-TREE" not in plan and "key>?" in plan, plan


@pytest.mark.parametrize("sealed", [False, True], ids=["plain", "encrypted"])
def test_a_search_above_the_shard_key_finds_every_shard_key_under_it_and_no_other(
    make_store: Callable[..., AgentMemoryStore], sealed: bool
) -> None:
    """A prefix shorter than the shard key spans shard keys, which the lists, the items
    not yet listed and an encrypted store's data keys are read by: each under the prefix
    is found, the prefix's own too, and none that only starts with its letters ("t-x" and
    "tx" sort between "t" and "t/" byte by byte)."""
    from langgraph_checkpoint_agent_memory import generate_master_key

    store = make_store(encryption=generate_master_key() if sealed else False)
    inside: list[tuple[str, ...]] = [("t",), ("t", "u1"), ("t", "u2", "deep"), ("t", "u3")]
    outside: list[tuple[str, ...]] = [("t-x", "u"), ("tx", "u"), ("s", "u")]
    for ns in inside + outside:
        for i in range(MERGE_AT + 1 if ns == ("t", "u1") else 1):  # listed, and not
            store.put(ns, f"k{i}", {"text": f"printer {WORDS[i % 10]}"})
    for query in ("printer", "printer " + WORDS[1]):
        found = store.search(("t",), query=query, limit=1000)
        assert {i.namespace for i in found} == set(inside), query
        everywhere = store.search((), query=query, limit=1000)
        assert {i.namespace for i in everywhere} == set(inside + outside), query


def test_a_search_above_the_shard_key_seeks_its_shard_keys(tmp_path: Path) -> None:
    """SQLite reads the lists, the items not yet listed and the shard keys of a search
    above the shard key by key: a range of shard keys scanned every row in it (a query
    over 100,000 items of one shard key took 20 ms instead of 4)."""
    import sqlite3

    from langgraph_checkpoint_agent_memory import create_store

    path = tmp_path / "seek.db"
    store = create_store(f"sqlite:///{path}")
    store.setup()
    store.close()
    statements = store.statements
    params = {**statements.prefix_params(("a",)), "his": "[1, 2]", "now": 0.0}
    with sqlite3.connect(path) as conn:
        for sql in (statements.lists(False, False, 2, False), statements.shards_under()):
            found = conn.execute(f"EXPLAIN QUERY PLAN {sql.text}", sql.bind(params))
            steps = [r[3].split() for r in found]
            scans = [s[1] for s in steps if s[0] == "SCAN" and not s[1].endswith("_shards")]
            assert not [t for t in scans if t.startswith("am_store")], steps


def test_an_expired_item_never_appears(make_store: Callable[..., AgentMemoryStore]) -> None:
    clock = FakeClock(start=1_800_000_000)
    store = make_store(clock=clock)
    for i in range(12):  # the best matches expire, listed and not
        store.put(("e",), f"hot{i}", {"text": "invoice invoice invoice"}, ttl=1.0)
    store.put(("e",), "cold", {"text": "an invoice among many other words here"}, ttl=None)
    clock.advance(120)
    assert [i.key for i in store.search(("e",), query="invoice", limit=1)] == ["cold"]
    assert [i.key for i in store.search(("e",), query="invoice", limit=20)] == ["cold"]


def test_a_filter_applies_to_a_query(store: AgentMemoryStore) -> None:
    for i in range(3 * MERGE_AT):
        store.put(("f",), f"k{i:02}", {"text": f"printer {WORDS[i % 10]}", "n": i})
    found = store.search(("f",), query="printer refund", filter={"n": {"$gte": 20}}, limit=3)
    assert [i.key for i in found] == ["k20", "k21", "k22"]  # tied on printer: by key
    refund = [i.key for i in store.search(("f",), query="refund", filter={"n": {"$lt": 15}})]
    assert refund == ["k09"]


def test_relevance_feedback_expands_from_listed_and_unlisted_items(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    """ "list" shares no word with the question; the first match's rarer words find it,
    its terms read from its row as listed (5 bytes a term) or not."""
    for listed in (False, True):
        on = make_store(weights=(1.0, 0.0), feedback=True)
        ns = ("u", f"caroline{listed}")
        on.put(ns, "said", {"text": "Caroline researched adoption agencies last week"})
        on.put(ns, "list", {"text": "adoption agencies: Hope House and Bright Futures"})
        for i in range(MERGE_AT - 2 if listed else 3):
            on.put(ns, f"other{i}", {"text": f"a walk by the lake {i}"})
        states = {m for _, m, _ in items_of(on, ".".join(ns)).values()}
        assert states == ({1} if listed else {0})
        found = on.search(ns, query="What did Caroline research?")
        assert [i.key for i in found] == ["said", "list"]


def test_a_word_repeated_past_255_ranks_by_its_exact_frequency(store: AgentMemoryStore) -> None:
    """Two items of one length, 300 and 299 of one word: the 300 first (a cap at 255 would
    tie them, ordered by key, "a" first), unlisted and listed."""
    model: Model = {}
    put(store, model, ("x",), "b", " ".join(["printer"] * 300))
    put(store, model, ("x",), "a", " ".join(["printer"] * 299 + ["refund"]))
    for listed in (False, True):
        if listed:
            store.db.run(store.ranker.merge_plan("x"))
            assert {m for _, m, _ in items_of(store, "x").values()} == {1}
            assert_lists_hold_the_listed(store, model, "x")
        got = bm25(store, ("x",), "printer", 2)
        assert [k for (_, k), _ in got] == ["b", "a"]
        assert got[0][1] > got[1][1]
        same_order(got, brute(model, ("x",), "printer", 2))


def test_a_namespace_delete_takes_its_lists(store: AgentMemoryStore) -> None:
    rng = random.Random(2)
    model: Model = {}
    for i in range(MERGE_AT):
        put(store, model, ("gone", "x"), f"k{i}", "printer " + text(rng))
        put(store, model, ("kept", "y"), f"k{i}", "printer " + text(rng))
    put(store, model, ("gone", "x"), "k0", "refund")  # a retraction too
    assert chunks_of(store, "gone.x") and chunks_of(store, "kept.y")
    store.delete_namespace(("gone",))
    assert chunks_of(store, "gone.x") == []
    assert rows(store, "SELECT count(*) FROM am_store_retractions") == [(0,)]
    assert chunks_of(store, "kept.y")
    assert bm25(store, ("gone",), "printer refund", 5) == []
    assert_lists_hold_the_listed(
        store, {k: v for k, v in model.items() if k[0] == "kept.y"}, "kept.y"
    )


async def test_async_search_merges_and_reads_the_lists_too(store: AgentMemoryStore) -> None:
    rng = random.Random(12)
    model: Model = {}
    for i in range(2 * MERGE_AT):
        words = text(rng) + " printer"
        await store.aput(("as",), f"k{i}", {"text": words})
        model[("as", f"k{i}")] = words
    found = await store.asearch(("as",), query="printer refund", limit=4)
    assert [i.key for i in found] == [k for (_, k), _ in brute(model, ("as",), "printer refund", 4)]
    assert_lists_hold_the_listed(store, model, "as")
    assert Counter(m for _, m, _ in items_of(store, "as").values()) == {1: 2 * MERGE_AT}


def test_a_read_only_database_answers_and_leaves_its_items_unlisted(tmp_path: Path) -> None:
    """A query that finds MERGE_AT items waiting on a read-only SQLite file (``chmod a-w``;
    as root also ``chattr +i``) answers from them without merging, and without an error."""
    from langgraph_checkpoint_agent_memory import create_store

    path = tmp_path / "ro.db"
    writers = [create_store(f"sqlite:///{path}") for _ in range(2)]
    rng = random.Random(8)
    model: Model = {}
    for i in range(2 * (MERGE_AT - 1)):  # no writer merges
        put(writers[i % 2], model, ("ro",), f"k{i}", text(rng))
    for w in writers:
        w.close()
    path.chmod(0o444)
    root = os.geteuid() == 0
    if root and subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode:
        pytest.skip("chattr +i does not work on this filesystem")
    try:
        store = create_store(f"sqlite:///{path}")
        store.ranker.stats_seconds = 0.0
        for _ in range(2):
            same_answer(
                bm25(store, ("ro",), "printer refund", 5),
                brute(model, ("ro",), "printer refund", 5),
            )
        assert {m for _, m, _ in items_of(store, "ro").values()} == {0}
        store.close()
    finally:
        if root:
            subprocess.run(["chattr", "-i", str(path)], check=True)
