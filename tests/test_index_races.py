"""The store's term index under concurrency: writers, deletes, TTL sweeps, erases and queries
race merges of the same namespace, each thread (or process) with its own store, for a number
of rounds; then the index must say what the items say.

After each race, for every namespace (:func:`check_index`): each item's ``terms`` are those of
the text it was indexed from; for every term, the numbers of its chunks minus the retracted
ones, plus the unlisted items holding it, are the items holding it, with their frequencies
and lengths (:meth:`.Lists.entries`, and the same worked out here by hand); chunks are well
formed (no number twice, a term's chunks apart, ``entries`` and ``last`` as the payload
says); a search returns the items holding its word, best first by BM25 worked out from the
items. After a final merge the chunks alone hold exactly that. An erased namespace leaves no
row in any ``am_store_*`` table.
"""

from __future__ import annotations

import functools
import itertools
import json
import multiprocessing
import random
import sqlite3
import threading
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langgraph.store.base import PutOp

from langgraph_checkpoint_agent_memory import (
    AgentMemory,
    AgentMemoryStore,
    RuleBasedExtractor,
    create_store,
)
from langgraph_checkpoint_agent_memory.db.database import Plan
from langgraph_checkpoint_agent_memory.db.term_index import (
    CHUNK,
    LISTED_BYTES,
    MAX_TF,
    UNLISTED_BYTES,
    encode_terms,
    halves,
    high_parts,
    term_id,
    unlisted_terms,
    unpack_chunks,
)
from langgraph_checkpoint_agent_memory.store import index as store_index
from langgraph_checkpoint_agent_memory.store import ranking as store_ranking
from langgraph_checkpoint_agent_memory.store import search as S
from langgraph_checkpoint_agent_memory.store.index import Lists, document_frequencies
from langgraph_checkpoint_agent_memory.text import postings, tokens
from tests.helpers import INDEXED_ITEMS, FakeClock
from tests.pg import backend_params, libpq_url, pg_database

#: Where the races run: SQLite (threads of one process, each with its own connection) and
#: PostgreSQL directly, behind PgBouncer and on Citus.
RACE_BACKENDS = backend_params("sqlite", "postgres", "pgbouncer", "citus")
#: How long a thread may take before the test gives up on it (a bound, never asserted).
PATIENCE = 120.0
#: The words the items say: few, so that items share terms and lists hold many entries.
WORDS = [
    *("berlin", "paris", "rome", "tokyo", "lima", "oslo", "cairo", "delhi", "quito", "sofia"),
    *("riga", "bern", "kyiv", "doha", "apple", "pear", "plum", "lemon", "mango", "melon"),
    *("olive", "grape", "cherry", "peach", "violin", "guitar", "drum", "flute"),
]
T = TypeVar("T")
STORE_TABLES = (
    "am_store_items",
    "am_store_vectors",
    "am_store_tags",
    "am_store_unlisted",
    "am_store_chunks",
    "am_store_retractions",
)


@pytest.fixture(params=RACE_BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database of the race's backend."""
    backend = str(request.param)
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'races.db'}"
    return pg_database(request, backend)


@pytest.fixture
def stores(url: str) -> Iterator[Callable[..., AgentMemoryStore]]:
    """Open stores on the test's database (each its own connections); closed at the end."""
    opened: list[AgentMemoryStore] = []

    def make(**options: Any) -> AgentMemoryStore:
        store = create_store(url, **options)
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


def text(rng: random.Random, most: int = 8, words: Sequence[str] = WORDS) -> str:
    """A few of ``words``, some said twice."""
    return " ".join(rng.choice(words) for _ in range(rng.randint(1, most)))


def key(i: int) -> str:
    """The ``i``-th key: keys sort as their numbers, so a batch of keys in order locks their
    rows in the order of the items' numbers, as a merge does (see
    :func:`test_merges_and_rewrites_in_any_order_do_not_deadlock` for any other order)."""
    return f"k{i:04d}"


def prefix_of(namespace: Sequence[str]) -> str:
    """A namespace as the tables name it."""
    return ".".join(namespace)


def merge(store: AgentMemoryStore, prefix: str) -> None:
    """Merge one namespace now, whatever it holds."""
    store.run_plan(store.ranker.merge_plan(prefix))


# ---------------------------------------------------------------------------- running races


