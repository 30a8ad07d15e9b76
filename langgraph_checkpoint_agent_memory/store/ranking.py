"""How the store ranks: BM25 over its own term index, vector similarity, and their
reciprocal rank fusion, as plans over the ``db`` layer's statements.

A :class:`Ranker` returns ``(prefix, key)`` pairs with scores (the lexical candidates' rows
read with them, should the caller pass a dict for them: :data:`.index.Rows`); it caches
what moves slowly (corpus statistics, vector counts, recall's normalized vectors). Vector
similarity is approximate (HNSW), exact in SQL or in numpy (``docs/internals/vector-search.md``);
an approximate scan that stops short of enough matches is answered exactly instead.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import numpy as np

from langgraph_checkpoint_agent_memory.db.database import Batch, Plan, Stmt
from langgraph_checkpoint_agent_memory.db.dialect import VectorIndex
from langgraph_checkpoint_agent_memory.db.store import (
    Fingerprint,
    KeyVectorRow,
    Prefilter,
    ScoredRow,
    SealedVectorRow,
    StoreStatements,
    TextStats,
    VectorRow,
    scoped,
    vector_text,
)
from langgraph_checkpoint_agent_memory.db.term_index import high_parts
from langgraph_checkpoint_agent_memory.store import feedback as F
from langgraph_checkpoint_agent_memory.store import search as S
from langgraph_checkpoint_agent_memory.store.index import (
    MERGE_AT,
    MERGE_SOON,
    MERGE_WRITES,
    Form,
    Lists,
    Rows,
    best_plan,
    bm25,
    document_frequencies,
    form_of,
    lists_plan,
    merged_plan,
)
from langgraph_checkpoint_agent_memory.store.sealing import Sealer
from langgraph_checkpoint_agent_memory.telemetry import metrics

K = TypeVar("K", str, tuple[str, str])
logger = logging.getLogger(__name__)
E = TypeVar("E")
#: A lexical query's filter, namespace parameters, how many, ``exact`` and ``joined``.
How = tuple[Prefilter, dict[str, Any], int, bool, bool]
#: A cached count: ``(count, value, when read, the store's writes then)``.
Counted = tuple[int, float, float, int]


class Ranker:
    """Ranked candidates for a store's searches.

    Args:
        statements: The store's SQL for its dialect.
        ranking: Fusion weights, constant and candidate count.
        clock: Seconds since the epoch, as the store's.

    Example:
        >>> import time
        >>> store.put(("users", "a"), "home_city", {"text": "I live in Berlin"})
        >>> ranker = store.ranker  # each AgentMemoryStore has one
        >>> plan = ranker.rank_keys_plan(("users", "a"), "berlin", None, 5, time.time())
        >>> [key for key, score in store.db.run(plan)]
        ['home_city']
    """

    def __init__(
        self,
        statements: StoreStatements,
        ranking: S.Ranking,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.statements = statements
        self.ranking = ranking
        self._clock = clock
        self.lock = threading.Lock()
        #: namespace -> (fingerprint, keys, normalized vectors), for recall's exact search
        self.matrices: OrderedDict[str, tuple[tuple[int, float], list[str], Any]] = OrderedDict()
        self.matrix_cache_bytes = 64 * 2**20
        #: (namespace, exact) -> BM25's corpus statistics (items, average length, ...).
        self.stats: OrderedDict[tuple[str, bool], Counted] = OrderedDict()
        self.stats_seconds = 60.0
        #: Per namespace, the items this process wrote since it merged it (:meth:`written`).
        self.unmerged: Counter[str] = Counter()
        #: Per namespace, until when merges are not tried (the database refused one).
        self.declined: dict[str, float] = {}
        #: Pseudo-relevance feedback (:mod:`.feedback`) of search and of recall (``None``: off).
        self.feedback: F.Feedback | None = None
        self.recall_feedback: F.Feedback | None = F.Feedback()
        self.writes = 0  # items the store has written
        self.dims: int | None = None  # the store's vector length (``None``: no embedder)
        self.vector_index: VectorIndex | None = None  # found when the store sets up
        self.fields = 1  # vectors an item has at most: an approximate search reads each
        #: The switch between exact and approximate search (:meth:`takes_index`; measured,
        #: ``benchmarks run stores``, and explained in ``docs/internals/vector-search.md``).
        self.exact_max = 2_000
        self.index_cost = 50.0
        self.count_cap = 200_000
        #: (namespace, index) -> (vectors, index size, when read, writes then).
        self.vector_counts: OrderedDict[tuple[str, str], Counted] = OrderedDict()
        self.ann_fallbacks = 0  # approximate searches that stopped short, answered exactly
        #: Encryption at rest (``None``: off): vectors are ranked exactly here, decrypted.
        self.sealer: Sealer | None = None
        #: (namespace, scoped) -> (fingerprint, vectors decrypted), for encrypted searches.
        self.opened: OrderedDict[
            tuple[str, bool], tuple[tuple[int, float, int], list[VectorRow]]
        ] = OrderedDict()

    @property
    def rrf_k(self) -> int:
        """The constant of the fusion (:func:`.search.fuse`), the units of a fused score."""
        return self.ranking.rrf_k

    def after_fork(self) -> None:
        self.lock = threading.Lock()  # a lock another thread of the parent held

    def fused_plan(
        self,
        query_terms: list[str],
        query_vector: list[float] | None,
        filters: Prefilter,
        base: dict[str, Any],
        want: int,
        *,
        exact: bool = False,
        joined: bool = False,
        forms: list[list[str]] | None = None,
        feedback: F.Feedback | None = None,
        read: Rows | None = None,
    ) -> Plan[tuple[list[tuple[tuple[str, str], float]], bool]]:
        """``((prefix, key), fused score)`` of the best ``want`` lexical and vector candidates
        under ``base``'s prefix, best first; and whether a list was cut there. ``read`` gets
        the rows of the lexical candidates read (vector candidates are not read)."""
        lexical: list[tuple[str, str]] = []
        closest: list[tuple[str, str]] = []
        cut = False
        if query_terms and (forms is None or any(forms)):
            how = (filters, base, want, exact, joined)
            lexical = yield from self.lexical_plan(query_terms, how, forms, feedback, read)
            cut = len(lexical) >= want
        if query_vector is not None:
            closest, vector_cut = yield from self.vector_plan(
                query_vector, filters, base, want, joined=joined
            )
            cut = cut or vector_cut
        return self.ranking.fuse(lexical, closest), cut

    def kept_plan(
        self,
        query_terms: list[str],
        query_vector: list[float] | None,
        base: dict[str, Any],
        want: int,
        decide: Callable[[list[tuple[str, str]]], Plan[set[tuple[str, str]]]],
        forms: list[list[str]] | None,
        read: Rows | None = None,
    ) -> Plan[list[tuple[tuple[str, str], float]]]:
        """:meth:`fused_plan` of a filtered search with encryption on: each list ranks only the
        items ``decide`` keeps (as the pre-filter does without encryption, so the fused scores
        are the same), decided best first until it holds ``want`` kept items or every match
        (lexical: read with more candidates, then expanded from the first kept ones).
        ``read``: as :meth:`fused_plan`'s."""
        lexical: list[tuple[str, str]] = []
        closest: list[tuple[str, str]] = []
        if query_terms and (forms is None or any(forms)):
            groups = _groups(query_terms, forms)
            boosts, lists = [1.0] * len(groups), None
            for expanded in (False, True):
                size = want
                while True:
                    how = ((), base, size, False, True)
                    raw, lists = yield from self._bm25_plan(groups, boosts, how, lists, read)
                    passing = yield from decide([k for k, _ in raw])
                    kept = [(k, score) for k, score in raw if k in passing]
                    if len(kept) >= want or len(raw) < size:
                        break
                    size *= 4
                if expanded or self.feedback is None or not kept:
                    break
                how = ((), base, want, False, True)
                more = yield from self._expansion_plan(kept, groups, how, self.feedback)
                if more is None:
                    break
                groups, boosts, lists = more
            lexical = [k for k, _ in kept]
        if query_vector is not None:
            rows = yield from self._sealed_rows_plan(base)
            order = nearest(rows, query_vector, len(rows))
            for start in range(0, len(order), 2 * want):
                chunk = order[start : start + 2 * want]
                passing = yield from decide(chunk)
                closest += [k for k in chunk if k in passing]
                if len(closest) >= want:
                    break
        return self.ranking.fuse(lexical[:want], closest[:want])

    def vector_plan(
        self,
        query_vector: list[float],
        filters: Prefilter,
        base: dict[str, Any],
        want: int,
        *,
        joined: bool = True,
    ) -> Plan[tuple[list[tuple[str, str]], bool]]:
        """The ``want`` items under ``base``'s prefix most similar to ``query_vector``, best
        first, and whether the list was cut at ``want``. ``joined`` off (no filter): exact
        search skips the items (much cheaper; the store ranks again joined if too few live)."""
        if self.sealer is not None:  # no index can read sealed vectors: exact, decrypted here
            opened = yield from self._sealed_rows_plan(base)
            closest = nearest(opened, query_vector, want + 1)
            return closest[:want], len(closest) > want
        n, one = want * self.fields, scoped(base)
        params = {**base, "n": n, "query_vector": vector_text(query_vector)}
        index = self.vector_index
        if index is not None and index.dims == len(query_vector):
            approximate = yield from self._approximate_pays(index, base, want)
            if approximate:
                *settings, query = self.statements.ann_search(index, filters, one)
                found = yield Batch([*map(Stmt, settings), Stmt(query, params, fetch=True)])
                if len(found[-1]) >= n:
                    return best_items(list(map(ScoredRow._make, found[-1])), want), True
                # the scan stopped short of n matches: the exact answer holds every one
                self.ann_fallbacks += 1
                joined = True
        native = self.statements.vector_search(
            filters, len(query_vector), joined=joined, scoped=one
        )
        if native is not None:  # exact similarity computed by the database
            [rows] = yield Batch([Stmt(native, params, fetch=True)])
            return best_items(list(map(ScoredRow._make, rows)), want), len(rows) >= n
        [rows] = yield Batch([Stmt(self.statements.vectors(filters, one), base, fetch=True)])
        closest = nearest(rows, query_vector, want + 1)
        return closest[:want], len(closest) > want

    def _sealed_rows_plan(self, base: dict[str, Any]) -> Plan[list[VectorRow]]:
        """The vectors under ``base``'s namespace, decrypted, cached by its fingerprint."""
        one = scoped(base)
        [fp] = yield Batch([Stmt(self.statements.fingerprint_under(one), base, fetch=True)])
        fingerprint = (int(fp[0][0]), float(fp[0][1] or 0.0), self.writes)
        key = (base["ns"], one)
        if (cached := self._cached(self.opened, key, fingerprint, "opened_vectors")) is not None:
            return cached[1]  # type: ignore[no-any-return]
        [found] = yield Batch([Stmt(self.statements.sealed_vectors(one), base, fetch=True)])
        rows = yield from self._opened(found)
        self._remember(self.opened, key, (fingerprint, rows), most=256)  # namespaces
        return rows

    def _opened(self, found: Sequence[Sequence[Any]]) -> Plan[list[VectorRow]]:
        """Sealed vector rows, opened (their keys loaded first)."""
        assert self.sealer is not None
        rows = [SealedVectorRow._make(r) for r in found]
        yield from self.sealer.ids_plan(None if r.plain else bytes(r.vector) for r in rows)
        unseal = self.sealer.open_vector
        return [
            VectorRow(r.prefix, r.key, unseal(r.prefix, r.key, r.field, r.vector, bool(r.plain)))
            for r in rows
        ]

    def _approximate_pays(self, index: VectorIndex, base: dict[str, Any], want: int) -> Plan[bool]:
        """Whether the namespace is large enough for the approximate path (counts cached)."""
        key = (base["ns"], index.name)
        counts = self.vector_counts.get(key)
        if not self._fresh(counts, "vector_counts"):
            params = {**base, "cap": self.count_cap, "index": index.relation}
            counts_sql = self.statements.vector_counts(index, scoped(base))
            [rows] = yield Batch([Stmt(counts_sql, params, fetch=True)])
            vectors, total = int(rows[0][0]), float(rows[0][1] or 0.0)
            counts = (vectors, total, self._clock(), self.writes)
            self._remember(self.vector_counts, key, counts)
        assert counts is not None
        return self.takes_index(counts[0], counts[1], want)

    def _fresh(self, entry: Counted | None, cache: str) -> bool:
        """Whether a cached ``(count, value, when read, writes then)`` still serves: read
        under :attr:`stats_seconds` ago, with at most a tenth of ``count`` written since."""
        fresh = entry is not None and (
            self._clock() - entry[2] < self.stats_seconds
            and self.writes - entry[3] <= entry[0] // 10
        )
        metrics.cache_lookup(cache, fresh)
        return fresh

    def _remember(self, cache: OrderedDict[Any, E], key: Any, entry: E, most: int = 4096) -> None:
        with self.lock:
            cache[key] = entry
            cache.move_to_end(key)
            while len(cache) > most:
                cache.popitem(last=False)

    def takes_index(self, vectors: int, total: float, want: int) -> bool:
        """Whether ``want`` candidates of ``vectors`` (counted up to :attr:`count_cap`) in an
        index of about ``total`` come from it: exact search costs ``vectors`` comparisons, the
        index ``want * total / vectors`` entries of ``index_cost`` each."""
        if vectors <= self.exact_max:
            return False
        total = max(total, float(vectors))
        return vectors >= self.count_cap or vectors * vectors >= self.index_cost * want * total

    def lexical_plan(
        self,
        terms: list[str],
        how: How,
        forms: list[list[str]] | None = None,
        feedback: F.Feedback | None = None,
        read: Rows | None = None,
    ) -> Plan[list[tuple[str, str]]]:
        """BM25's best items for ``terms`` (``how``: see :data:`How`); with ``feedback``,
        expanded from its first matches and ranked again. ``forms``: per term, its keyed hash
        under each searched shard's key (encryption on): its df sums over them and each
        weighs as the term itself. ``read`` gets the rows of the items read."""
        groups = _groups(terms, forms)
        scored, lists = yield from self._bm25_plan(groups, [1.0] * len(groups), how, None, read)
        if feedback is not None and scored:
            more = yield from self._expansion_plan(scored, groups, how, feedback)
            if more is not None:
                expanded, boosts, lists = more
                scored, _ = yield from self._bm25_plan(expanded, boosts, how, lists, read)
        return [item for item, _ in scored]

    def _bm25_plan(
        self,
        groups: list[list[Form]],
        boosts: list[float],
        how: How,
        lists: Lists | None = None,
        read: Rows | None = None,
    ) -> Plan[tuple[list[tuple[tuple[str, str], float]], Lists]]:
        """``((prefix, key), score)`` of BM25's best items for ``groups`` (a term's forms),
        weighed idf times ``boosts``, and the lists read (``lists``: read already); ``read``
        gets the rows of the items read."""
        filters, base, want, exact, _ = how
        read_now = lists is None
        if lists is None:
            flat = [f for group in groups for f in group]
            lists = yield from lists_plan(self.statements, base, exact, flat)
        docs, avgdl = yield from self._stats_plan(base, exact)
        if read_now:
            yield from self._merges_plan(lists, docs)
        df = document_frequencies(lists, [f for group in groups for f in group])
        group_df = [sum(df[f] for f in group) for group in groups]
        if not any(group_df):
            return [], lists
        weight = [S.idf(docs, n) * (S.K1 + 1) * b for n, b in zip(group_df, boosts, strict=True)]
        k_base, k_len = S.K1 * (1 - S.B), S.K1 * S.B / (avgdl or 1.0)
        nums, scores = bm25(lists, groups, weight, k_base, k_len)
        ranked = (filters, base, want, exact)
        scored = yield from best_plan(self.statements, nums, scores, ranked, read)
        return scored, lists

    def _merges_plan(self, lists: Lists, docs: int) -> Plan[None]:
        """Merge the namespaces where the read found :data:`.index.MERGE_AT` items to list or
        retract, or :data:`.index.MERGE_SOON` that are an eighth of the ``docs`` searched."""
        for prefix, count in lists.pending.items():
            due = count >= MERGE_AT or (count >= MERGE_SOON and 8 * count >= docs)
            if due and self.declined.get(prefix, 0.0) <= self._clock():
                yield from self.merge_plan(prefix)

    def merge_plan(self, prefix: str) -> Plan[None]:
        """Merge one namespace until nothing is left to list (``store.index``). Where the
        database refuses (a read-only replica or file, a locked SQLite file), a warning is
        logged and the namespace's searches read its items unlisted for a minute."""
        shard = self.statements.shard(prefix)
        with self.lock:
            self.unmerged.pop(prefix, None)
        try:
            yield from merged_plan(self.statements, [(shard, prefix)])
        except Exception as exc:
            logger.warning("the store's term lists of %r wait for a minute: %r", prefix, exc)
            self.declined[prefix] = self._clock() + 60.0

    def written_plan(self, prefixes: Iterable[str]) -> Plan[None]:
        """Count the items this process wrote per namespace, and merge a namespace it wrote
        :data:`.index.MERGE_WRITES` items to since it last merged it."""
        due = []
        with self.lock:
            for prefix in prefixes:
                self.writes += 1
                self.unmerged[prefix] += 1
                if self.unmerged[prefix] == MERGE_WRITES:
                    due.append(prefix)
        for prefix in due:
            yield from self.merge_plan(prefix)

    def _stats_plan(self, base: dict[str, Any], exact: bool) -> Plan[tuple[int, float]]:
        """The searched items' count and average length, cached (:meth:`_fresh`)."""
        key = (base["ns"], exact)
        stats = self.stats.get(key)
        if not self._fresh(stats, "text_statistics"):
            sql = self.statements.text_stats(exact, scoped(base))
            [rows] = yield Batch([Stmt(sql, base, fetch=True)])
            found = TextStats._make(rows[0])
            docs, total = int(found.docs), float(found.total_len or 0)
            stats = (docs, total / docs if docs else 1.0, self._clock(), self.writes)
            self._remember(self.stats, key, stats)
        assert stats is not None
        return stats[0], stats[1]

    def _expansion_plan(
        self,
        scored: list[tuple[tuple[str, str], float]],
        groups: list[list[Form]],
        how: How,
        feedback: F.Feedback,
    ) -> Plan[tuple[list[list[Form]], list[float], Lists] | None]:
        """``groups`` and boosts widened by :func:`.feedback.expansion`, and the lists of
        them all (read in one statement)."""
        _, base, _, exact, _ = how
        top = scored[: feedback.docs]
        params = self.statements.key_params(item for item, _ in top)
        [rows] = yield Batch([Stmt(self.statements.item_terms(len(top)), params, fetch=True)])
        item_of: dict[int, tuple[str, str]] = {}
        his: set[int] = set()
        for prefix, key, num, terms in rows:
            if terms is not None:
                item_of[int(num)] = (prefix, key)
                his.update(high_parts(bytes(terms)).tolist())
        asked = [(hi, None) for group in groups for hi, _ in group]
        candidates: list[Form] = sorted({(h, None) for h in his} - set(asked))
        flat = [f for group in groups for f in group]
        lists = yield from lists_plan(self.statements, base, exact, flat + candidates)
        docs, _ = yield from self._stats_plan(base, exact)
        # the candidates' frequencies in the first matches, from the lists: exact, and the
        # lists are read anyway for the candidates' document frequencies
        df: dict[Form, int] = {}
        postings = []
        tops = np.fromiter(item_of, dtype=np.int64, count=len(item_of))
        for term in candidates:
            nums, tfs, dls = lists.entries(term)
            df[term] = len(nums)
            at = np.isin(nums, tops)
            postings += [
                F.Posting(*item_of[n], term, tf, dl)
                for n, tf, dl in zip(*(a[at].tolist() for a in (nums, tfs, dls)), strict=True)
            ]

        def idf(term: Form) -> float:
            return F.discriminates(docs, df.get(term, 0))

        if not (added := F.expansion(postings, dict(top), idf, asked, feedback)):
            return None
        boosts = [1.0] * len(groups) + list(added.values())
        return groups + [[t] for t in added], boosts, lists

    def rank_keys_plan(
        self,
        namespace: Sequence[str],
        query: str,
        query_vector: list[float] | None,
        want: int,
        now: float,
    ) -> Plan[list[tuple[str, float]]]:
        """Keys of one namespace's best matches for ``query`` with their fused scores, for
        recall (which reads the items itself); its vectors cached while it does not change."""
        ns = ".".join(namespace)
        shard = self.statements.shard(ns)
        base = {"ns": ns, "shard": shard, "now": now}
        terms = S.terms(query)
        forms = None
        if self.sealer is not None and terms:
            forms = yield from self.sealer.term_forms_plan(self.statements, terms, [shard])
        fused, _ = yield from self.fused_plan(
            terms, None, (), base, want, exact=True, forms=forms, feedback=self.recall_feedback
        )
        if query_vector is not None and self.dims is not None:  # the store embeds
            keys, matrix = yield from self.matrix_plan(ns, now)
            q = np.asarray(query_vector, dtype=np.float32)
            sims = (matrix @ (q / (np.linalg.norm(q) or 1.0))).tolist() if keys else []
            closest = [(ns, k) for k in _best(keys, sims, want)]
            fused = self.ranking.fuse([k for k, _ in fused], closest)
        return [(key, score) for (_, key), score in fused]

    def _cached(self, cache: OrderedDict[Any, Any], key: Any, fingerprint: Any, name: str) -> Any:
        """``cache``'s entry for ``key`` while its fingerprint is ``fingerprint``, else ``None``."""
        with self.lock:
            cached = cache.get(key)
            hit = cached is not None and cached[0] == fingerprint
            metrics.cache_lookup(name, hit)
            if hit:
                cache.move_to_end(key)
                return cached
        return None

    def matrix_plan(self, ns: str, now: float) -> Plan[tuple[list[str], Any]]:
        """One namespace's vectors as a row-normalized matrix, cached by its fingerprint."""
        one = {"shard": self.statements.shard(ns), "prefix": ns, "now": now}
        [rows] = yield Batch([Stmt(self.statements.fingerprint(), one, fetch=True)])
        found = Fingerprint._make(rows[0])
        fingerprint = (int(found.items), float(found.latest or 0.0))
        if (cached := self._cached(self.matrices, ns, fingerprint, "matrices")) is not None:
            return cached[1], cached[2]
        st = self.statements
        sql = st.vectors_exact() if self.sealer is None else st.sealed_vectors_exact()
        [rows] = yield Batch([Stmt(sql, one, fetch=True)])
        if self.sealer is None:
            found_rows = list(map(KeyVectorRow._make, rows))
        else:
            opened = yield from self._opened(rows)
            found_rows = [KeyVectorRow(r.key, r.vector) for r in opened]
        # stores of other dimensions may share the namespace
        vectors = [v for v in found_rows if self.dims is None or len(v.vector) == 4 * self.dims]
        keys = [v.key for v in vectors]
        if vectors:
            matrix = as_matrix(v.vector for v in vectors)
            norms = np.linalg.norm(matrix, axis=1, keepdims=True)
            matrix = matrix / np.where(norms == 0, 1.0, norms)
        else:
            matrix = np.zeros((0, 1), dtype=np.float32)
        with self.lock:
            self.matrices[ns] = (fingerprint, keys, matrix)
            total = sum(m[2].nbytes for m in self.matrices.values())
            while total > self.matrix_cache_bytes and len(self.matrices) > 1:
                _, (_, _, dropped) = self.matrices.popitem(last=False)
                total -= dropped.nbytes
        return keys, matrix


