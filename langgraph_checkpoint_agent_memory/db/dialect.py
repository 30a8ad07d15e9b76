"""What differs between SQLite, PostgreSQL and SAP HANA, and nothing else.

Statements are written once, as SQLAlchemy Core over :mod:`.schema`'s tables, and compiled
here, once per statement, by each database's SQLAlchemy dialect into the SQL text the raw
drivers execute (SQLAlchemy is a statement compiler for us, never an engine); HANA's is
``sqlalchemy-hana``'s, so HANA SQL is checked even on machines with no HANA server.

A dialect adds the few constructs SQLAlchemy does not unify: insert-if-absent, upsert, row
locks that skip locked rows, and the metadata pre-filter pushed into ``list()``.
"""

from __future__ import annotations

import operator
import threading
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

import sqlalchemy as sa
from sqlalchemy.engine.interfaces import Dialect as SADialect
from sqlalchemy.schema import CreateIndex, CreateTable

from langgraph_checkpoint_agent_memory.db.schema import store_vectors, vectors_v
from langgraph_checkpoint_agent_memory.errors import ConfigurationError

if TYPE_CHECKING:
    from langgraph_checkpoint_agent_memory.db.database import Plan, Stmt

#: Column names (of a key, of an insert, of the columns an upsert overwrites).
Columns: TypeAlias = Sequence[str]
#: The SELECT whose rows an ``INSERT ... SELECT`` writes.
Source: TypeAlias = "sa.Select[Any]"


#: The store filter operators a dialect's JSON pre-filter compares with, as Core operators.
JSON_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "$eq": operator.eq,
    "$gt": operator.gt,
    "$gte": operator.ge,
    "$lt": operator.lt,
    "$lte": operator.le,
}

#: The approximate (ANN) index kinds a store's ``index`` may ask for: ``"hnsw"`` (the default,
#: where the database offers it) or ``"flat"`` (none: exact similarity only).
ANN_KINDS = ("hnsw", "flat")
#: Vector types an HNSW index may hold on PostgreSQL: pgvector's ``vector`` indexes at most
#: 2,000 dimensions, ``halfvec`` (half precision) at most 4,000.
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
        """An ``ann_index_config`` mapping, checked; ``ConfigurationError`` names what is
        wrong."""
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
    """An approximate (HNSW) index over the stored vectors of one dimension count, as a
    dialect builds and searches it.

    Attributes:
        name: The index's name in the database.
        dims: The dimension count of the vectors it holds.
        vector_type: The type it holds them as (``vector`` or ``halfvec`` on PostgreSQL,
            ``REAL_VECTOR`` on SAP HANA).
        column: The SQL expression it indexes, over the vectors table as ``v``.
        ef_search: The breadth of each search (the index's candidate list).
        relation: How a catalog lookup names it (schema-qualified where the tables have a
            schema); the bare name otherwise.
    """

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
    """A dialect's fast write: its SQL, parameters, and whether it returns the
    thread's liveness as a row (its first column, no row meaning not live; else a refusal
    comes as an error).

    ``then`` holds statements (with their parameters) that follow it in the same
    transaction, where the write takes more than one statement (a distributed database,
    which routes each statement to one shard but runs a multi-statement CTE in steps). They
    write unconditionally; the first statement checks the thread and locks its row, and the
    plan commits only when it found the thread live (else it rolls back and takes the slow
    path).
    """

    sql: Sql
    params: Any
    fetch: bool
    then: tuple[tuple[Sql, Any], ...] = ()


