"""What PostgreSQL's SQL looks like: the dialect. Its one-statement checkpoint reads and
writes are built in :mod:`.pg_checkpoint`; connections, pools and sessions live in
:mod:`.postgres_connection`.
"""

from __future__ import annotations

import functools
import json
import logging
import re
from collections.abc import Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as sa_pg
from sqlalchemy.engine.interfaces import Dialect as SADialect

from langgraph_checkpoint_agent_memory.db.database import Batch, Stmt
from langgraph_checkpoint_agent_memory.db.dialect import (
    HNSW_MAX_DIMS,
    JSON_OPS,
    AnnConfig,
    Dialect,
    FastWrite,
    Sql,
    VectorIndex,
    same_item,
)
from langgraph_checkpoint_agent_memory.db.pg_checkpoint import (
    GROUPS,
    MAX_VALUES_ROWS,
    cell_names,
    fast_write_statement,
    get_tuple_statement,
    routed_insert,
    routed_live,
    routed_touch,
)
from langgraph_checkpoint_agent_memory.db.schema import (
    checkpoints,
    items_i,
    metadata,
    vectors_v,
    written,
)

if TYPE_CHECKING:
    from langgraph_checkpoint_agent_memory.db.database import Plan

logger = logging.getLogger(__name__)

MIGRATION_LOCK_KEY = 0x616D5F6D6967  # "am_mig"
#: The first key of the two-key advisory locks of shard keys (:meth:`PostgresDialect.scope_lock`):
#: a key space of the package's own, apart from the one-key locks (migrations).
SCOPE_LOCK_CLASS = 0x616D5F73  # "am_s"

#: Where pgvector is installed, or can be: the extension created, and the ``embedding``
#: column (an untyped ``vector``, so stores of any dimension share the table; each dimension
#: count gets its own partial HNSW index) added, kept inline in the row (``MAIN``) rather
#: than in TOAST, so exact search does not fetch each vector from a second table. A role
#: that may not create the extension leaves the store on exact search. The partial index
#: finds the vectors written before the column existed, for their conversion.
# raw: a PL/pgSQL block (CREATE EXTENSION, ALTER TABLE), no Core form
PGVECTOR_SETUP = (
    "DO $$ BEGIN "
    "IF to_regtype('vector') IS NULL AND EXISTS "
    "(SELECT 1 FROM pg_available_extensions WHERE name = 'vector') THEN "
    "BEGIN CREATE EXTENSION IF NOT EXISTS vector; "
    "EXCEPTION WHEN insufficient_privilege THEN RAISE NOTICE "
    "'pgvector is available but this role may not create it: vector search stays exact'; "
    "END; END IF; "
    "IF to_regtype('vector') IS NOT NULL AND NOT EXISTS (SELECT 1 FROM pg_attribute "
    "WHERE attrelid = 'am_store_vectors'::regclass AND attname = 'embedding' "
    "AND NOT attisdropped) THEN "
    "EXECUTE 'ALTER TABLE am_store_vectors ADD COLUMN embedding vector'; "
    "EXECUTE 'ALTER TABLE am_store_vectors ALTER COLUMN embedding SET STORAGE MAIN'; "
    "EXECUTE 'CREATE INDEX am_store_vectors_unconverted ON am_store_vectors (prefix) "
    "WHERE embedding IS NULL'; "
    "END IF; END $$"
)
#: What the database offers: the ``vector`` type, the ``embedding`` column, the extension.
# raw: PostgreSQL catalog lookups
PGVECTOR_STATE = (
    "SELECT to_regtype('vector') IS NOT NULL, EXISTS (SELECT 1 FROM pg_attribute "
    "WHERE attrelid = to_regclass('am_store_vectors') AND attname = 'embedding' "
    "AND NOT attisdropped), EXISTS (SELECT 1 FROM pg_available_extensions "
    "WHERE name = 'vector')"
)
#: A namespace index in byte order, which the prefix range of :meth:`vector_under` can
#: walk (the primary key's collation is the database's, which that range cannot use).
# raw: an expression index with a collation, declared apart from schema.py's tables
VECTOR_NAMESPACE_INDEX = 'CREATE INDEX am_store_vectors_ns ON am_store_vectors (prefix COLLATE "C")'