class Racers:
    """Threads started together: ``finite`` ones run their rounds, ``loops`` repeat until
    every finite one is done (so every race is bounded by rounds, not by time); the first
    error of any is raised by :meth:`run`."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.errors: list[BaseException] = []
        self._finite: list[Callable[[], None]] = []
        self._loops: list[Callable[[], None]] = []

    def finite(self, job: Callable[[], None]) -> None:
        """Run ``job`` once (its own rounds)."""
        self._finite.append(job)

    def loop(self, step: Callable[[], None]) -> None:
        """Run ``step`` again and again until every finite job is done."""
        self._loops.append(step)

    def _guard(self, job: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                job()
            except BaseException as exc:
                self.errors.append(exc)
                self.done.set()

        return run

    def _looping(self, step: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            while not self.done.is_set():
                step()

        return run

    def run(self) -> None:
        """Start every job at once, wait for them all, raise the first error."""
        start = threading.Barrier(len(self._finite) + len(self._loops))

        def started(job: Callable[[], None]) -> Callable[[], None]:
            def run() -> None:
                start.wait(PATIENCE)
                job()

            return run

        finite = [
            threading.Thread(target=self._guard(started(j)), daemon=True) for j in self._finite
        ]
        loops = [
            threading.Thread(target=self._guard(started(self._looping(s))), daemon=True)
            for s in self._loops
        ]
        for t in (*finite, *loops):
            t.start()
        for t in finite:
            t.join(PATIENCE)
        self.done.set()
        for t in loops:
            t.join(PATIENCE)
        assert not any(t.is_alive() for t in (*finite, *loops)), "a racer did not end"
        if self.errors:
            raise self.errors[0]


# ------------------------------------------------------------------------- reading the truth


@dataclass
class Tables:
    """The store's rows as one read found them."""

    items: list[dict[str, Any]]
    chunks: list[dict[str, Any]]
    retractions: list[dict[str, Any]]
    counts: dict[str, Counter[str]] = field(default_factory=dict)  # table -> prefix -> rows

    def prefixes(self) -> set[str]:
        """Every namespace any of the index's tables holds rows of."""
        return {r["prefix"] for r in (*self.items, *self.chunks, *self.retractions)}


def _rows(cursor: Any) -> list[dict[str, Any]]:
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


_ITEMS = (
    "SELECT shard, prefix, key, value, expires_at, num, doc_len, terms, row_terms, merged, "
    f"waiting_num, waiting_doc_len FROM {INDEXED_ITEMS}"
)
#: A chunk's namespace: its shard key and the labels after it.
_CHUNK_PREFIX = "CASE WHEN rest = '' THEN shard ELSE shard || '.' || rest END"
_CHUNKS = f"SELECT shard, {_CHUNK_PREFIX} AS prefix, hi, lo, start, payload FROM am_store_chunks"
_RETRACTIONS = "SELECT shard, prefix, num, terms FROM am_store_retractions"


def read_tables(url: str) -> Tables:
    """Every row of the index's tables, read in one transaction."""
    queries = [_ITEMS, _CHUNKS, _RETRACTIONS]
    counting = [
        f"SELECT {_CHUNK_PREFIX if t == 'am_store_chunks' else 'prefix'}, count(*) "
        f"FROM {t} GROUP BY 1"
        for t in STORE_TABLES
    ]
    if url.startswith("sqlite"):
        db = sqlite3.connect(url.removeprefix("sqlite:///"))
        try:
            db.execute("BEGIN")
            found = [_rows(db.execute(q)) for q in queries]
            counts = [db.execute(q).fetchall() for q in counting]
            db.rollback()
        finally:
            db.close()
        for row in found[0]:
            row["value"] = json.loads(row["value"])
    else:
        conninfo, options = libpq_url(url)
        with psycopg.connect(conninfo, **options) as conn:
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            found = [_rows(conn.execute(q)) for q in queries]
            counts = [conn.execute(q).fetchall() for q in counting]
    for rows in found:
        for row in rows:
            for name in ("terms", "payload"):
                if row.get(name) is not None:
                    row[name] = bytes(row[name])
    by_table = {
        t: Counter({p: int(n) for p, n in c}) for t, c in zip(STORE_TABLES, counts, strict=True)
    }
    return Tables(found[0], found[1], found[2], by_table)


def indexed_text(value: Any) -> str:
    """The text a store without an index configuration indexes of a value."""
    return "\n".join(S.text_leaves(value))


def term_counts(doc: str) -> tuple[dict[int, int], int]:
    """``{term id: frequency}`` of a text and its length in terms."""
    found, length = postings(doc)
    counts: Counter[int] = Counter()
    for term, n in found.items():
        counts[term_id(term)] += n
    return dict(counts), length


Term = tuple[int, int]


def check_index(url: str, *, merged: bool = False, erased: Sequence[str] = ()) -> Tables:
    """Fail unless the index of every namespace says what its items say (see the module's
    docstring); ``merged``: also that a merge left nothing to list or retract; ``erased``:
    namespaces of which no row may be left."""
    tables = read_tables(url)
    for prefix in erased:
        left = {t: c[prefix] for t, c in tables.counts.items() if c[prefix]}
        assert not left, f"{prefix!r} was erased, yet rows are left: {left}"
    for prefix in sorted(tables.prefixes()):
        _check_namespace(tables, prefix, merged)
    return tables