@dataclass(frozen=True)
class Sql:
    """A compiled statement. ``names`` orders a parameter mapping for positional drivers;
    ``None`` means the driver takes the mapping itself."""

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
    #: Whether the tables are spread over several nodes (Citus): set by
    #: :func:`~.distribution.detect_plan` on first use. A distributed database refuses row
    #: locks across shards and runs a statement that names several tables' rows in steps
    #: unless each names one shard key value; rows then go in by ``INSERT ... VALUES``,
    #: which is routed to their shard, rather than by one ``INSERT ... SELECT`` of arrays.
    distributed = False

    def __init__(self) -> None:
        self._cache: dict[Hashable, Sql] = {}
        self._lock = threading.Lock()
        self.sa: SADialect = self._make_sa_dialect()

    def _make_sa_dialect(self) -> SADialect:  # pragma: no cover - abstract
        raise NotImplementedError

    # -- compilation -----------------------------------------------------------------------

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
        """CREATE TABLE and CREATE INDEX statements for ``tables``, in this dialect."""
        out: list[str] = []
        for table in tables:
            out.append(str(CreateTable(table).compile(dialect=self.sa)).strip())
            for index in sorted(table.indexes, key=lambda i: i.name or ""):
                out.append(str(CreateIndex(index).compile(dialect=self.sa)).strip())
        return out

    # -- constructs SQLAlchemy does not unify ----------------------------------------------

    #: Whether ``SELECT ... FOR UPDATE`` row locks exist (SQLite locks the whole database).
    row_locks = True
    #: Whether an upsert can carry a condition on the existing row (``DO UPDATE ... WHERE``);
    #: without it, plans read the row under a lock and decide in Python.
    conditional_upsert = True

    def insert_ignore(self, table: sa.Table, keys: Columns) -> sa.sql.ClauseElement:
        """Insert a row unless one with the same ``keys`` exists (first write wins)."""
        cols = [c.name for c in table.columns]
        return self.insert_from_select(table, cols, self.values_select(table, cols), keys, None)

    def insert(self, table: sa.Table) -> Any:
        """The dialect's INSERT construct with ``on_conflict_do_*`` (SQLite, PostgreSQL)."""
        raise NotImplementedError

    def insert_row_ignore(self, table: sa.Table, keys: Columns) -> sa.sql.ClauseElement:
        """Insert one row unless one with the same ``keys`` exists, as ``INSERT ... VALUES``:
        a distributed database routes it to the shard of the row's key (an ``INSERT ...
        SELECT`` is first pulled to its coordinator)."""
        cols = [c.name for c in table.columns]
        stmt = self.insert(table).values(values_params(table, cols))
        ignored: sa.sql.ClauseElement = stmt.on_conflict_do_nothing(index_elements=list(keys))
        return ignored

    def upsert(
        self, table: sa.Table, keys: Columns, update: Columns, where: Any = None
    ) -> sa.sql.ClauseElement:
        """Insert a row or, when ``keys`` exist (and ``where`` holds for the existing row),
        overwrite the ``update`` columns."""
        cols = [c.name for c in table.columns]
        stmt = self.insert(table).values(values_params(table, cols))
        return _on_conflict_update(stmt, keys, update, where)

    def insert_from_select(
        self, table: sa.Table, cols: Columns, source: Source, keys: Columns, update: Columns | None
    ) -> sa.sql.ClauseElement:
        """``INSERT INTO table (cols) <source>``; on a key conflict keep the existing row
        (``update is None``) or overwrite the ``update`` columns."""
        if update is None:
            return self.insert_missing(table, cols, source, keys)
        return self.upsert_select(table, cols, source, keys, update)

    def insert_missing(
        self, table: sa.Table, cols: Columns, source: Source, keys: Columns
    ) -> sa.sql.ClauseElement:
        """``INSERT INTO table (cols) <source>`` of the rows whose ``keys`` are not there yet."""
        stmt = self._insert_select(table, cols, source)
        missing: sa.sql.ClauseElement = stmt.on_conflict_do_nothing(index_elements=list(keys))
        return missing

    def upsert_select(
        self, table: sa.Table, cols: Columns, source: Source, keys: Columns, update: Columns
    ) -> sa.sql.ClauseElement:
        """``INSERT INTO table (cols) <source>``, overwriting ``update`` on a key conflict."""
        return _on_conflict_update(self._insert_select(table, cols, source), keys, update)

    def _insert_select(self, table: sa.Table, cols: Columns, source: Source) -> Any:
        """The dialect's ``INSERT ... SELECT`` (with ``on_conflict_do_*``), before the conflict
        clause."""
        return self.insert(table).from_select(list(cols), source)

    def cast_param(self, param: sa.BindParameter[Any], type_: Any) -> Any:
        """A parameter in a SELECT list, typed so the database need not guess."""
        return sa.cast(param, type_)

    def values_select(self, table: sa.Table, cols: Columns) -> sa.Select[Any]:
        """``SELECT :c1 AS c1, ...``: one row of parameters named after ``table``'s columns
        ``cols``, typed by them (the source of an ``INSERT ... SELECT`` of one row)."""
        return sa.select(
            *[self.cast_param(sa.bindparam(c), table.c[c].type).label(c) for c in cols]
        )

    def skip_locked(self, select: sa.Select[Any]) -> sa.Select[Any]:
        """Lock the selected rows for this transaction, skipping rows others hold."""
        return select.with_for_update(skip_locked=True)

    def metadata_prefilter(self, column: sa.ColumnElement[Any], key: str, value: Any) -> Any:
        """A SQL condition that every row whose metadata has ``key == value`` satisfies, or
        ``None``. ``value`` is a bind parameter; :meth:`prefilter_value` prepares its value.
        It only narrows the rows read; the exact test is done in Python."""
        return None

    def prefilter_value(self, key: str, value: Any) -> Any:
        return value

    #: Whether ``WITH RECURSIVE`` exists (to fetch a list's chain of bases in one query).
    recursive_cte = True
    #: Whether ``CREATE TABLE IF NOT EXISTS`` exists; otherwise ``create_if_missing`` runs.
    create_if_not_exists = True

    def schema_ddl(self) -> list[str]:
        """What creates the schema the package's tables live in, where one is set."""
        return []

    def qualified(self, table: str) -> str:
        """``table`` as the database knows it (schema-qualified where one is set)."""
        return table

    def qualify(self, text: str) -> str:
        """Statement ``text`` as sent: its tables schema-qualified where a schema is set."""
        return text

    def unless_exists(self, table: str, create: str) -> str:
        """``create`` (a CREATE TABLE of ``table``) as a statement that does nothing when the
        table exists, even for a role that may not create tables (PostgreSQL checks the
        privilege before ``IF NOT EXISTS``)."""
        return create

    def create_unless_exists(self, table: sa.Table) -> str:
        """CREATE TABLE of ``table`` as :meth:`unless_exists` makes it."""
        create = CreateTable(table, if_not_exists=self.create_if_not_exists)
        return self.unless_exists(table.name, str(create.compile(dialect=self.sa)).strip())

    def create_if_missing(self, create: Sql) -> Any:
        """A plan creating a table unless it exists (dialects without IF NOT EXISTS)."""
        raise NotImplementedError
        yield  # pragma: no cover

    def fast_get_tuple(self, by_id: bool) -> Sql | None:
        """A single statement returning a checkpoint with its blobs and writes, tagged
        0/1/2, for dialects that can express it; ``None`` falls back to two batches."""
        return None

    def fast_write(
        self, kind: str, touch: bool, fixed: Mapping[str, Any], rows: Mapping[str, list[Any]]
    ) -> FastWrite | None:
        """A single statement doing a whole ``put`` (``kind="put"``) or ``put_writes``
        (``"writes"``), which is atomic without BEGIN/COMMIT, or ``None`` to use the generic
        statements in a transaction.

        ``fixed`` holds the thread row's and the statement's single values; ``rows`` the
        rows by group: ``"b"`` blobs (a put), ``"f"`` first-write-wins and ``"r"`` replacing
        writes (put_writes). When the thread turns out deleted or expired, the statement
        writes nothing, and either returns a first column of 0 (``fetch``) or raises an error
        that :meth:`thread_gone` recognizes.
        """
        return None

    def thread_gone(self, exc: BaseException) -> bool:
        """Whether ``exc`` is a fast write refusing a deleted or expired thread."""
        return False

    #: Whether :meth:`unique_violation` recognizes a write refused by a unique index (so a
    #: plan may insert a row that can lose a race inside a larger transaction, and tell
    #: that loss from any other failure).
    tells_unique_violations = False

    def unique_violation(self, exc: BaseException, index: sa.Index) -> bool:
        """Whether ``exc`` is a statement refused because ``index`` (a unique index) holds
        its key already."""
        return False

    #: The name of the substring function (HANA's ``SUBSTRING``).
    substr = "substr"

    def substring(self, column: Any, length: Any) -> Any:
        """Core: the first ``length`` characters of ``column`` (``substr``; HANA's
        ``SUBSTRING``)."""
        return getattr(sa.func, self.substr.lower())(column, sa.literal_column("1"), length)

    def under_clause(self, column: Any) -> Any:
        """Core: ``column`` is the namespace ``:ns`` or below it (``:ns_dot`` is
        ``ns + "."``, ``:ns_len`` its length, ``:ns_end`` is ``ns + "/"``, the first string
        after every ``ns.``-prefixed one in byte order). Exact comparisons only: labels may
        hold ``%`` or ``_``, and LIKE ignores case on SQLite."""
        head = self.substring(column, sa.bindparam("ns_len", type_=sa.Integer))
        return sa.or_(column == sa.bindparam("ns"), head == sa.bindparam("ns_dot"))

    def under_range(self, column: Any) -> Any:
        """Core: :meth:`under_clause` as a range of ``column``'s index where the dialect
        compares in byte order (SQLite's BINARY, PostgreSQL's ``"C"``), so a statement walks
        only the rows under ``:ns``; :meth:`under_clause` elsewhere."""
        return self.under_clause(column)

    def vector_under_clause(self, column: Any) -> Any:
        """Core: the vector row's ``column`` (its namespace) is under ``:ns``, in the form
        the dialect's namespace index on vectors can walk (:meth:`under_clause` here)."""
        return self.under_clause(column)

    def param(self, name: str) -> str:
        """How a named parameter is written in raw SQL text for this driver."""
        return f":{name}"

    def write_rows_ddl(self) -> list[str]:
        """Objects a dialect's :meth:`fast_write` needs."""
        return []

    #: Whether vectors also live in a native vector column (``embedding``), written from
    #: the text form ``[x, y, ...]`` passed as ``:embedding``, so similarity runs in SQL.
    #: A class setting where the database always has one (SAP HANA); on PostgreSQL it is
    #: found out at setup (:meth:`vectors_plan`), as pgvector may or may not be installed.
    native_vectors = False

    def vector_ddl(self) -> list[str]:
        """DDL adding the native vector column to ``am_store_vectors``."""
        return []

    def vector_index_ddl(self) -> list[str]:
        """DDL of what approximate vector search needs on this database
        (PostgreSQL: the pgvector column where the extension is there or can be created)."""
        return []

    def vectors_plan(self, *, create: bool = True) -> Plan[None]:
        """Run at every setup: bring native vector support up to what the database offers
        now (an extension installed since the last migration) and record it in
        :attr:`native_vectors`; without ``create``, only find out. Nothing to do by
        default."""
        return
        yield  # pragma: no cover

    def to_vector(self, text: Any) -> Any:
        """Raw: the database's conversion of a vector's text form to its vector type (no
        Core form)."""
        raise NotImplementedError

    def vector_columns(self) -> tuple[str, ...]:
        """The native vector columns every stored vector is written to (``embedding``, and
        where the dialect keeps them, typed columns per dimension count)."""
        return ("embedding",)

    def native_vectors_table(self, columns: Sequence[str]) -> sa.TableClause:
        """The vectors table with the native ``columns``, which :mod:`.schema` does not
        declare (they exist only where the database offers a vector type)."""
        return sa.table(
            store_vectors.name,
            *(sa.column(c.name) for c in store_vectors.columns),
            *(sa.column(c) for c in columns),
        )

    def insert_vector(self) -> Sql | None:
        """The vector insert when :attr:`native_vectors` (``None``: the generic one): each
        native column from the parameter of its name, a vector's text form."""
        if not self.native_vectors:
            return None
        columns = self.vector_columns()

        def build() -> Any:
            values: dict[str, Any] = {c.name: sa.bindparam(c.name) for c in store_vectors.columns}
            values |= {c: self.to_vector(sa.bindparam(c)) for c in columns}
            return sa.insert(self.native_vectors_table(columns)).values(values)

        return self.sql(("insert_vector_native", columns), build)

    def fill_vector(self) -> Sql | None:
        """Set the native vector column of one stored vector from ``:embedding``, where it
        is still empty."""
        if not self.native_vectors:
            return None

        def build() -> Any:
            t = self.native_vectors_table(["embedding"])
            return (
                sa.update(t)
                .where(
                    *(t.c[n] == sa.bindparam(n) for n in ("shard", "prefix", "key", "field")),
                    t.c.embedding.is_(None),
                )
                .values(embedding=self.to_vector(sa.bindparam("embedding")))
            )

        return self.sql("fill_vector", build)

    def vector_row(self, row: dict[str, Any]) -> None:
        """Add to a vector row (``vector`` bytes, ``embedding`` text) whatever else
        :meth:`insert_vector` binds."""

    def vector_search(
        self, filters: Hashable, where: Sequence[Any], dims: int, *, joined: bool
    ) -> Sql | None:
        """Exact similarity to ``:query_vector`` (text form) computed in the database:
        ``(prefix, key, score)`` of the ``:n`` best ``dims``-long vectors ``v``, best first
        (an item once per embedded field). ``joined``: only vectors whose item ``i`` meets
        ``where`` (Core conditions over :data:`.schema.vectors_v` and :data:`.schema.items_i`,
        built from ``filters``, the cache key); otherwise ``where`` is the namespace alone
        and the items are not read (the store drops expired ones after).
        ``None``: the store computes it in numpy."""
        return None

    def ann_index(self, dims: int, config: AnnConfig) -> VectorIndex | None:
        """The approximate index this database would keep for ``dims``-long vectors, or
        ``None`` where it has none (no vector index type, too many dimensions, or
        ``kind="flat"``)."""
        return None

    def ann_index_plan(self, index: VectorIndex, config: AnnConfig, *, create: bool) -> Plan[bool]:
        """Whether ``index`` is there and usable; with ``create``, build it first when it is
        missing (once, however many processes set up at once)."""
        return False
        yield  # pragma: no cover

    def ann_search(self, index: VectorIndex, filters: Hashable, where: Sequence[Any]) -> list[Sql]:
        """The statements of one approximate search through ``index``, sent in one
        transaction: settings, then the query, whose rows are ``(prefix, key, score)`` of the
        ``:n`` nearest vectors (best first, an item once per embedded field) whose item ``i``
        meets ``where``; it reads the index further while filtered rows leave fewer than
        ``:n``."""
        raise NotImplementedError

    def vector_counts(self, index: VectorIndex, under: Sequence[Any], scoped: bool) -> Sql:
        """One row: how many vectors lie under the namespace (counted up to ``:cap``), and
        about how many ``index`` holds in all."""
        raise NotImplementedError

    def insert_arrays(self, table: sa.Table) -> Sql | None:
        """One INSERT of many rows whose parameters are one list per column (a postings
        batch in one statement, not one per row); ``None``: rows go one by one."""
        return None

    def insert_owned(
        self, table: sa.Table, owner: sa.Table, rows: Sequence[Mapping[str, Any]]
    ) -> Stmt | None:
        """``rows`` of ``table`` (each carrying the primary key of its ``owner`` row, whose
        rows they are: an item's postings) inserted as one statement per owner, each
        naming the owner's key once, so a distributed database routes it to the owner's
        shard; ``None``: the dialect has no such statement."""
        return None

    def json_path(self, path: list[str]) -> Any:
        """The value bound as ``:<param>_path`` for :meth:`json_prefilter`."""
        return path

    def json_prefilter(self, path: list[str], op: str, value: Any) -> Hashable | None:
        """The shape of a SQL condition for a store filter condition on ``value`` at ``path``
        that every matching row satisfies (the exact test runs in Python): a hashable that
        :meth:`json_condition` builds from; ``None`` when the dialect cannot narrow it."""
        return None

    def json_condition(self, value: Any, shape: Hashable, param: str) -> Any:
        """Core: the condition of :meth:`json_prefilter`'s ``shape`` on the JSON column
        ``value``, binding ``:param`` (the compared value) and ``:param_path``."""
        raise NotImplementedError

    def erase_session(self) -> tuple[list[str], list[str]]:
        """Statements run alone on the erasing connection before and after the erase
        transaction, so the deleted bytes also leave the database files (not only the
        tables). Nothing for servers, whose storage the database manages."""
        return [], []

    def migration_lock(self) -> str | None:
        """A statement serializing concurrent migrations inside their transaction."""
        return None

    def scope_lock(self) -> sa.sql.ClauseElement | None:
        """Core: a statement taking, until its transaction ends, the lock of one shard key
        (``:lock_key``), or ``None`` where a transaction that writes locks the whole
        database already (SQLite's ``BEGIN IMMEDIATE``).

        Every transaction that writes a memory scope (record, a consolidation job's claim,
        apply and failure, an agent's fact changes, erase) takes the locks of the scopes it
        writes first, in one order (sorted): their row locks then never interleave, so they
        queue instead of deadlocking.
        """
        return None

    # -- the store's term index: lists bound as one parameter or many, the index of postings
    # no block holds yet (``store/blocks.py``), and keeping the postings' reads an index's work

    def list_size(self, n: int) -> int:
        """The parameters a list of ``n`` values takes in :meth:`one_of`: ``n`` rounded up
        to a multiple of 16, so a few statements serve every length (PostgreSQL: 1)."""
        return n + (-n % 16)

    def one_of(self, column: Any, param: str, size: int) -> Any:
        """Core: ``column`` equals one of the values :meth:`list_params` binds, ``size``
        (:meth:`list_size`) parameters ``:<param>0`` ... ``:<param><size-1>``."""
        return column.in_([sa.bindparam(f"{param}{j}", type_=column.type) for j in range(size)])

    def list_params(self, param: str, values: Sequence[Any]) -> dict[str, Any]:
        """The parameters of :meth:`one_of` for ``values`` (at least one), the last repeated
        up to :meth:`list_size`."""
        size = self.list_size(len(values))
        padded = [*values, *[values[-1]] * (size - len(values))]
        return {f"{param}{j}": v for j, v in enumerate(padded)}

    #: Whether queries of common terms read packed blocks of postings (``store/blocks.py``):
    #: where the database has partial indexes, which find the postings written since a
    #: block was built without reading the others.
    posting_blocks = True
    #: The columns of the index of unpacked postings after its first (the rest it includes).
    fresh_index_columns: tuple[str, ...] = ("term", "shard", "prefix", "key")

    def fresh_lead(self, t: Any) -> Any:
        """The first column of the index of unpacked postings of table ``t``, which a query
        of them names (equal to 0) and orders by: :func:`unpacked` (the ``packed IS NULL``
        of a query is left out of a partial index's conditions on PostgreSQL, being its
        predicate)."""
        return unpacked(t)

    def fresh_postings_ddl(self) -> list[str]:
        """The index of postings no block holds yet (``packed IS NULL``), with what BM25
        reads, so the read is the index's alone; none where :attr:`posting_blocks` is off.

        It leads with :meth:`fresh_lead`, which queries name: the primary key cannot serve
        that condition nor its order, so no planner takes the primary key (and every
        posting of a term) for the few unpacked ones, whatever its statistics say
        (PostgreSQL's, from before a build packed most of them, would)."""
        if not self.posting_blocks:
            return []
        names = ("term", "shard", "prefix", "key", "tf", "dl", "packed")
        terms = sa.Table("am_store_terms", sa.MetaData(), *(sa.Column(c) for c in names))
        index = sa.Index(
            "am_store_terms_fresh",
            self.fresh_lead(terms),
            *(terms.c[c] for c in self.fresh_index_columns),
            postgresql_include=["tf", "dl"],
            postgresql_where=terms.c.packed.is_(None),
            sqlite_where=terms.c.packed.is_(None),
        )
        return [str(CreateIndex(index).compile(dialect=self.sa)).strip()]

    def postings_upkeep_ddl(self) -> list[str]:
        """DDL that keeps reading postings an index's work alone where the
        database needs telling (none here; SQLite's postings are their key's rows, and an
        update leaves no dead index entry)."""
        return []