class PgVector(sa.types.UserDefinedType[Any]):
    """pgvector's types (``vector``, ``halfvec(n)``), for casts: raw, SQLAlchemy has none."""

    cache_ok = True

    def __init__(self, spec: str) -> None:
        self.spec = spec

    def get_col_spec(self, **kw: Any) -> str:
        return self.spec


_ONE: Any = sa.literal_column("1")
_ZERO: Any = sa.literal_column("0")
#: PostgreSQL's catalog of relations, for the planner's row estimates.
_PG_CLASS = sa.table("pg_class", sa.column("oid"), sa.column("reltuples"))


def _embedding() -> Any:
    """Raw: the vectors' pgvector column, which :mod:`.schema` does not declare (it exists
    only where the extension does), named through the vectors' alias."""
    return sa.literal_column(f"{vectors_v.name}.embedding")


def _query_vector(spec: str) -> Any:
    """``:query_vector`` (text form) as a pgvector value of type ``spec``."""
    return sa.cast(sa.bindparam("query_vector"), PgVector(spec))


def _dims_are(dims: int) -> Any:
    """The vector has ``dims`` dimensions: a literal, as in the partial HNSW index's
    predicate, so the planner can use the index."""
    return sa.func.vector_dims(_embedding()) == sa.literal_column(str(int(dims)))