def _check_namespace(tables: Tables, prefix: str, merged: bool) -> None:
    items = [r for r in tables.items if r["prefix"] == prefix]
    chunks = [r for r in tables.chunks if r["prefix"] == prefix]
    retractions = [r for r in tables.retractions if r["prefix"] == prefix]
    nums = [r["num"] for r in items]
    assert None not in nums and len(set(nums)) == len(nums), f"{prefix}: item numbers {nums}"
    # the truth: each item's terms from its text
    truth: defaultdict[Term, dict[int, tuple[int, int]]] = defaultdict(dict)
    for row in items:
        doc = indexed_text(row["value"])
        counts, length = term_counts(doc)
        where = f"{prefix}/{row['key']} (num {row['num']})"
        if not counts and not doc:
            assert row["merged"] is None and row["terms"] is None, where
            continue
        assert row["merged"] in (0, 1), where
        assert row["doc_len"] == length, where
        blob = row["terms"]
        # the item's row keeps its terms' high parts, listed or not: what a retraction needs
        his = sorted(halves(t)[0] for t in counts)
        assert sorted(high_parts(bytes(row["row_terms"])).tolist()) == his, where
        if row["merged"] == 0:  # the terms to list carry the item's number and length
            assert (row["waiting_num"], row["waiting_doc_len"]) == (row["num"], length), where
            assert len(blob) % UNLISTED_BYTES == 0, where
            ids, tfs = unlisted_terms(blob)
            held = dict(zip(ids.tolist(), tfs.tolist(), strict=True))
            assert held == {t: min(n, MAX_TF) for t, n in counts.items()}, where
        else:
            assert len(blob) % LISTED_BYTES == 0, where
            kept_terms = sorted(halves(t)[0] for t in counts)
            assert sorted(high_parts(blob).tolist()) == kept_terms, where
        for t, n in counts.items():
            truth[halves(t)][row["num"]] = (min(n, MAX_TF), length)
    # the chunks: well formed, a term's apart
    by_term: defaultdict[Term, list[dict[str, Any]]] = defaultdict(list)
    for c in chunks:
        by_term[(c["hi"], c["lo"])].append(c)
    in_chunks: dict[Term, dict[int, tuple[int, int]]] = {}
    for term, found in by_term.items():
        found.sort(key=lambda c: c["start"])
        entries: dict[int, tuple[int, int]] = {}
        before = None
        for c in found:
            where = f"{prefix}: chunk {term} from {c['start']}"
            payload = c["payload"]
            widths = [1 << code for code in (payload[0] & 3, payload[0] >> 2 & 3, payload[0] >> 4)]
            assert (len(payload) - 1) % sum(widths) == 0, f"{where}: widths vs payload"
            _, *decoded = unpack_chunks([c["start"]], [payload])
            n, tf, dl = (a.tolist() for a in decoded)
            assert 0 < len(n) <= CHUNK, where
            assert n[0] == c["start"], f"{where}: start vs payload"
            assert all(a < b for a, b in itertools.pairwise(n)), f"{where}: order {n}"
            assert before is None or c["start"] > before, f"{where}: overlaps the one before"
            before = n[-1]
            for num, f, d in zip(n, tf, dl, strict=True):
                assert num not in entries, f"{where}: {num} twice"
                entries[num] = (f, d)
        in_chunks[term] = entries
    # what a query sees, worked out here, and as Lists sees it
    unlisted = [r for r in items if r["merged"] == 0]
    unlisted_by_term: defaultdict[Term, dict[int, tuple[int, int]]] = defaultdict(dict)
    for r in unlisted:
        ids, tfs = unlisted_terms(r["terms"])
        for t, f in zip(ids.tolist(), tfs.tolist(), strict=True):
            unlisted_by_term[halves(t)][r["num"]] = (f, r["doc_len"])
    retracted_by_hi: defaultdict[int, set[int]] = defaultdict(set)
    for r in retractions:
        assert len(r["terms"]) % LISTED_BYTES == 0, f"{prefix}: retraction {r['num']}"
        for hi in high_parts(r["terms"]).tolist():
            retracted_by_hi[hi].add(r["num"])
    rows: list[tuple[Any, ...]] = [
        (0, prefix, c["hi"], c["lo"], c["start"], None, c["payload"]) for c in chunks
    ]
    rows += [(1, prefix, None, None, r["num"], r["doc_len"], r["terms"]) for r in unlisted]
    rows += [(2, prefix, None, None, r["num"], None, r["terms"]) for r in retractions]
    lists = Lists(rows)
    terms = sorted(set(truth) | set(in_chunks) | set(unlisted_by_term))
    df = document_frequencies(lists, terms)
    for term in terms:
        want = truth.get(term, {})
        fresh = unlisted_by_term.get(term, {})
        kept = {
            num: e
            for num, e in in_chunks.get(term, {}).items()
            if num not in retracted_by_hi[term[0]] and num not in fresh
        }
        by_hand = {**kept, **fresh}
        assert by_hand == want, (
            f"{prefix}: term {term}: chunks - retractions + unlisted hold "
            f"{sorted(by_hand)}, the items {sorted(want)}; "
            f"extra {sorted(set(by_hand) - set(want))}, missing {sorted(set(want) - set(by_hand))}"
        )
        n, tf, dl = lists.entries(term)
        seen = n.tolist()
        assert len(set(seen)) == len(seen), f"{prefix}: term {term}: a number twice {seen}"
        got = dict(zip(seen, zip(tf.tolist(), dl.tolist(), strict=True), strict=True))
        assert got == want, f"{prefix}: term {term}: Lists.entries {sorted(got)} vs {sorted(want)}"
        assert df[term] == len(want), f"{prefix}: term {term}: df {df[term]} vs {len(want)}"
    if merged:
        assert not retractions, f"{prefix}: retractions left after a merge"
        assert not unlisted, f"{prefix}: items left unlisted after a merge"
        listed = {t: e for t, e in in_chunks.items() if e}
        assert listed == {t: e for t, e in truth.items() if e}, f"{prefix}: chunks vs items"


