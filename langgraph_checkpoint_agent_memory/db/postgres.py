"""What PostgreSQL's SQL looks like: the dialect, and the one-statement checkpoint reads and
writes. Connections, pools and sessions live in :mod:`.postgres_connection`.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as sa_pg
from sqlalchemy.engine.interfaces import Dialect as SADialect

from langgraph_checkpoint_agent_memory.db.dialect import Dialect, FastWrite, Sql

MIGRATION_LOCK_KEY = 0x616D5F6D6967  # "am_mig"


class PostgresDialect(Dialect):
    name = "postgresql"
    pipelines = True

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
        return f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK_KEY})"

    def param(self, name: str) -> str:
        return f"%({name})s"

    def full_text_ddl(self) -> list[str]:
        return [
            "ALTER TABLE am_store_items ADD COLUMN doc_tsv tsvector GENERATED ALWAYS AS "
            "(to_tsvector('english', coalesce(doc, ''))) STORED",
            "CREATE INDEX am_store_items_doc_tsv ON am_store_items USING GIN (doc_tsv)",
        ]

    def insert_arrays(self, table: sa.Table) -> Sql:
        def build() -> str:
            cols = [c.name for c in table.columns]
            arrays = ", ".join(
                f"CAST(%({c})s AS {table.c[c].type.compile(dialect=self.sa)}[])" for c in cols
            )
            return f"INSERT INTO {table.name} ({', '.join(cols)}) SELECT * FROM unnest({arrays})"

        return self.sql(("insert_arrays", table.name), build)

    def drop_full_text_ddl(self) -> list[str]:
        return [
            "DROP INDEX IF EXISTS am_store_items_doc_tsv",
            "ALTER TABLE am_store_items DROP COLUMN IF EXISTS doc_tsv",
        ]

    def under(self, column: str = "prefix") -> str:
        # A byte-order range, so the planner estimates it from the column's statistics (a
        # substr() comparison is a blind guess that made it scan instead of walking indexes)
        return (
            f'({column} = %(ns)s OR ({column} COLLATE "C" >= %(ns_dot)s '
            f'AND {column} COLLATE "C" < %(ns_end)s))'
        )

    def json_prefilter(self, path: list[str], op: str, value: Any, param: str) -> str | None:
        """One comparison per condition, in jsonb's own order where it is exact: numbers
        compare numerically and sort after strings and null, before booleans, arrays and
        objects, so ``>= 8`` may admit a boolean (Python drops it) but never loses a number,
        and nothing casts a value that is not a number. Strings compare in byte order
        ("C"), as Python does. Fewer, simpler conditions also let the planner estimate
        them, and walk the newest-first index instead of scanning."""
        at = f"CAST(value AS jsonb) #> %({param}_path)s::text[]"
        text = f"(CAST(value AS jsonb) #>> %({param}_path)s::text[])"
        sql_op = {"$eq": "=", "$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}.get(op)
        if isinstance(value, bool):
            return f"{at} = to_jsonb(%({param})s::boolean)" if op == "$eq" else None
        if value is None:
            return f"jsonb_typeof({at}) = 'null'" if op == "$eq" else None
        if sql_op is not None and isinstance(value, (int, float)):
            if isinstance(value, float) and value != value:  # NaN: let Python decide
                return None
            # through text: a float8 cast straight to numeric keeps only 15 digits, and
            # 0.22551938891410828 would no longer equal itself
            return f"{at} {sql_op} to_jsonb(CAST(CAST(%({param})s AS text) AS numeric))"
        if sql_op is not None and isinstance(value, str):
            return f'{text} COLLATE "C" {sql_op} %({param})s'
        return f"{at} IS NOT NULL"

    def json_path(self, path: list[str]) -> Any:
        return list(path)

    def fast_get_tuple(self, by_id: bool) -> Sql:
        """``get_tuple`` in one statement: the checkpoint row (tag 0); its blobs looked up by
        full primary key (a LATERAL ... LIMIT 1 per channel, so the planner cannot turn it
        into a scan of the thread's blobs), each followed down its chain of appended-list
        bases (tag 1); its writes (tag 2)."""

        def build() -> str:
            by = "AND checkpoint_id = %(checkpoint_id)s " if by_id else ""
            blob = (
                "JOIN LATERAL (SELECT channel, version, type, blob, base_version "
                "FROM am_checkpoint_blobs bb WHERE bb.thread_id = %(thread_id)s "
                "AND bb.checkpoint_ns = %(checkpoint_ns)s "
            )
            return (
                "WITH RECURSIVE c AS (SELECT thread_id, checkpoint_ns, checkpoint_id, "
                "parent_checkpoint_id, type, checkpoint, metadata, blob_versions "
                "FROM am_checkpoints WHERE thread_id = %(thread_id)s "
                f"AND checkpoint_ns = %(checkpoint_ns)s {by}"
                "AND NOT EXISTS (SELECT 1 FROM am_threads t WHERE t.thread_id = %(thread_id)s "
                "AND (t.deleted_at IS NOT NULL OR t.expires_at < %(live_after)s)) "
                "ORDER BY checkpoint_id DESC LIMIT 1), "
                "chain AS ("
                "SELECT b.channel, b.version, b.type, b.blob, b.base_version FROM c "
                "CROSS JOIN LATERAL jsonb_each_text(c.blob_versions::jsonb) AS v(key, value) "
                f"{blob}AND bb.channel = v.key AND bb.version = v.value LIMIT 1) b ON true "
                "UNION ALL "
                "SELECT b.channel, b.version, b.type, b.blob, b.base_version FROM chain "
                f"{blob}AND bb.channel = chain.channel AND bb.version = chain.base_version "
                "LIMIT 1) b ON true) "
                "SELECT 0, c.checkpoint_id::text, c.parent_checkpoint_id::text, c.type::text, "
                "c.checkpoint, c.metadata, c.blob_versions, NULL::integer FROM c "
                "UNION ALL "
                "SELECT 1, channel::text, version::text, type::text, blob, base_version::text, "
                "NULL, NULL FROM chain "
                "UNION ALL "
                "SELECT 2, w.task_id::text, w.channel::text, w.type::text, w.blob, "
                "w.task_path::text, NULL, w.idx "
                "FROM c JOIN am_checkpoint_writes w ON w.thread_id = c.thread_id "
                "AND w.checkpoint_ns = c.checkpoint_ns AND w.checkpoint_id = c.checkpoint_id"
            )

        return self.sql(("fast_get_tuple", by_id), build)

    def fast_write(
        self, kind: str, touch: bool, fixed: Mapping[str, Any], rows: Mapping[str, list[Any]]
    ) -> FastWrite | None:
        """One statement, hence one implicit transaction and one round trip, with no
        BEGIN/COMMIT: every insert is a data-modifying CTE conditioned on the thread being
        live. Rows come as a ``VALUES`` list of plain parameters (psycopg adapts an array
        parameter by inspecting its items on every call, which cost more than the insert),
        so there is a statement per row count; a write of more rows takes the generic path.
        """
        groups = ("b",) if kind == "put" else ("f", "r")
        counts = tuple(len(rows[g]) for g in groups)
        if sum(counts) > MAX_VALUES_ROWS:
            return None
        params = dict(fixed)
        for group in groups:
            for row, cells in zip(rows[group], _cell_names(kind, group), strict=False):
                for column, name in cells:
                    params[name] = row[column]

        def build() -> str:
            ctes = [
                "live AS (SELECT 1 AS ok WHERE NOT EXISTS (SELECT 1 FROM am_threads "
                "WHERE thread_id = %(thread_id)s AND (deleted_at IS NOT NULL "
                "OR expires_at < %(live_after)s OR ended_after >= %(named)s::text)))"
            ]
            if touch:
                ctes.append(
                    "touch AS (INSERT INTO am_threads (thread_id, last_active, ttl_seconds, "
                    "expires_at, deleted_at) SELECT %(thread_id)s, %(last_active)s, "
                    "%(ttl_seconds)s::integer, %(expires_at)s::double precision, NULL "
                    "FROM live ON CONFLICT (thread_id) DO UPDATE SET "
                    "last_active = EXCLUDED.last_active, ttl_seconds = EXCLUDED.ttl_seconds, "
                    "expires_at = EXCLUDED.expires_at)"
                )
            if kind == "put":
                if counts[0]:
                    ctes.append(
                        "blobs AS (INSERT INTO am_checkpoint_blobs (thread_id, checkpoint_ns, "
                        "channel, version, type, blob, base_version) SELECT %(thread_id)s, "
                        "%(checkpoint_ns)s, u.channel, u.version, u.type, u.blob, "
                        f"u.base_version FROM live, {_values(kind, 'b', counts[0])} "
                        "AS u(channel, version, type, blob, base_version) ON CONFLICT DO NOTHING)"
                    )
                ctes.append(
                    "cp AS (INSERT INTO am_checkpoints (thread_id, checkpoint_ns, checkpoint_id, "
                    "parent_checkpoint_id, run_id, type, checkpoint, metadata, blob_versions) "
                    "SELECT %(thread_id)s, %(checkpoint_ns)s, %(checkpoint_id)s, "
                    "%(parent_checkpoint_id)s, %(run_id)s, %(type)s, %(checkpoint)s, "
                    "%(metadata)s, %(blob_versions)s FROM live "
                    "ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id) DO UPDATE SET "
                    "parent_checkpoint_id = EXCLUDED.parent_checkpoint_id, "
                    "run_id = EXCLUDED.run_id, type = EXCLUDED.type, "
                    "checkpoint = EXCLUDED.checkpoint, metadata = EXCLUDED.metadata, "
                    "blob_versions = EXCLUDED.blob_versions)"
                )
            else:
                columns = (
                    "INSERT INTO am_checkpoint_writes (thread_id, checkpoint_ns, checkpoint_id, "
                    "task_id, idx, channel, type, blob, task_path) SELECT %(thread_id)s, "
                    "%(checkpoint_ns)s, %(checkpoint_id)s, %(task_id)s, u.idx, u.channel, "
                    "u.type, u.blob, %(task_path)s FROM live, "
                )
                if counts[0]:
                    ctes.append(
                        f"first AS ({columns}{_values(kind, 'f', counts[0])} "
                        "AS u(idx, channel, type, blob) ON CONFLICT DO NOTHING)"
                    )
                if counts[1]:
                    ctes.append(
                        f"special AS ({columns}{_values(kind, 'r', counts[1])} "
                        "AS u(idx, channel, type, blob) "
                        "ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx) "
                        "DO UPDATE SET channel = EXCLUDED.channel, type = EXCLUDED.type, "
                        "blob = EXCLUDED.blob, task_path = EXCLUDED.task_path)"
                    )
            return "WITH " + ", ".join(ctes) + " SELECT COUNT(*) FROM live"

        key = ("fast_write", kind, touch, counts)
        return FastWrite(self.sql(key, build), params, fetch=True)


#: Rows one fast write sends as plain parameters; more take the generic statements.
MAX_VALUES_ROWS = 64
#: The row keys a fast write's rows carry, in order, with their SQL types.
_ROW_COLUMNS: dict[str, list[tuple[str, str]]] = {
    "put": [
        ("channel", "text"),
        ("version", "text"),
        ("type", "text"),
        ("blob", "bytea"),
        ("base_version", "text"),
    ],
    "writes": [("idx", "integer"), ("channel", "text"), ("type", "text"), ("blob", "bytea")],
}


@functools.cache
def _cell_names(kind: str, group: str) -> tuple[tuple[tuple[str, str], ...], ...]:
    """Per row of a fast write, each column with the parameter that carries it."""
    return tuple(
        tuple((column, f"{group}{i}_{column}") for column, _ in _ROW_COLUMNS[kind])
        for i in range(MAX_VALUES_ROWS)
    )


def _values(kind: str, group: str, count: int) -> str:
    """``(VALUES (...), ...)`` over ``count`` rows of ``group``'s parameters; the first row
    carries the types, and blobs travel in binary."""
    rows = []
    for i in range(count):
        cells = []
        for column, sql_type in _ROW_COLUMNS[kind]:
            marker = "b" if sql_type == "bytea" else "s"
            cast = f"::{sql_type}" if i == 0 else ""
            cells.append(f"%({group}{i}_{column}){marker}{cast}")
        rows.append("(" + ", ".join(cells) + ")")
    return "(VALUES " + ", ".join(rows) + ")"