class PostgresDialect(Dialect):
    """PostgreSQL's SQL; with ``schema``, every statement names the package's tables in that
    schema (:meth:`qualify`), so apps or tenants can share one database through a pooler
    (qualified names: no ``search_path``, which is session state)."""

    name = "postgresql"
    pipelines = True

    def __init__(self, schema: str | None = None) -> None:
        super().__init__()
        self.schema = schema
        self._qualified: dict[str, str] = {}
        self._tables = re.compile(
            r'(?<![\w".])(' + "|".join(sorted(metadata.tables, key=len, reverse=True)) + r")\b"
        )

    def qualified(self, table: str) -> str:
        """``table`` as statements name it: ``"schema".table``, or bare without a schema."""
        return table if self.schema is None else f'"{self.schema}".{table}'

    def qualify(self, text: str) -> str:
        """``text`` with every table of the package named in :attr:`schema` (unchanged
        without one). Statements are written with bare table names, in Core and in text
        alike; this is the one place that places them, applied to each statement as it is
        sent, and remembered per text. A table name is a whole word of the statement (an
        index or constraint named after its table, ``am_threads_pkey``, is another word),
        inside string literals too: ``to_regclass('am_threads')`` must find the same table.
        """
        if self.schema is None:
            return text
        done = self._qualified.get(text)
        if done is None:
            done = self._tables.sub(lambda m: self.qualified(m.group(1)), text)
            self._qualified[text] = done
        return done

    def schema_ddl(self) -> list[str]:
        """Create the schema unless it exists (a role may lack the privilege to create one
        that exists already, which ``IF NOT EXISTS`` would still check)."""
        if self.schema is None:
            return []
        return [
            # raw: a PL/pgSQL block (conditional CREATE SCHEMA), no Core form
            f"DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = "
            f"'{self.schema}') THEN EXECUTE 'CREATE SCHEMA \"{self.schema}\"'; END IF; END $$"
        ]

    def _make_sa_dialect(self) -> SADialect:
        # SQLAlchemy leaves this dialect's __init__ unannotated
        return sa_pg.psycopg.dialect()  # type: ignore[no-untyped-call]

    def insert(self, table: sa.Table) -> Any:
        return sa_pg.insert(table)

    def cast_param(self, param: sa.BindParameter[Any], type_: Any) -> Any:
        # Cast to the unbounded type: a CAST to VARCHAR(n) would truncate silently, while the
        # column's own limit raises a clear error.
        if isinstance(type_, sa.String) and not getattr(type_, "_variant_mapping", None):
            type_ = sa.Text()
        return sa.cast(param, type_)

    def metadata_prefilter(self, column: Any, key: str, value: Any) -> Any:
        return sa.cast(column, sa_pg.JSONB).op("@>")(sa.cast(value, sa_pg.JSONB))

    def prefilter_value(self, key: str, value: Any) -> Any:
        return json.dumps({key: value})

    def migration_lock(self) -> str | None:
        # raw: advisory lock
        return f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK_KEY})"

    def scope_lock(self) -> sa.sql.ClauseElement | None:
        # pg_advisory_xact_lock(int, int): released at commit or rollback, so a
        # transaction pooler may hand the server connection on; taken on the coordinator
        # under Citus, before any row lock on a worker
        key = sa.func.hashtext(sa.bindparam("lock_key", type_=sa.Text))
        return sa.select(
            sa.func.pg_advisory_xact_lock(sa.literal_column(str(SCOPE_LOCK_CLASS)), key)
        )

    def param(self, name: str) -> str:
        return f"%({name})s"

    def unless_exists(self, table: str, create: str) -> str:
        # a block, as PostgreSQL has no conditional DDL that skips the privilege check
        return (
            # raw: a PL/pgSQL block (conditional DDL), no Core form
            f"DO $$ BEGIN IF to_regclass('{table}') IS NULL THEN "
            f"EXECUTE '{create.replace(chr(39), chr(39) * 2)}'; END IF; END $$"
        )

    # -- vectors: pgvector where the database has it ----------------------------------------

    def vector_index_ddl(self) -> list[str]:
        return [VECTOR_NAMESPACE_INDEX, PGVECTOR_SETUP]

    def vectors_plan(self, *, create: bool = True) -> Plan[None]:
        state = Stmt(self.sql("pgvector_state", lambda: PGVECTOR_STATE), fetch=True)
        [rows] = yield Batch([state])
        has_type, has_column, available = rows[0]
        if create and not has_column and (has_type or available):
            # installed (or installable) since the migration ran: add the column now
            # raw: advisory lock
            lock = Stmt(Sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK_KEY})"), fetch=True)
            yield Batch(
                [lock, Stmt(self.sql("pgvector_setup", lambda: PGVECTOR_SETUP))], write=True
            )
            [rows] = yield Batch([state])
            has_column = rows[0][1]
            if not has_column:
                logger.info(
                    "pgvector is available on this server but could not be created "
                    "(CREATE EXTENSION vector needs a superuser): vector search stays exact"
                )
        self.native_vectors = bool(has_column)

    def to_vector(self, text: Any) -> Any:
        return sa.cast(text, PgVector("vector"))

    def vector_under_clause(self, column: Any) -> Any:
        # the byte-order range first, which am_store_vectors_ns walks; then the exact test
        # (a namespace "a-b" sorts between "a" and "a.", inside the range, not under "a")
        c = column.collate("C")
        return sa.and_(
            c >= sa.bindparam("ns"),
            c < sa.bindparam("ns_end"),
            sa.or_(column == sa.bindparam("ns"), c >= sa.bindparam("ns_dot")),
        )

    def vector_search(
        self, filters: Hashable, where: Sequence[Any], dims: int, *, joined: bool
    ) -> Sql | None:
        if not self.native_vectors:
            return None
        v, i = vectors_v, items_i

        def build() -> Any:
            # NULLIF: a zero vector's cosine is NaN, which would sort first
            sim = sa.func.nullif(
                _ONE - _embedding().op("<=>", return_type=sa.Float)(_query_vector("vector")),
                sa.literal_column("'NaN'"),
            ).label("sim")
            return (
                sa.select(v.c.prefix, v.c.key, sim)
                .select_from(v.join(i, same_item(i, v)) if joined else v)
                .where(_dims_are(dims), *where)
                .order_by(sa.nulls_last(sa.desc("sim")), v.c.prefix, v.c.key)
                .limit(sa.bindparam("n", type_=sa.Integer))
            )

        return self.sql(("vector_search", filters, dims, joined), build)

    def ann_index(self, dims: int, config: AnnConfig) -> VectorIndex | None:
        if not self.native_vectors or config.kind != "hnsw":
            return None
        kind = config.vector_type or ("vector" if dims <= HNSW_MAX_DIMS["vector"] else "halfvec")
        if dims > HNSW_MAX_DIMS[kind]:
            return None  # more dimensions than pgvector indexes: exact search
        return VectorIndex(
            name=f"am_store_vectors_{kind}_{int(dims)}",
            dims=int(dims),
            vector_type=kind,
            column=f"CAST(v.embedding AS {kind}({int(dims)}))",
            ef_search=config.ef_search,
            relation=self.qualified(f"am_store_vectors_{kind}_{int(dims)}"),
        )

    def ann_index_plan(self, index: VectorIndex, config: AnnConfig, *, create: bool) -> Plan[bool]:
        state = Stmt(
            self.sql(
                "ann_index_state",
                # raw: PostgreSQL catalog lookup
                lambda: "SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%(index)s)",
            ),
            {"index": index.relation},
            fetch=True,
        )
        if not create:
            [rows] = yield Batch([state])
            return bool(rows and rows[0][0])
        # raw: advisory lock
        lock = Stmt(Sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK_KEY})"), fetch=True)
        _, rows = yield Batch([lock, state], lock=True, hold=True)
        if rows:  # there already (built by another process, or by hand)
            yield Batch([], write=True)
            if not rows[0][0]:
                logger.warning(
                    "the vector index %s is not valid (a CREATE INDEX CONCURRENTLY that failed "
                    "or is still running): vector search stays exact until it is rebuilt",
                    index.name,
                )
            return bool(rows[0][0])
        kind = index.vector_type
        create_sql = self.sql(
            ("ann_index_create", index.name, config.m, config.ef_construction),
            lambda: (
                # raw: pgvector's HNSW index (operator class, WITH options), no Core form
                f"CREATE INDEX IF NOT EXISTS {index.name} ON am_store_vectors USING hnsw "
                f"((CAST(embedding AS {kind}({index.dims}))) {kind}_cosine_ops) "
                f"WITH (m = {int(config.m)}, ef_construction = {int(config.ef_construction)}) "
                f"WHERE vector_dims(embedding) = {index.dims}"
            ),
        )
        yield Batch([Stmt(create_sql)], write=True)
        return True

    def ann_search(self, index: VectorIndex, filters: Hashable, where: Sequence[Any]) -> list[Sql]:
        v, i = vectors_v, items_i

        def build() -> Any:
            # raw: the indexed expression and pgvector's operator have no Core form
            distance = sa.literal_column(index.column).op("<=>", return_type=sa.Float)(
                _query_vector(f"{index.vector_type}({index.dims})")
            )
            return (
                sa.select(v.c.prefix, v.c.key, (_ONE - distance).label("sim"))
                .select_from(v.join(i, same_item(i, v)))
                .where(_dims_are(index.dims), *where)
                .order_by(distance)
                .limit(sa.bindparam("n", type_=sa.Integer))
            )

        # Iterative index scans: a filter or a namespace that drops rows makes the scan
        # read on (in relaxed order; the store re-sorts by similarity) until :n rows pass,
        # or until hnsw.max_scan_tuples, when the store falls back to exact search.
        return [
            # raw: pgvector's settings, no Core form
            self.sql(
                ("ann_ef_search", index.ef_search),
                lambda: f"SET LOCAL hnsw.ef_search = {int(index.ef_search)}",
            ),
            self.sql("ann_iterative", lambda: "SET LOCAL hnsw.iterative_scan = relaxed_order"),
            # the index is the only plan that needs no sort: a generic plan (psycopg prepares
            # a statement run often) that cannot see the namespace's size would otherwise
            # sort the namespace instead
            self.sql("ann_no_sort", lambda: "SET LOCAL enable_sort = off"),
            self.sql(("ann_search", index.name, filters), build),
        ]

    def vector_counts(self, index: VectorIndex, under: Sequence[Any], scoped: bool) -> Sql:
        def build() -> Any:
            capped = (
                sa.select(_ONE)
                .select_from(vectors_v)
                .where(*under)
                .limit(sa.bindparam("cap", type_=sa.Integer))
                .subquery("s")
            )
            near = sa.select(sa.func.count()).select_from(capped).scalar_subquery()
            # the planner's row estimates, from the catalog (PostgreSQL's own tables)
            index_rows = (
                sa.select(sa.func.nullif(_PG_CLASS.c.reltuples, sa.literal_column("-1")))
                .where(_PG_CLASS.c.oid == sa.func.to_regclass(sa.bindparam("index")))
                .scalar_subquery()
            )
            # a literal, which qualify() places in the schema
            table: Any = sa.literal_column("'am_store_vectors'")
            table_rows = (
                sa.select(_PG_CLASS.c.reltuples)
                .where(_PG_CLASS.c.oid == sa.func.to_regclass(table))
                .scalar_subquery()
            )
            return sa.select(near, sa.func.coalesce(index_rows, table_rows, _ZERO))

        return self.sql(("vector_counts", index.name, scoped), build)

    def postings_upkeep_ddl(self) -> list[str]:
        """Autovacuum at 1% of the postings dead, not a fifth: a block's build marks up to
        all of a common term's postings, each an entry of the index of unpacked ones that
        queries step over until a vacuum (3 ms of a 100,000-item query)."""
        return [
            # raw: storage parameters have no Core form
            "ALTER TABLE am_store_terms SET (autovacuum_vacuum_scale_factor = 0.01, "
            "autovacuum_vacuum_threshold = 10000)",
        ]

    def list_size(self, n: int) -> int:
        return 1

    def one_of(self, column: Any, param: str, size: int) -> Any:
        # one array: the statement's text is the same for any number of values, so psycopg
        # converts it once (a text of hundreds of parameters it converts on every run)
        # text[], not the column's varchar(n)[]: a cast to varchar(n) cuts longer values
        values = sa.cast(sa.bindparam(param), sa_pg.ARRAY(sa.Text))
        return column == sa.any_(values)

    def list_params(self, param: str, values: Sequence[Any]) -> dict[str, Any]:
        return {param: list(values)}

    def insert_arrays(self, table: sa.Table) -> Sql:
        def build() -> Any:
            cols = [c.name for c in written(table)]
            arrays = [sa.cast(sa.bindparam(c), sa_pg.ARRAY(table.c[c].type)) for c in cols]
            rows = sa.func.unnest(*arrays).table_valued(*cols).render_derived(name="u")
            return sa.insert(table).from_select(cols, sa.select(*rows.c))

        return self.sql(("insert_arrays", table.name), build)

    def under_clause(self, column: Any) -> Any:
        # A byte-order range, so the planner estimates it from the column's statistics (a
        # substr() comparison is a blind guess that made it scan instead of walking indexes)
        c = column.collate("C")
        return sa.or_(
            column == sa.bindparam("ns"),
            sa.and_(c >= sa.bindparam("ns_dot"), c < sa.bindparam("ns_end")),
        )

    def json_prefilter(self, path: list[str], op: str, value: Any) -> Hashable | None:
        """One comparison per condition, in jsonb's own order where it is exact: numbers
        compare numerically and sort after strings and null, before booleans, arrays and
        objects, so ``>= 8`` may admit a boolean (Python drops it) but never loses a number,
        and nothing casts a value that is not a number. Strings compare in byte order
        ("C"), as Python does. Fewer, simpler conditions also let the planner estimate
        them, and walk the newest-first index instead of scanning."""
        if isinstance(value, bool):
            return ("boolean",) if op == "$eq" else None
        if value is None:
            return ("null",) if op == "$eq" else None
        if op in JSON_OPS and isinstance(value, (int, float)):
            if isinstance(value, float) and value != value:  # NaN: let Python decide
                return None
            return ("number", op)
        if op in JSON_OPS and isinstance(value, str):
            return ("string", op)
        return ("exists",)

    def json_condition(self, value: Any, shape: Hashable, param: str) -> Any:
        kind, *rest = cast(tuple[Any, ...], shape)
        doc = sa.cast(value, sa_pg.JSONB)
        path = sa.cast(sa.bindparam(f"{param}_path"), sa_pg.ARRAY(sa.Text))
        compared: Any = sa.bindparam(param)
        if kind == "string":
            text = doc.op("#>>", return_type=sa.Text)(path).self_group().collate("C")
            return JSON_OPS[rest[0]](text, compared)
        at = doc.op("#>", return_type=sa_pg.JSONB)(path)
        if kind == "boolean":
            return at == sa.func.to_jsonb(sa.cast(compared, sa.Boolean))
        if kind == "null":
            return sa.func.jsonb_typeof(at) == sa.literal_column("'null'")
        if kind == "number":
            # through text: a float8 cast straight to numeric keeps only 15 digits, and
            # 0.22551938891410828 would no longer equal itself
            number = sa.func.to_jsonb(sa.cast(sa.cast(compared, sa.Text), sa.Numeric))
            return JSON_OPS[rest[0]](at, number)
        return at.is_not(None)

    def json_path(self, path: list[str]) -> Any:
        return list(path)

    def fast_get_tuple(self, by_id: bool) -> Sql:
        """``get_tuple`` in one statement: the checkpoint row (tag 0); its blobs looked up by
        full primary key (a LATERAL ... LIMIT 1 per channel, so the planner cannot turn it
        into a scan of the thread's blobs), each followed down its chain of appended-list
        bases (tag 1); its writes (tag 2)."""
        return self.sql(("fast_get_tuple", by_id), functools.partial(get_tuple_statement, by_id))

    def fast_write(
        self, kind: str, touch: bool, fixed: Mapping[str, Any], rows: Mapping[str, list[Any]]
    ) -> FastWrite | None:
        """One statement, hence one implicit transaction and one round trip, with no
        BEGIN/COMMIT: every insert is a data-modifying CTE conditioned on the thread being
        live. Rows come as a ``VALUES`` list of plain parameters (psycopg adapts an array
        parameter by inspecting its items on every call, which cost more than the insert),
        so there is a statement per row count; a write of more rows takes the generic path.

        On a distributed database the same inserts travel as separate statements in one
        transaction (still one round trip), each a router query to the thread's shard:
        Citus runs every data-modifying CTE of a statement as a step of its own through the
        coordinator, but sends an ``INSERT ... SELECT`` whose rows come from the thread's own
        activity row straight to that row's shard. The first statement checks the thread is
        live and locks its row (the touch's upsert, or ``FOR SHARE``), so a delete waits for
        the write to commit.
        """
        groups = ("b",) if kind == "put" else ("f", "r")
        counts = tuple(len(rows[g]) for g in groups)
        if sum(counts) > MAX_VALUES_ROWS:
            return None
        params = dict(fixed)
        for group in groups:
            for row, cells in zip(rows[group], cell_names(kind, group), strict=False):
                for column, name in cells:
                    params[name] = row[column]
        if self.distributed:
            return self._routed_write(kind, touch, counts, params)

        def build() -> Any:
            return fast_write_statement(self, kind, touch, counts)

        key = ("fast_write", kind, touch, counts)
        return FastWrite(self.sql(key, build), params, fetch=True)

    tells_unique_violations = True

    def unique_violation(self, exc: BaseException, index: sa.Index) -> bool:
        import psycopg

        return (
            isinstance(exc, psycopg.errors.UniqueViolation)
            and exc.diag.constraint_name == index.name
        )

    def _routed_checkpoint(self) -> Any:
        keys = [c.name for c in checkpoints.primary_key.columns]
        update = [c.name for c in checkpoints.columns if c.name not in keys]
        return self.upsert(checkpoints, keys, update)

    def _routed_write(
        self, kind: str, touch: bool, counts: tuple[int, ...], params: dict[str, Any]
    ) -> FastWrite:
        """:meth:`fast_write` on a distributed database: a check of the thread that locks
        its row (the touch's conditional upsert, or ``FOR SHARE``), then plain
        ``INSERT ... VALUES`` statements, each routed to the thread's shard on the fast
        path of Citus's planner (an ``INSERT ... SELECT`` is planned in full, three times
        the cost); the plan commits only when the check found the thread live."""
        if touch:
            head = self.sql("routed_touch", routed_touch)
        else:
            head = self.sql("routed_live", routed_live)
        inserts = [
            self.sql(
                ("routed_insert", group, count), functools.partial(routed_insert, group, count)
            )
            for group, count in zip(GROUPS[kind], counts, strict=True)
            if count
        ]
        if kind == "put":
            inserts.append(self.sql("routed_checkpoint", self._routed_checkpoint))
        return FastWrite(head, params, fetch=True, then=tuple((sql, params) for sql in inserts))
