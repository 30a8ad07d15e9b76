"""Vector search paths on real servers: pgvector's HNSW index where the server has pgvector
(``pg18vector``), exact search in SQL for small namespaces there, and the exact numpy path
where it has not (``pg15``, SQLite, memory). Filtered and namespaced searches return as many
results as there are matches, and the index agrees with exact ranking where it searches
exhaustively."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import psycopg
import pytest
from langchain_core.embeddings import Embeddings
from langgraph.store.base import PutOp

from langgraph_checkpoint_agent_memory import ConfigurationError, create_store
from langgraph_checkpoint_agent_memory.db.store import prefix_params, vector_text
from tests.helpers import Recorder
from tests.pg import SERVERS, PgServers, pg_params

PGVECTOR = [sid for sid, b in SERVERS.items() if b is not None and b.pgvector]
NO_PGVECTOR = "no PostgreSQL server with pgvector among this session's servers"
pgvector_only = pytest.mark.parametrize(
    "sid",
    [pytest.param(sid, marks=pytest.mark.postgres) for sid in PGVECTOR]
    or [pytest.param("pgvector", marks=pytest.mark.skip(reason=NO_PGVECTOR))],
)


class Seeded(Embeddings):
    """Clustered random vectors, a fixed one per text: ``v<i>`` is document ``i``, any
    other text is hashed to a query. No ties, so exact rankings are unique."""

    def __init__(self, dims: int = 16, n: int = 4000, seed: int = 3) -> None:
        rng = np.random.default_rng(seed)
        centers = rng.normal(size=(20, dims))
        picks = rng.integers(0, 20, n)
        self.dims = dims
        self.rows = (centers[picks] + 0.5 * rng.normal(size=(n, dims))).astype(np.float32)
        self.seed = seed

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.rows[int(t[1:])].tolist() for t in texts]

    def embed_query(self, text: str) -> list[float]:
        vector: list[float]
        if text.startswith("v") and text[1:].isdigit():
            vector = self.rows[int(text[1:])].tolist()
        else:
            rng = np.random.default_rng([self.seed, *text.encode()])
            vector = rng.normal(size=self.dims).astype(np.float32).tolist()
        return vector


def put_many(store: Any, ns: tuple[str, ...], ids: range, **extra: Any) -> None:
    for start in range(ids.start, ids.stop, 500):
        store.batch(
            [
                PutOp(ns, f"k{i}", {"id": f"v{i}", "tag": i % 50, **extra})
                for i in range(start, min(ids.stop, start + 500))
            ]
        )


def index_config(embed: Seeded, **ann: Any) -> dict[str, Any]:
    return {"dims": embed.dims, "embed": embed, "fields": ["id"], "ann_index_config": ann}


def keys(found: list[Any]) -> list[str]:
    return [item.key for item in found]


@pytest.fixture
def stores() -> Iterator[Callable[..., Any]]:
    opened: list[Any] = []

    def make(url: str | None, **kwargs: Any) -> Any:
        store = create_store(url, weights=(0.0, 1.0), **kwargs)
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


def fresh(pg_servers: PgServers, sid: str) -> str:
    return pg_servers.fresh_database(sid)


# -- pgvector: the index is built and used -------------------------------------------------


@pgvector_only
def test_a_large_namespace_is_searched_through_the_hnsw_index(
    sid: str, pg_servers: PgServers, stores: Callable[..., Any]
) -> None:
    url = fresh(pg_servers, sid)
    embed = Seeded()
    store = stores(url, index=index_config(embed))
    put_many(store, ("big",), range(3000))
    put_many(store, ("users", "u1"), range(3000, 3100))
    assert store.vector_index == "am_store_vectors_vector_16"
    # with the default switch: 3,000 vectors, nearly all of the index, take it; 100 do not
    recorder = Recorder(store)
    assert len(store.search(("big",), query="v7", limit=10)) == 10
    assert recorder.took("hnsw.iterative_scan")
    recorder.texts.clear()
    assert len(store.search(("users", "u1"), query="v7", limit=10)) == 10
    assert not recorder.took("hnsw.iterative_scan") and recorder.took("<=>")

    # and PostgreSQL plans the approximate statement through the index, the exact one
    # through the namespace index
    index = store.ranker.vector_index
    params = {
        **prefix_params(("big",)),
        "now": 1e12,
        "n": 50,
        "query_vector": vector_text(embed.embed_query("q")),
    }
    *settings, query = store.statements.ann_search(index, "", scoped=False)
    exact = store.statements.vector_search((), 16, joined=False, scoped=False)
    with psycopg.connect(url) as conn:
        for sql in settings:
            conn.execute(sql.text)
        plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + query.text, params))
        assert "Index Scan using am_store_vectors_vector_16" in plan
        conn.rollback()
        plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + exact.text, params))
        assert "am_store_vectors_vector_16" not in plan


@pgvector_only
def test_filtered_and_namespaced_searches_return_every_match_up_to_the_limit(
    sid: str, pg_servers: PgServers, stores: Callable[..., Any]
) -> None:
    """The index is read on (iterative scan) until enough rows pass the namespace and the
    filter; a filter that keeps fewer items than asked for is answered exactly."""
    url = fresh(pg_servers, sid)
    embed = Seeded()
    store = stores(url, index=index_config(embed))
    exact = stores(url, index=index_config(embed, kind="flat"))
    put_many(store, ("big",), range(3000))
    put_many(store, ("big", "sub"), range(3000, 3300))
    store.ranker.exact_max, store.ranker.index_cost = 0, 0.0  # the index, always
    recorder = Recorder(store)
    for flt, expected in (({"tag": 7}, 10), ({"tag": {"$in": [1, 2]}}, 25), (None, 25)):
        found = store.search(("big",), query="v11", filter=flt, limit=expected)
        assert len(found) == expected
        assert all(flt is None or item.value["tag"] in (7, 1, 2) for item in found)
    assert recorder.took("hnsw.iterative_scan") and store.ranker.ann_fallbacks == 0
    # a sub-namespace of a tenth of the index
    sub = store.search(("big", "sub"), query="v11", limit=20)
    assert len(sub) == 20 and {item.namespace for item in sub} == {("big", "sub")}
    # six items match: fewer than the candidates asked for, so the exact path answers
    only = {"tag": 7, "id": {"$in": [f"v{i}" for i in range(7, 307, 50)]}}
    found = store.search(("big",), query="v11", filter=only, limit=10)
    assert sorted(keys(found)) == sorted(f"k{i}" for i in range(7, 307, 50))
    assert store.ranker.ann_fallbacks == 1
    assert keys(found) == keys(exact.search(("big",), query="v11", filter=only, limit=10))


@pgvector_only
def test_the_index_agrees_with_exact_ranking_where_it_searches_exhaustively(
    sid: str, pg_servers: PgServers, stores: Callable[..., Any]
) -> None:
    url = fresh(pg_servers, sid)
    embed = Seeded()
    # ef_search above the item count: the graph search visits every vector
    store = stores(url, index=index_config(embed, ef_search=1000))
    exact = stores(url, index=index_config(embed, kind="flat"))
    put_many(store, ("ns",), range(400))
    store.ranker.exact_max, store.ranker.index_cost = 0, 0.0
    for q in ("v3", "v250", "alpha", "beta", "gamma"):
        assert keys(store.search(("ns",), query=q, limit=10)) == keys(
            exact.search(("ns",), query=q, limit=10)
        )
    assert exact.vector_index is None and store.ranker.ann_fallbacks == 0


@pgvector_only
def test_more_than_2000_dimensions_are_indexed_as_halfvec(
    sid: str, pg_servers: PgServers, stores: Callable[..., Any]
) -> None:
    url = fresh(pg_servers, sid)
    embed = Seeded(dims=2048, n=300)
    store = stores(url, index=index_config(embed))
    put_many(store, ("wide",), range(300))
    assert store.vector_index == "am_store_vectors_halfvec_2048"
    store.ranker.exact_max, store.ranker.index_cost = 0, 0.0
    recorder = Recorder(store)
    found = store.search(("wide",), query="v5", limit=5)
    assert keys(found)[0] == "k5" and recorder.took("halfvec(2048)")


@pgvector_only
def test_stores_of_different_dimensions_share_the_table_with_an_index_each(
    sid: str, pg_servers: PgServers, stores: Callable[..., Any]
) -> None:
    url = fresh(pg_servers, sid)
    small, large = Seeded(dims=16), Seeded(dims=32, seed=4)
    a = stores(url, index=index_config(small))
    b = stores(url, index=index_config(large))
    put_many(a, ("shared",), range(0, 200))
    put_many(b, ("shared",), range(200, 400))
    assert (a.vector_index, b.vector_index) == (
        "am_store_vectors_vector_16",
        "am_store_vectors_vector_32",
    )
    for store, mine in ((a, range(0, 200)), (b, range(200, 400))):
        for force in (False, True):
            if force:
                store.ranker.exact_max, store.ranker.index_cost = 0, 0.0
            found = store.search(("shared",), query="v250" if mine.start else "v5", limit=50)
            assert {int(k[1:]) for k in keys(found)} <= set(mine)


@pgvector_only
def test_pgvector_installed_later_converts_the_vectors_stored_before(
    sid: str, pg_servers: PgServers, stores: Callable[..., Any]
) -> None:
    """A role that may not create the extension keeps the exact path; once an administrator
    creates it, the next setup adds the column, converts the vectors and builds the index."""
    admin = pg_servers.get(sid).url
    name = f"later_{sid}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute("DROP ROLE IF EXISTS app_later")
        conn.execute("CREATE ROLE app_later LOGIN")
        conn.execute(f"CREATE DATABASE {name} OWNER app_later")
    base = admin.rsplit("/", 1)[0].split("@", 1)[1]
    url = f"postgresql://app_later@{base}/{name}"
    embed = Seeded()
    before = stores(url, index=index_config(embed))
    put_many(before, ("ns",), range(300))
    assert before.vector_index is None and not before.dialect.native_vectors
    expected = keys(before.search(("ns",), query="v42", limit=10))  # the numpy path

    with psycopg.connect(admin.rsplit("/", 1)[0] + f"/{name}", autocommit=True) as conn:
        conn.execute("CREATE EXTENSION vector")
    after = stores(url, index=index_config(embed))
    after.setup()
    assert after.vector_index == "am_store_vectors_vector_16"
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT COUNT(*), COUNT(embedding) FROM am_store_vectors").fetchone()
    assert row == (300, 300)
    after.ranker.exact_max, after.ranker.index_cost = 0, 0.0
    assert keys(after.search(("ns",), query="v42", limit=10)) == expected


@pgvector_only
def test_a_store_without_setup_finds_the_index_on_first_use(
    sid: str, pg_servers: PgServers, stores: Callable[..., Any]
) -> None:
    url = fresh(pg_servers, sid)
    embed = Seeded()
    stores(url, index=index_config(embed)).setup()
    late = stores(url, index=index_config(embed), auto_setup=False)
    assert late.vector_index is None  # not found out yet
    late.put(("ns",), "k1", {"id": "v1"})
    assert late.vector_index == "am_store_vectors_vector_16" and late.dialect.native_vectors
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT embedding IS NOT NULL FROM am_store_vectors").fetchone() == (
            True,
        )


# -- every server: which path runs ---------------------------------------------------------


@pytest.mark.parametrize("sid", pg_params())
def test_without_pgvector_search_stays_exact_in_numpy(
    sid: str, pg_servers: PgServers, stores: Callable[..., Any]
) -> None:
    server = pg_servers.get(sid)
    url = server.fresh_database()
    embed = Seeded()
    store = stores(url, index=index_config(embed))
    put_many(store, ("ns",), range(300))
    recorder = Recorder(store)
    found = store.search(("ns",), query="v9", limit=5)
    assert keys(found)[0] == "k9"
    if server.binaries is not None:  # a server this session started: we know what it has
        assert store.dialect.native_vectors == server.binaries.pgvector
    if not store.dialect.native_vectors:  # pg15
        assert store.vector_index is None
        assert recorder.took("SELECT v.prefix, v.key, v.vector \nFROM am_store_vectors")
        with psycopg.connect(url) as conn:
            columns = {
                r[0]
                for r in conn.execute(
                    "SELECT column_name FROM information_schema.columns "
                    "WHERE table_name = 'am_store_vectors'"
                )
            }
        assert "embedding" not in columns
    else:  # a small namespace on pgvector: exact, in SQL
        assert store.dialect.native_vectors
        assert recorder.took("<=>") and not recorder.took("hnsw.iterative_scan")


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_stores_of_other_dimensions_in_the_namespace_are_skipped_by_numpy(
    backend: str, tmp_path: Any, stores: Callable[..., Any]
) -> None:
    url = None if backend == "memory" else f"sqlite:///{tmp_path / 's.db'}"
    small = stores(url, index=index_config(Seeded(dims=16)))
    db_store = small if url is None else stores(url, index=index_config(Seeded(dims=32)))
    put_many(small, ("shared",), range(0, 50))
    if url is not None:
        put_many(db_store, ("shared",), range(50, 100))
        found = db_store.search(("shared",), query="v60", limit=10)
        assert keys(found)[0] == "k60" and all(int(k[1:]) >= 50 for k in keys(found))
    assert keys(small.search(("shared",), query="v7", limit=3))[0] == "k7"


def test_index_settings_are_checked(stores: Callable[..., Any]) -> None:
    embed = Seeded()
    for ann, message in (
        ({"kind": "ivfflat"}, "kind must be one of hnsw, flat"),
        ({"m": 1}, "m must be an integer from 4 to 100"),
        ({"ef_search": "many"}, "ef_search must be an integer"),
        ({"m": 32, "ef_construction": 40}, "at least twice m"),
        ({"lists": 100}, "unknown ann_index_config keys: lists"),
        ({"vector_type": "bit"}, "vector_type must be one of vector, halfvec"),
    ):
        with pytest.raises(ConfigurationError, match=message):
            stores(None, index=index_config(embed, **ann))
    with pytest.raises(ConfigurationError, match="at most 2,000 dimensions"):
        stores(None, index=index_config(Seeded(dims=3000, n=1), vector_type="vector"))
    with pytest.raises(ConfigurationError, match="cosine similarity only"):
        stores(None, index={**index_config(embed), "distance_type": "l2"})
    with pytest.raises(ConfigurationError, match="IndexConfig mapping or 'default', not 'defualt'"):
        stores(None, index="defualt")  # a misspelt "default"
    with pytest.raises(ConfigurationError, match="needs 'dims' and 'embed'"):
        stores(None, index={"dims": 8})
    ok = stores(None, index=index_config(embed, m=24, ef_construction=100, ef_search=64))
    assert (ok.ann_config.m, ok.ann_config.ef_search) == (24, 64)
    assert ok.vector_index is None  # memory: exact only
