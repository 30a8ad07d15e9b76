"""What differs between SQLite, PostgreSQL and SAP HANA: SQLAlchemy Core statements compiled
once each by the database's SQLAlchemy dialect, and the constructs SQLAlchemy does not unify."""

from __future__ import annotations

import operator
import threading
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

import sqlalchemy as sa
from sqlalchemy.engine.interfaces import Dialect as SADialect
from sqlalchemy.schema import CreateIndex, CreateTable

from langgraph_checkpoint_agent_memory.db.schema import (
    items_i,
    matching,
    rows_named,
    store_vectors,
    vectors_v,
)
from langgraph_checkpoint_agent_memory.errors import ConfigurationError

if TYPE_CHECKING:
    from langgraph_checkpoint_agent_memory.db.database import Plan, Stmt

Columns: TypeAlias = Sequence[str]
Source: TypeAlias = "sa.Select[Any]"


#: The store filter operators a dialect's JSON pre-filter compares with, as Core operators.
JSON_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "$eq": operator.eq,
    "$gt": operator.gt,
    "$gte": operator.ge,
    "$lt": operator.lt,
    "$lte": operator.le,
}

#: ``"flat"``: no approximate index, exact similarity only.
ANN_KINDS = ("hnsw", "flat")
VECTOR_TYPES = ("vector", "halfvec")
#: The most dimensions pgvector's HNSW index takes, per vector type.
HNSW_MAX_DIMS = {"vector": 2000, "halfvec": 4000}
#: The HNSW parameter ranges every database here accepts (pgvector's, inside SAP HANA's).
ANN_RANGES = {"m": (4, 100), "ef_construction": (8, 1000), "ef_search": (1, 1000)}