def check_search(
    store: AgentMemoryStore, tables: Tables, namespace: tuple[str, ...], now: float
) -> None:
    """Fail unless searching each word returns the live items holding it, best first by
    BM25 worked out from the items."""
    prefix = prefix_of(namespace)
    items = [
        r
        for r in tables.items
        if r["prefix"] == prefix
        and r["doc_len"] is not None
        and (r["expires_at"] is None or r["expires_at"] > now)
    ]
    docs = len(items)
    avgdl = sum(r["doc_len"] for r in items) / docs if docs else 1.0
    counted = [(r, term_counts(indexed_text(r["value"]))[0]) for r in items]
    for word in WORDS[::3]:
        [term] = S.terms(word)
        tid = term_id(term)
        holding = {r["key"]: c[tid] for r, c in counted if tid in c}
        # df counts the listed items, expired ones too, until a sweep deletes them
        df = sum(1 for r in tables.items if r["prefix"] == prefix and tid in _ids_of(r))
        w = S.idf(docs, df) * (S.K1 + 1)
        dl = {r["key"]: r["doc_len"] for r in items}
        score = {
            k: w * tf / (S.K1 * (1 - S.B) + tf + S.K1 * S.B / (avgdl or 1.0) * dl[k])
            for k, tf in holding.items()
        }
        found = store.search(namespace, query=word, limit=len(items) + 1)
        keys = [item.key for item in found]
        assert set(keys) == set(holding), f"search {word!r} in {prefix}"
        ranked = [score[k] for k in keys]
        assert all(a >= b * (1 - 1e-9) for a, b in itertools.pairwise(ranked)), (
            f"search {word!r} in {prefix}: not best first by BM25: {keys} scored {ranked}"
        )


def _ids_of(row: dict[str, Any]) -> set[int]:
    return set(term_counts(indexed_text(row["value"]))[0]) if row["doc_len"] is not None else set()


def final_check(
    url: str, store: AgentMemoryStore, namespaces: Sequence[tuple[str, ...]], now: float
) -> None:
    """:func:`check_index`, searches, then a final merge of every namespace and the check
    that the chunks alone hold the items."""
    tables = check_index(url)
    for ns in namespaces:
        check_search(store, tables, ns, now)
    for prefix in sorted(tables.prefixes()):
        merge(store, prefix)
    check_index(url, merged=True)


def seeded(store: AgentMemoryStore, namespace: tuple[str, ...], keys: int, seed: int) -> None:
    """``keys`` items in ``namespace``, listed."""
    rng = random.Random(seed)
    store.batch([PutOp(namespace, key(i), {"text": text(rng)}) for i in range(keys)])
    merge(store, prefix_of(namespace))


# ----------------------------------------------------------------------------------- races

NS = ("races", "ns")


def test_rewrites_of_the_same_keys_while_merges_run(
    url: str, stores: Callable[..., AgentMemoryStore]
) -> None:
    """Writers rewrite a few keys over and over (each rewrite unlists the item, and a
    listed one is retracted), while a merge of the namespace runs again and again."""
    first = stores()
    seeded(first, NS, 24, seed=1)
    racers = Racers()

    def writer(seed: int) -> Callable[[], None]:
        store = stores()

        def run() -> None:
            rng = random.Random(seed)
            for _ in range(60):
                keys = sorted(rng.sample(range(24), rng.randint(1, 6)))
                store.batch([PutOp(NS, key(k), {"text": text(rng)}) for k in keys])

        return run

    merger = stores()
    racers.finite(writer(10))
    racers.finite(writer(11))
    racers.loop(lambda: merge(merger, prefix_of(NS)))
    racers.run()
    final_check(url, stores(), [NS], now=first._clock())