def unpacked(t: Any) -> Any:
    """Core: ``COALESCE(t.packed, 0)``, the first column of the index of unpacked postings
    (0 for every posting it holds; see :meth:`Dialect.fresh_postings_ddl`)."""
    return sa.func.coalesce(t.c.packed, sa.literal_column("0", sa.Integer))


def same_item(a: Any, b: Any) -> Any:
    """Core: rows of ``a`` and ``b`` (tables or aliases with ``shard``, ``prefix`` and
    ``key``) belong to the same store item (the shard key first: co-located)."""
    return sa.and_(a.c.shard == b.c.shard, a.c.prefix == b.c.prefix, a.c.key == b.c.key)


def vectors_near(under: Sequence[Any]) -> Any:
    """Core, a scalar: how many vectors lie ``under`` the namespace, counted up to ``:cap``
    (the first column of :meth:`Dialect.vector_counts`)."""
    capped = (
        sa.select(sa.literal_column("1"))
        .select_from(vectors_v)
        .where(*under)
        .limit(sa.bindparam("cap", type_=sa.Integer))
        .subquery("s")
    )
    return sa.select(sa.func.count()).select_from(capped).scalar_subquery()


def values_params(table: sa.Table, columns: Sequence[str]) -> dict[str, sa.BindParameter[Any]]:
    """``{column: bindparam(column)}``, typed by the table so drivers bind the right types;
    a column marked ``info={"optional": True}`` binds NULL when a row does not name it."""
    return {
        c: sa.bindparam(c, None, type_=table.c[c].type, required=False)
        if table.c[c].info.get("optional")
        else sa.bindparam(c, type_=table.c[c].type)
        for c in columns
    }


def _on_conflict_update(
    stmt: Any, keys: Columns, update: Columns, where: Any = None
) -> sa.sql.ClauseElement:
    """``stmt`` (an INSERT with ``on_conflict_do_update``) overwriting ``update`` on a
    conflict of ``keys`` where ``where`` holds for the existing row."""
    upsert: sa.sql.ClauseElement = stmt.on_conflict_do_update(
        index_elements=list(keys), set_={c: stmt.excluded[c] for c in update}, where=where
    )
    return upsert