@dataclass(frozen=True)
class AnnConfig:
    """How a store's vectors are indexed for approximate search: LangGraph's
    ``PostgresIndexConfig["ann_index_config"]`` (``kind``, ``vector_type``, ``m``,
    ``ef_construction``), plus ``ef_search``, the breadth of each search.

    Example:
        >>> AnnConfig.parse({"m": 32, "ef_search": 200}).ef_search
        200
    """

    kind: str = "hnsw"
    #: ``None``: ``vector`` up to 2,000 dimensions, ``halfvec`` above (PostgreSQL).
    vector_type: str | None = None
    m: int = 16
    ef_construction: int = 64
    ef_search: int = 300

    @classmethod
    def parse(cls, raw: Mapping[str, Any] | None) -> AnnConfig:
        """An ``ann_index_config`` mapping, checked."""
        raw = dict(raw or {})
        kind = str(raw.pop("kind", "hnsw"))
        if kind not in ANN_KINDS:
            hint = (
                " (IVFFlat is not offered: its lists are trained on the vectors present when "
                "it is built, and shared namespaces keep changing; 'hnsw' does not need that)"
                if kind == "ivfflat"
                else ""
            )
            raise ConfigurationError(
                f"ann_index_config kind must be one of {', '.join(ANN_KINDS)}, not {kind!r}{hint}"
            )
        vector_type = raw.pop("vector_type", None)
        if vector_type is not None and vector_type not in VECTOR_TYPES:
            raise ConfigurationError(
                f"ann_index_config vector_type must be one of {', '.join(VECTOR_TYPES)}, "
                f"not {vector_type!r}"
            )
        numbers: dict[str, int] = {}
        for name, (low, high) in ANN_RANGES.items():
            if name not in raw:
                continue
            value = raw.pop(name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ConfigurationError(
                    f"ann_index_config {name} must be an integer from {low} to {high}, "
                    f"not {value!r}"
                )
            numbers[name] = value
        if raw:
            raise ConfigurationError(
                f"unknown ann_index_config keys: {', '.join(sorted(map(str, raw)))}"
            )
        config = cls(kind=kind, vector_type=vector_type, **numbers)
        if config.ef_construction < 2 * config.m:
            raise ConfigurationError(
                "ann_index_config ef_construction must be at least twice m "
                f"({config.ef_construction} < 2 * {config.m})"
            )
        return config


@dataclass(frozen=True)
class VectorIndex:
    """An HNSW index ``name`` over ``dims``-dimension vectors as ``vector_type`` (``vector``,
    ``halfvec``, ``REAL_VECTOR``) in ``column`` of the vectors table ``v``; ``ef_search``: each
    search's breadth; ``relation``: its name in catalog lookups (schema-qualified or bare)."""

    name: str
    dims: int
    vector_type: str
    column: str
    ef_search: int
    relation: str = ""

    def __post_init__(self) -> None:
        if not self.relation:
            object.__setattr__(self, "relation", self.name)


@dataclass(frozen=True)
class FastWrite:
    """A dialect's fast write; ``fetch``: it returns the thread's liveness (else a refusal
    errs); ``then``: statements after it in its transaction (Citus), kept if the thread lives."""

    sql: Sql
    params: Any
    fetch: bool
    then: tuple[tuple[Sql, Any], ...] = ()


@dataclass(frozen=True)
class Sql:
    """A compiled statement; ``names`` orders a mapping for positional drivers (``None``: none)."""

    text: str
    names: tuple[str, ...] | None = None
    #: Values SQLAlchemy bound at build time (a LIMIT, a JSON path), merged under the caller's.
    defaults: tuple[tuple[str, Any], ...] = ()

    def bind(self, params: Any) -> Any:
        if self.defaults:
            params = {**dict(self.defaults), **(params or {})}
        if params is None:
            return ()
        if self.names is None:
            return params
        return tuple(params[n] for n in self.names)

    def __str__(self) -> str:
        return self.text


class Dialect:
    """Base dialect; subclasses set ``name`` and build their SQLAlchemy dialect."""

    name = "generic"
    #: Whether the tables are spread over nodes (Citus), set by :func:`~.distribution.detect_plan`.
    distributed = False

    def __init__(self) -> None:
        self._cache: dict[Hashable, Sql] = {}
        self._lock = threading.Lock()
        self.sa: SADialect = self._make_sa_dialect()

    def _make_sa_dialect(self) -> SADialect:  # pragma: no cover - abstract
        raise NotImplementedError

    def compile(self, statement: sa.sql.ClauseElement) -> Sql:
        compiled: Any = statement.compile(dialect=self.sa)
        names = tuple(compiled.positiontup or ()) if compiled.positional else None
        defaults = tuple(
            (compiled.bind_names[bind], bind.effective_value)
            for bind in compiled.binds.values()
            if not bind.required and bind in compiled.bind_names
        )
        return Sql(str(compiled), names, defaults)

    def sql(self, key: Hashable, build: Callable[[], sa.sql.ClauseElement | str]) -> Sql:
        """The compiled statement for ``key``, built and compiled on first use only."""
        found = self._cache.get(key)
        if found is not None:
            return found
        built = build()
        compiled = Sql(built) if isinstance(built, str) else self.compile(built)
        with self._lock:
            self._cache[key] = compiled
        return compiled

    def ddl(self, tables: Sequence[sa.Table]) -> list[str]:
        out: list[str] = []
        for table in tables:
            out.append(str(CreateTable(table).compile(dialect=self.sa)).strip())
            for index in sorted(table.indexes, key=lambda i: i.name or ""):
                out.append(str(CreateIndex(index).compile(dialect=self.sa)).strip())
        return out

    #: Whether ``SELECT ... FOR UPDATE`` row locks exist (SQLite locks the whole database).
    row_locks = True
    #: Whether an upsert can carry ``DO UPDATE ... WHERE``; else plans decide in Python.
    conditional_upsert = True

    def insert_ignore(self, table: sa.Table, keys: Columns) -> sa.sql.ClauseElement:
        """Insert a row unless one with the same ``keys`` exists (first write wins)."""
        cols = [c.name for c in table.columns]
        return self.insert_from_select(table, cols, self.values_select(table, cols), keys, None)

    def computed(self, table: sa.Table) -> dict[str, Any]:
        """What an insert into ``table`` computes instead of binding: an item's number."""
        return {c.name: self.new_num() for c in table.columns if c.info.get("numbered")}

    def insert(self, table: sa.Table) -> Any:
        """The dialect's INSERT construct with ``on_conflict_do_*`` (SQLite, PostgreSQL)."""
        raise NotImplementedError

    def insert_row_ignore(self, table: sa.Table, keys: Columns) -> sa.sql.ClauseElement:
        """:meth:`insert_ignore` as ``INSERT ... VALUES``, which Citus routes to a shard."""
        cols = [c.name for c in table.columns]
        stmt = self.insert(table).values({**values_params(table, cols), **self.computed(table)})
        ignored: sa.sql.ClauseElement = stmt.on_conflict_do_nothing(index_elements=list(keys))
        return ignored

    def upsert(
        self, table: sa.Table, keys: Columns, update: Columns, where: Any = None
    ) -> sa.sql.ClauseElement:
        """Insert a row or overwrite its ``update`` columns (where ``where`` holds)."""
        cols = [c.name for c in table.columns]
        stmt = self.insert(table).values({**values_params(table, cols), **self.computed(table)})
        return _on_conflict_update(stmt, keys, update, where)

    def insert_from_select(
        self, table: sa.Table, cols: Columns, source: Source, keys: Columns, update: Columns | None
    ) -> sa.sql.ClauseElement:
        """``INSERT ... SELECT``; a key conflict keeps the row (``update is None``)."""
        if update is None:
            return self.insert_missing(table, cols, source, keys)
        return self.upsert_select(table, cols, source, keys, update)

    def insert_missing(
        self, table: sa.Table, cols: Columns, source: Source, keys: Columns
    ) -> sa.sql.ClauseElement:
        stmt = self._insert_select(table, cols, source)
        missing: sa.sql.ClauseElement = stmt.on_conflict_do_nothing(index_elements=list(keys))
        return missing

    def upsert_select(
        self, table: sa.Table, cols: Columns, source: Source, keys: Columns, update: Columns
    ) -> sa.sql.ClauseElement:
        return _on_conflict_update(self._insert_select(table, cols, source), keys, update)

    def _insert_select(self, table: sa.Table, cols: Columns, source: Source) -> Any:
        return self.insert(table).from_select(list(cols), source)

    def cast_param(self, param: sa.BindParameter[Any], type_: Any) -> Any:
        """A parameter in a SELECT list, typed so the database need not guess."""
        return sa.cast(param, type_)

    def values_select(self, table: sa.Table, cols: Columns) -> sa.Select[Any]:
        """``SELECT :c1 AS c1, ...``, typed by ``table``'s columns (computed ones computed)."""
        computed = self.computed(table)
        return sa.select(
            *[
                (
                    computed[c]
                    if c in computed
                    else self.cast_param(sa.bindparam(c), table.c[c].type)
                ).label(c)
                for c in cols
            ]
        )

    def skip_locked(self, select: sa.Select[Any]) -> sa.Select[Any]:
        """Lock the selected rows for this transaction, skipping rows others hold."""
        return select.with_for_update(skip_locked=True)

    def metadata_prefilter(self, column: sa.ColumnElement[Any], key: str, value: Any) -> Any:
        """A condition narrowing rows to those whose metadata may have ``key == value``."""
        return None

    def prefilter_value(self, key: str, value: Any) -> Any:
        return value

    #: Whether ``WITH RECURSIVE`` exists (to fetch a list's chain of bases in one query).
    recursive_cte = True
    #: Whether ``CREATE TABLE IF NOT EXISTS`` exists; otherwise ``create_if_missing`` runs.
    create_if_not_exists = True

    def schema_ddl(self) -> list[str]:
        return []

    def qualified(self, table: str) -> str:
        return table

    def qualify(self, text: str) -> str:
        return text

    def unless_exists(self, table: str, create: str) -> str:
        """``create`` as a statement that does nothing when ``table`` exists."""
        return create

    def create_unless_exists(self, table: sa.Table) -> str:
        create = CreateTable(table, if_not_exists=self.create_if_not_exists)
        return self.unless_exists(table.name, str(create.compile(dialect=self.sa)).strip())

    def create_if_missing(self, create: Sql) -> Any:
        """A plan creating a table unless it exists (dialects without IF NOT EXISTS)."""
        raise NotImplementedError
        yield  # pragma: no cover

    def fast_get_tuple(self, by_id: bool) -> Sql | None:
        """One statement returning a checkpoint with its blobs and writes, tagged 0/1/2."""
        return None

    def fast_write(
        self, kind: str, touch: bool, fixed: Mapping[str, Any], rows: Mapping[str, list[Any]]
    ) -> FastWrite | None:
        """One statement doing a whole ``put`` or ``put_writes`` (``kind="writes"``), or ``None``;
        ``rows``: ``"b"`` blobs, ``"f"`` first-write-wins and ``"r"`` replacing writes."""
        return None

    def thread_gone(self, exc: BaseException) -> bool:
        """Whether ``exc`` is a fast write refusing a deleted or expired thread."""
        return False

    tells_unique_violations = False

    def unique_violation(self, exc: BaseException, index: sa.Index) -> bool:
        """Whether ``exc`` is a statement refused by the unique ``index``."""
        return False

    substr = "substr"

    def substring(self, column: Any, length: Any) -> Any:
        return getattr(sa.func, self.substr.lower())(column, sa.literal_column("1"), length)

    def under_clause(self, column: Any, name: str = "ns") -> Any:
        """``column`` is ``:ns`` or below it (``:ns_dot``: ``ns + "."``); no LIKE: labels hold %.
        ``name``: the parameters' name instead of ``ns``."""
        head = self.substring(column, sa.bindparam(f"{name}_len", type_=sa.Integer))
        return sa.or_(column == sa.bindparam(name), head == sa.bindparam(f"{name}_dot"))

    def under_range(self, column: Any) -> Any:
        """:meth:`under_clause` as an index range, where the dialect compares bytes."""
        return self.under_clause(column)

    #: Whether text compares byte by byte, so that the keys under a namespace are a range.
    bytewise = False

    def shard_keys(self, t: Any) -> Any:
        """A select of the shard keys of ``t`` (which lead its primary key) under ``:ns``,
        found by a seek each (a loose scan of the key: a scan of the range read every row in
        it, 5.6 ms at 30,000 items in one shard key on PostgreSQL); ``None`` without
        recursive queries or where tables are spread over nodes. Unless text compares byte
        by byte, the walk visits every shard key: a collation may order one under ``:ns``
        outside the range."""
        if not self.recursive_cte or self.distributed:
            return None
        end: Any = sa.bindparam("ns_end")
        first, after = t.alias("first"), t.alias("after")
        bounds = [first.c.shard >= sa.bindparam("ns"), first.c.shard < end] if self.bytewise else []
        walk = (
            sa.select(sa.func.min(first.c.shard).label("shard"))
            .where(*bounds)
            .cte(f"{t.name}_shards", recursive=True)
        )
        step = sa.select(sa.func.min(after.c.shard)).where(
            after.c.shard > walk.c.shard, *([after.c.shard < end] if self.bytewise else [])
        )
        walk = walk.union_all(sa.select(step.scalar_subquery()).where(walk.c.shard.is_not(None)))
        return sa.select(walk.c.shard).where(self.under_clause(walk.c.shard))

    def vector_under_clause(self, column: Any) -> Any:
        """:meth:`under_clause` as the vectors' namespace index can walk it."""
        return self.under_clause(column)

    def param(self, name: str) -> str:
        return f":{name}"

    def write_rows_ddl(self) -> list[str]:
        """Objects a dialect's :meth:`fast_write` needs."""
        return []

    #: Whether vectors also live in an ``embedding`` column, for similarity in SQL (PostgreSQL).
    native_vectors = False

    def vector_ddl(self) -> list[str]:
        """DDL adding the native vector column to ``am_store_vectors``."""
        return []

    def vector_index_ddl(self) -> list[str]:
        return []

    def vectors_plan(self, *, create: bool = True) -> Plan[None]:
        """At setup: bring native vectors up to date and set :attr:`native_vectors`."""
        return
        yield  # pragma: no cover

    def to_vector(self, text: Any) -> Any:
        """Raw: a vector's text form converted to the database's vector type."""
        raise NotImplementedError

    def vector_columns(self) -> tuple[str, ...]:
        """The native vector columns every stored vector is written to."""
        return ("embedding",)

    def native_vectors_table(self, columns: Sequence[str]) -> sa.TableClause:
        """The vectors table with the native ``columns`` :mod:`.schema` does not declare."""
        return sa.table(
            store_vectors.name,
            *(sa.column(c.name) for c in store_vectors.columns),
            *(sa.column(c) for c in columns),
        )

    def insert_vector(self) -> Sql | None:
        """The vector insert when :attr:`native_vectors` (``None``: the generic one)."""
        if not self.native_vectors:
            return None
        columns = self.vector_columns()

        def build() -> Any:
            values: dict[str, Any] = {c.name: sa.bindparam(c.name) for c in store_vectors.columns}
            values |= {c: self.to_vector(sa.bindparam(c)) for c in columns}
            return sa.insert(self.native_vectors_table(columns)).values(values)

        return self.sql(("insert_vector_native", columns), build)

    def fill_vector(self) -> Sql | None:
        """Set an empty native vector column from ``:embedding``."""
        if not self.native_vectors:
            return None

        def build() -> Any:
            t = self.native_vectors_table(["embedding"])
            return (
                sa.update(t)
                .where(*matching(t, "shard", "prefix", "key", "field"), t.c.embedding.is_(None))
                .values(embedding=self.to_vector(sa.bindparam("embedding")))
            )

        return self.sql("fill_vector", build)

    def vector_row(self, row: dict[str, Any]) -> None:
        """Add to a vector row whatever else :meth:`insert_vector` binds."""

    def vector_search(
        self, filters: Hashable, where: Sequence[Any], dims: int, *, joined: bool
    ) -> Sql | None:
        """``(prefix, key, score)`` of the ``:n`` vectors most like ``:query_vector`` meeting
        ``where`` (``filters``: the cache key); ``None``: the store computes it in numpy."""
        return None

    def ann_index(self, dims: int, config: AnnConfig) -> VectorIndex | None:
        """The approximate index this database would keep for ``dims``-long vectors."""
        return None

    def ann_index_plan(self, index: VectorIndex, config: AnnConfig, *, create: bool) -> Plan[bool]:
        """Whether ``index`` is there and usable; with ``create``, build it first."""
        return False
        yield  # pragma: no cover

    def ann_search(self, index: VectorIndex, filters: Hashable, where: Sequence[Any]) -> list[Sql]:
        """An approximate search's settings, then its query: ``(prefix, key, score)``."""
        raise NotImplementedError

    def vector_counts(self, index: VectorIndex, under: Sequence[Any], scoped: bool) -> Sql:
        """One row: the vectors under the namespace (up to ``:cap``), and in ``index``."""
        raise NotImplementedError

    def insert_arrays(self, table: sa.Table) -> Sql | None:
        """One INSERT of many rows, a list per column; ``None``: rows go one by one."""
        return None

    def insert_owned(
        self, table: sa.Table, owner: sa.Table, rows: Sequence[Mapping[str, Any]]
    ) -> Stmt | None:
        """``rows`` of ``table`` as one statement per ``owner`` row, routed to its shard."""
        return None

    def json_path(self, path: list[str]) -> Any:
        return path

    def json_prefilter(self, path: list[str], op: str, value: Any) -> Hashable | None:
        """The shape of a condition every match satisfies (``None``: no narrowing)."""
        return None

    def json_condition(self, value: Any, shape: Hashable, param: str) -> Any:
        """The condition of ``shape`` on ``value``, binding ``:param`` and ``:param_path``."""
        raise NotImplementedError

    def erase_session(self) -> tuple[list[str], list[str]]:
        """Statements run before and after an erase, so the bytes also leave the files."""
        return [], []

    def migration_lock(self) -> str | None:
        return None

    def scope_lock(self) -> sa.sql.ClauseElement | None:
        """A lock on one shard key (``:lock_key``) until the transaction ends (``None``: writes
        lock the whole database); writers take them sorted, so they never deadlock."""
        return None

    def list_size(self, n: int) -> int:
        """``n`` rounded up to 16s, so a few statements serve every length."""
        return n + (-n % 16)

    def one_of(self, column: Any, param: str, size: int) -> Any:
        return column.in_([sa.bindparam(f"{param}{j}", type_=column.type) for j in range(size)])

    def list_params(self, param: str, values: Sequence[Any]) -> dict[str, Any]:
        size = self.list_size(len(values))
        padded = [*values, *[values[-1]] * (size - len(values))]
        return {f"{param}{j}": v for j, v in enumerate(padded)}

    def rows_named(self, t: Any, n: int, names: Sequence[tuple[str, str]]) -> Any:
        """Core: ``t``'s row is one of ``n`` named by ``(column, param)`` (parameters of
        :meth:`named_params`)."""
        return rows_named(t, n, names)

    def named_params(self, params: Sequence[str], rows: Sequence[Sequence[Any]]) -> dict[str, Any]:
        """The parameters of :meth:`rows_named` naming ``rows``, a value per name of ``params``:
        ``:<param><j>``."""
        return {
            f"{p}{j}": v for j, row in enumerate(rows) for p, v in zip(params, row, strict=True)
        }

    #: The most values one statement's list binds (:meth:`one_of`); ``None``: any number.
    list_cap: int | None = 1024

    def new_num(self) -> Any:
        """An expression numbering a new store item for the term index (never reused)."""
        raise NotImplementedError

    def num_ddl(self) -> list[str]:
        """What :meth:`new_num` needs created with the store's tables."""
        return []

    def merge_lock(self) -> Sql | None:
        """A statement that makes the merges of one namespace (``:lock``) take turns, held
        to the end of the transaction; ``None``: the write lock already does."""
        return None


def same_item(a: Any, b: Any) -> Any:
    return sa.and_(a.c.shard == b.c.shard, a.c.prefix == b.c.prefix, a.c.key == b.c.key)


def nearest(sim: Any, where: Sequence[Any], order: Sequence[Any], *, joined: bool = True) -> Any:
    """``(prefix, key, sim)`` of the ``:n`` first vectors by ``order`` meeting ``where``."""
    v, i = vectors_v, items_i
    return (
        sa.select(v.c.prefix, v.c.key, sim)
        .select_from(v.join(i, same_item(i, v)) if joined else v)
        .where(*where)
        .order_by(*order)
        .limit(sa.bindparam("n", type_=sa.Integer))
    )


def vectors_near(under: Sequence[Any]) -> Any:
    capped = (
        sa.select(sa.literal_column("1"))
        .select_from(vectors_v)
        .where(*under)
        .limit(sa.bindparam("cap", type_=sa.Integer))
        .subquery("s")
    )
    return sa.select(sa.func.count()).select_from(capped).scalar_subquery()


def values_params(table: sa.Table, columns: Sequence[str]) -> dict[str, sa.BindParameter[Any]]:
    """Typed bind parameters; an ``optional`` column binds NULL when a row lacks it."""
    return {
        c: sa.bindparam(c, None, type_=table.c[c].type, required=False)
        if table.c[c].info.get("optional")
        else sa.bindparam(c, type_=table.c[c].type)
        for c in columns
    }


def _on_conflict_update(
    stmt: Any, keys: Columns, update: Columns, where: Any = None
) -> sa.sql.ClauseElement:
    table = stmt.table
    kept = {c.name: sa.func.coalesce(c, stmt.excluded[c.name]) for c in table.columns}
    set_ = {c: stmt.excluded[c] for c in update}
    # a computed column (an item's number) is kept, or set where a row had none
    set_.update({c: kept[c] for c in (c.name for c in table.columns if c.info.get("numbered"))})
    upsert: sa.sql.ClauseElement = stmt.on_conflict_do_update(
        index_elements=list(keys), set_=set_, where=where
    )
    return upsert