def test_deletes_and_ttl_sweeps_while_merges_run(
    url: str, stores: Callable[..., AgentMemoryStore]
) -> None:
    """A writer puts items with a TTL and without and deletes some; a sweeper moves the
    clock on and deletes what expired; a merge runs again and again."""
    clock = FakeClock()
    first = stores(clock=clock)
    seeded(first, NS, 24, seed=2)
    racers = Racers()
    writer, sweeper, merger = (stores(clock=clock) for _ in range(3))

    def write() -> None:
        rng = random.Random(20)
        for _ in range(60):
            ops: list[PutOp] = [
                PutOp(NS, key(k), {"text": text(rng)}, ttl=rng.choice((None, 1.0)))
                for k in rng.sample(range(32), rng.randint(1, 5))
            ]
            ops += [PutOp(NS, key(k), None) for k in rng.sample(range(32), rng.randint(0, 2))]
            unique = {op.key: op for op in ops}
            writer.batch([unique[k] for k in sorted(unique)])

    def sweep() -> None:
        for _ in range(30):
            clock.advance(20)
            sweeper.sweep()

    racers.finite(write)
    racers.finite(sweep)
    racers.loop(lambda: merge(merger, prefix_of(NS)))
    racers.run()
    final_check(url, stores(clock=clock), [NS], now=clock())
    clock.advance(120)
    first.sweep()
    final_check(url, stores(clock=clock), [NS], now=clock())


def test_delete_namespace_while_merges_run_leaves_nothing(
    url: str, stores: Callable[..., AgentMemoryStore]
) -> None:
    """Each round fills a namespace (items listed, rewritten, deleted: unlisted items and
    retractions both pending), then deletes it while merges of it run: once a merge of its
    own has run after the delete, no row of the namespace is left."""
    owner, merger = stores(), stores()
    racers = Racers()

    def rounds() -> None:
        rng = random.Random(30)
        for r in range(12):
            owner.batch([PutOp(NS, key(i), {"text": text(rng)}) for i in range(20)])
            merge(owner, prefix_of(NS))
            owner.batch([PutOp(NS, key(i), {"text": text(rng)}) for i in range(0, 20, 2)])
            owner.batch([PutOp(NS, key(i), None) for i in range(1, 20, 4)])
            owner.batch([PutOp(NS, key(100 * r + i), {"text": text(rng)}) for i in range(6)])
            owner.delete_namespace(NS)
            merge(owner, prefix_of(NS))  # waits for any merge that began before the delete
            check_index(url, erased=[prefix_of(NS)])

    racers.finite(rounds)
    racers.loop(lambda: merge(merger, prefix_of(NS)))
    racers.run()


def test_delete_namespace_while_writers_and_merges_run(
    url: str, stores: Callable[..., AgentMemoryStore]
) -> None:
    """Writers put new keys in a namespace, a merge of it runs again and again, and the
    namespace is deleted every few rounds: a merge must not write back into the lists what
    the delete took out (entries of items gone, with no retraction to hide them)."""
    owner, merger = stores(), stores()
    seeded(owner, NS, 40, seed=4)
    racers = Racers()

    def writer(seed: int) -> Callable[[], None]:
        store = stores()

        def run() -> None:
            rng = random.Random(seed)
            for r in range(80):
                store.batch([PutOp(NS, f"w{seed}.{r}.{i}", {"text": text(rng)}) for i in range(3)])

        return run

    def deleter() -> None:
        rng = random.Random(41)
        for _ in range(12):
            owner.batch([PutOp(NS, f"d{i}", {"text": text(rng)}) for i in range(40)])
            merge(owner, prefix_of(NS))
            owner.delete_namespace(NS)

    racers.finite(writer(42))
    racers.finite(writer(43))
    racers.finite(deleter)
    racers.loop(lambda: merge(merger, prefix_of(NS)))
    racers.run()
    final_check(url, stores(), [NS], now=owner._clock())


def test_two_merges_of_one_namespace_at_once(
    url: str, stores: Callable[..., AgentMemoryStore]
) -> None:
    """Each round writes (new keys, rewrites, deletes), then three merges of the namespace
    start together; after each round the index says what the items say."""
    writer = stores()
    mergers = [stores() for _ in range(3)]
    seeded(writer, NS, 30, seed=5)
    rng = random.Random(50)
    for _ in range(10):
        ops = [PutOp(NS, key(k), {"text": text(rng)}) for k in sorted(rng.sample(range(60), 20))]
        writer.batch(ops)
        writer.batch([PutOp(NS, key(k), None) for k in sorted(rng.sample(range(60), 5))])
        racers = Racers()
        for m in mergers:
            racers.finite(functools.partial(merge, m, prefix_of(NS)))
        racers.run()
        check_index(url, merged=True)
    final_check(url, writer, [NS], now=writer._clock())