def _groups(terms: list[str], forms: list[list[str]] | None) -> list[list[Form]]:
    """Per query term, its forms in the index: itself, or its keyed hashes (encryption)."""
    return [[form_of(f) for f in group] for group in (forms or [[t] for t in terms])]


def as_matrix(vectors: Iterable[bytes]) -> Any:
    """Float32 little-endian vectors of one length as the rows of a matrix."""
    blobs = [bytes(v) for v in vectors]
    return np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(blobs), -1)


def nearest(rows: Sequence[Sequence[Any]], query: list[float], want: int) -> list[tuple[str, str]]:
    """Exact cosine similarity over every candidate vector; an item's best field wins."""
    size = 4 * len(query)  # float32: other stores' vectors of other lengths are skipped
    vectors = [v for v in map(VectorRow._make, rows) if len(v.vector) == size]
    if not vectors:
        return []
    matrix = as_matrix(v.vector for v in vectors)
    q = np.asarray(query, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1) * (np.linalg.norm(q) or 1.0)
    sims = (matrix @ q) / np.where(norms == 0, 1.0, norms)
    return _best([(row.prefix, row.key) for row in vectors], sims.tolist(), want)


def _best(keys: Sequence[K], sims: Sequence[float], want: int) -> list[K]:
    """The ``want`` most similar of ``keys``, each once at its best similarity."""
    best: dict[K, float] = {}
    for key, sim in zip(keys, sims, strict=True):
        if sim > best.get(key, -2.0):
            best[key] = sim
    return sorted(best, key=lambda k: -best[k])[:want]


def best_items(rows: Sequence[ScoredRow], want: int) -> list[tuple[str, str]]:
    """The ``want`` best distinct items of approximate rows (one per embedded field)."""

    def order(row: ScoredRow) -> float:  # NaN, None last
        return 2.0 if row.score is None or row.score != row.score else -float(row.score)

    return list(dict.fromkeys((row.prefix, row.key) for row in sorted(rows, key=order)))[:want]