def test_new_keys_from_several_writers_while_queries_run(
    url: str, stores: Callable[..., AgentMemoryStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writers put new keys into two namespaces while queries run; merges start from both
    (:data:`.index.MERGE_AT` lowered so they start often). Every item a query returns holds
    its word (no key is rewritten, so one found by a stale list would show)."""
    monkeypatch.setattr(store_index, "MERGE_AT", 8)
    monkeypatch.setattr(store_ranking, "MERGE_AT", 8)
    spaces = [("races", "a"), ("races", "b")]
    first = stores()
    for i, ns in enumerate(spaces):
        seeded(first, ns, 10, seed=60 + i)
    racers = Racers()

    def writer(seed: int) -> Callable[[], None]:
        store = stores()

        def run() -> None:
            rng = random.Random(seed)
            for r in range(50):
                ns = rng.choice(spaces)
                store.batch([PutOp(ns, f"w{seed}.{r}.{i}", {"text": text(rng)}) for i in range(3)])

        return run

    def querier(seed: int) -> Callable[[], None]:
        store = stores()
        rng = random.Random(seed)

        def step() -> None:
            word = rng.choice(WORDS)
            [term] = S.terms(word)
            for item in store.search(rng.choice(spaces), query=word, limit=5):
                assert term in tokens(indexed_text(item.value)), (word, item.key, item.value)

        return step

    racers.finite(writer(70))
    racers.finite(writer(71))
    racers.loop(querier(72))
    racers.loop(querier(73))
    racers.run()
    final_check(url, stores(), spaces, now=first._clock())


def test_merges_and_rewrites_in_any_order_do_not_deadlock(
    url: str, stores: Callable[..., AgentMemoryStore]
) -> None:
    """Writers rewrite keys in the reverse order of their numbers (each the same order, so
    they cannot deadlock on each other) while merges run, which lock the unlisted items in
    the order of their numbers: no put and no merge may fail with a deadlock."""
    first = stores()
    seeded(first, NS, 24, seed=8)
    racers = Racers()

    def writer(seed: int) -> Callable[[], None]:
        store = stores()

        def run() -> None:
            rng = random.Random(seed)
            for _ in range(60):
                keys = sorted(rng.sample(range(24), rng.randint(2, 8)), reverse=True)
                store.batch([PutOp(NS, key(k), {"text": text(rng)}) for k in keys])

        return run

    merger = stores()
    racers.finite(writer(80))
    racers.finite(writer(81))
    racers.loop(lambda: merge(merger, prefix_of(NS)))
    racers.run()
    final_check(url, stores(), [NS], now=first._clock())


# ------------------------------------------------------- interleavings forced on PostgreSQL


@pytest.fixture(params=backend_params("postgres", "pgbouncer"))
def pg_url(request: pytest.FixtureRequest) -> str:
    """An empty PostgreSQL database, directly or behind PgBouncer (where the test watches
    ``pg_stat_activity`` for who waits: on Citus the waits are the workers')."""
    return pg_database(request, str(request.param))


@pytest.fixture
def pg_stores(pg_url: str) -> Iterator[Callable[..., AgentMemoryStore]]:
    """Open stores on :func:`pg_url`'s database; closed at the end."""
    opened: list[AgentMemoryStore] = []

    def make(**options: Any) -> AgentMemoryStore:
        store = create_store(pg_url, **options)
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


def connect(url: str) -> psycopg.Connection[Any]:
    """A connection of the test's own to the database at ``url``."""
    conninfo, options = libpq_url(url)
    return psycopg.connect(conninfo, **options)


def lock_waiters(conn: psycopg.Connection[Any]) -> int:
    """How many other sessions of this database wait for a lock."""
    row = conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
    ).fetchone()
    assert row is not None
    return int(row[0])


def wait_until(check: Callable[[], bool], what: str) -> None:
    """Poll ``check`` until it holds (a bound on a hang, never a timing assertion)."""
    event = threading.Event()
    for _ in range(int(PATIENCE / 0.02)):
        if check():
            return
        event.wait(0.02)
    raise AssertionError(f"gave up waiting: {what}")  # pragma: no cover - a hang


class Call(threading.Thread):
    """A call in its own thread; :meth:`value` returns what it returned or raises."""

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
        """What the call returned (it raises what the call raised)."""
        self.join(PATIENCE)
        assert self.result is not None, "the call did not end"
        ok, value = self.result
        if not ok:
            raise value
        return value


def paused(plan: Plan[T], after: int, reached: threading.Event, go: threading.Event) -> Plan[T]:
    """``plan``, stopped after its first ``after`` batches (``reached`` set) until ``go``."""
    batch = next(plan)
    sent = 0
    while True:
        results = yield batch
        sent += 1
        if sent == after:
            reached.set()
            go.wait(PATIENCE)
        try:
            batch = plan.send(results)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]


@pytest.mark.parametrize("change", ["rewrite", "delete"])
def test_a_write_that_waits_for_a_merge_is_retracted(
    pg_url: str, pg_stores: Callable[..., AgentMemoryStore], change: str
) -> None:
    """A merge has locked an unlisted item (its first batch); a rewrite or a delete of the
    item then waits for it. The merge lists the item and commits; the write, which found the
    item unlisted before it waited, must still retract what the merge listed."""
    store, merger, writer = pg_stores(), pg_stores(), pg_stores()
    seeded(store, NS, 4, seed=9)
    store.put(NS, key(0), {"text": "berlin berlin rome"})  # listed, rewritten: unlisted
    prefix = prefix_of(NS)
    reached, go = threading.Event(), threading.Event()
    plan = store_index.merge_plan(merger.statements, merger.statements.shard(prefix), prefix)
    merging = Call(lambda: merger.run_plan(paused(plan, 1, reached, go)))
    merging.start()
    assert reached.wait(PATIENCE), "the merge did not lock the items"
    if change == "rewrite":
        writing = Call(lambda: writer.put(NS, key(0), {"text": "paris"}))
    else:
        writing = Call(lambda: writer.delete(NS, key(0)))
    with connect(pg_url) as watch:
        watch.autocommit = True
        writing.start()
        wait_until(lambda: lock_waiters(watch) >= 1, "the write waits for the merge's lock")
    go.set()
    merging.value()
    writing.value()
    final_check(pg_url, pg_stores(), [NS], now=store._clock())


def test_a_namespace_delete_while_a_rewrite_commits_leaves_no_terms_to_list(
    pg_url: str, pg_stores: Callable[..., AgentMemoryStore]
) -> None:
    """A rewrite of a listed item holds its row and has put up its new terms to list, not
    yet committed; a delete of the namespace waits for the row and goes on once the rewrite
    commits. It must leave no terms to list behind (the rows of an item gone: every search
    of the namespace would read them, and a new put of the key would find them)."""
    store, deleter = pg_stores(), pg_stores()
    seeded(store, NS, 3, seed=1)
    prefix = prefix_of(NS)
    merge(store, prefix)
    terms = encode_terms({"berlin": 1})
    with connect(pg_url) as writer, connect(pg_url) as watch:
        watch.autocommit = True
        ident = (prefix, key(0))
        where = "WHERE prefix = %s AND key = %s"
        # what a rewrite writes, in its order: the item's row locked and written, then its
        # terms to list
        writer.execute(f"SELECT num FROM am_store_items {where} FOR UPDATE", ident)
        writer.execute(f"UPDATE am_store_items SET updated_at = updated_at + 1 {where}", ident)
        writer.execute(
            "INSERT INTO am_store_unlisted (shard, prefix, key, num, doc_len, terms) "
            f"SELECT shard, prefix, key, num, doc_len, %s FROM am_store_items {where}",
            (terms, *ident),
        )
        deleting = Call(lambda: deleter.delete_namespace(NS))
        deleting.start()
        wait_until(lambda: lock_waiters(watch) >= 1, "the delete waits for the rewrite")
        writer.commit()
        deleting.value()
        left = watch.execute("SELECT key FROM am_store_unlisted").fetchall()
    assert left == []
    assert store.search(NS, query="berlin") == []
    store.put(NS, key(0), {"text": "berlin rome"})
    assert [i.key for i in store.search(NS, query="berlin")] == [key(0)]
    final_check(pg_url, pg_stores(), [NS], now=store._clock())


def test_an_erase_while_a_merge_rewrites_the_lists_leaves_nothing_of_the_scope(
    pg_url: str, pg_stores: Callable[..., AgentMemoryStore]
) -> None:
    """Erase has deleted the scope's items and lists and waits (for the test's lock on its
    decay rows); an item written to the scope's namespace meanwhile is merged: the merge read
    the lists before erase committed and rewrites them after. Once both are done the lists
    must hold the new item only, nothing of the erased ones."""
    store, merger, writer = pg_stores(), pg_stores(), pg_stores()
    memory: AgentMemory[Any] = AgentMemory(store, extractor=RuleBasedExtractor())
    scope = {"user_id": "u1"}
    for i, city in enumerate(("Berlin", "Paris", "Berlin")):
        said = [{"role": "user", "content": f"I live in {city}"}]
        memory.record(scope, said, thread_id="t1", key=f"e{i}")
    memory.consolidate()
    tables = read_tables(pg_url)
    spaces = sorted({r["prefix"] for r in tables.items})
    assert spaces, "the memory wrote no items"
    for prefix in spaces:
        merge(store, prefix)
    prefix = next(r["prefix"] for r in tables.items if "berlin" in json.dumps(r["value"]).lower())
    namespace = tuple(prefix.split("."))
    with connect(pg_url) as blocker, connect(pg_url) as watch:
        watch.autocommit = True
        blocker.execute("SELECT 1 FROM am_memory_decay FOR UPDATE")
        erasing = Call(lambda: memory.erase(scope))
        erasing.start()
        wait_until(lambda: lock_waiters(watch) >= 1, "erase waits for the test's lock")
        writer.put(namespace, "late", {"text": "berlin"})
        merging = Call(lambda: merge(merger, prefix))
        merging.start()
        wait_until(
            lambda: lock_waiters(watch) >= 2 or not merging.is_alive(),
            "the merge waits for erase, or is done",
        )
        blocker.rollback()
        erasing.value()
        merging.value()
    tables = check_index(pg_url)
    assert {r["key"] for r in tables.items} == {"late"}
    final_check(pg_url, pg_stores(), [namespace], now=store._clock())


# -------------------------------------------------------------- SQLite, several processes


def _process(url: str, role: str, seed: int) -> None:
    """One process of :func:`test_processes_share_a_sqlite_index`."""
    for module in (store_index, store_ranking):  # this process's merges start often
        setattr(module, "MERGE_AT", 8)  # noqa: B010
    store = create_store(url)
    rng = random.Random(seed)
    try:
        for _ in range(40):
            if role == "writer":
                keys = rng.sample(range(30), rng.randint(1, 6))
                ops: list[PutOp] = [PutOp(NS, key(k), {"text": text(rng)}) for k in keys]
                ops += [PutOp(NS, key(k), None) for k in rng.sample(range(30), rng.randint(0, 2))]
                store.batch(list({op.key: op for op in ops}.values()))
            else:
                merge(store, prefix_of(NS))
                store.search(NS, query=rng.choice(WORDS), limit=5)
    finally:
        store.close()


def test_processes_share_a_sqlite_index(tmp_path: Path) -> None:
    """Two writer processes rewrite and delete keys in any order while a third merges and
    queries (merges start from the writers' puts and from the queries too)."""
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    first = create_store(url)
    try:
        seeded(first, NS, 20, seed=90)
        spawn = multiprocessing.get_context("spawn")
        roles = [("writer", 91), ("writer", 92), ("merger", 93)]
        procs = [spawn.Process(target=_process, args=(url, r, s)) for r, s in roles]
        for p in procs:
            p.start()
        for p in procs:
            p.join(PATIENCE)
        assert [p.exitcode for p in procs] == [0, 0, 0]
        final_check(url, first, [NS], now=first._clock())
    finally:
        first.close()


# ------------------------------------------- interleavings of two stores, chosen by Hypothesis

#: A step: what, which key, a seed for its text, which of the two stores.
STEPS = st.lists(
    st.tuples(
        st.sampled_from(["put", "put", "delete", "merge", "sweep", "search"]),
        st.integers(0, 11),
        st.integers(0, 2**16),
        st.booleans(),
    ),
    min_size=1,
    max_size=40,
)


@pytest.fixture(params=backend_params("sqlite", "postgres"))
def shared_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """One database for every example of a test (each example has its own namespace)."""
    backend = str(request.param)
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'steps.db'}"
    return pg_database(request, backend)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=STEPS)
def test_two_stores_interleaved_with_small_chunks_and_merges(
    shared_url: str, monkeypatch: pytest.MonkeyPatch, steps: list[tuple[str, int, int, bool]]
) -> None:
    """Two stores (each its own connections) take turns at puts (some with a TTL), deletes,
    merges, sweeps and searches, with chunks of 3 entries, merges of 4 items a transaction
    and merges started by 3 pending items: a term's lists span many chunks, a merge rewrites
    some of them and leaves items unlisted, and on SQLite a deleted item's number returns."""
    for module, name, value in (
        (store_index, "CHUNK", 3),
        (store_index, "MERGE_CAP", 4),
        (store_index, "MERGE_AT", 3),
        (store_ranking, "MERGE_AT", 3),
    ):
        monkeypatch.setattr(module, name, value)
    clock = FakeClock()
    pair = [create_store(shared_url, clock=clock) for _ in range(2)]
    namespace = ("steps", uuid.uuid4().hex[:12])
    prefix = prefix_of(namespace)
    try:
        for what, k, seed, which in steps:
            store = pair[which]
            rng = random.Random(seed)
            if what == "put":
                ttl = 1.0 if seed % 4 == 0 else None
                store.put(namespace, key(k), {"text": text(rng, 4, WORDS[:6])}, ttl=ttl)
            elif what == "delete":
                store.delete(namespace, key(k))
            elif what == "merge":
                merge(store, prefix)
            elif what == "sweep":
                clock.advance(45)
                store.sweep()
            else:
                store.search(namespace, query=rng.choice(WORDS[:6]), limit=5)
        final_check(shared_url, pair[0], [namespace], now=clock())
    finally:
        for store in pair:
            store.close()
