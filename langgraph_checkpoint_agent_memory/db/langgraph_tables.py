"""LangGraph's own tables, as the import reads them read-only, and what the import compares
and stamps on ours. Checkpoints are read through LangGraph's saver; SQL reads only what no
public API gives: thread ids, per-thread shapes, writes' ``task_path``, items' TTLs.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import partial
from typing import Any, NamedTuple
from urllib.parse import quote

import sqlalchemy as sa

from langgraph_checkpoint_agent_memory.db import url as urls
from langgraph_checkpoint_agent_memory.db.database import Batch, Plan, Stmt, first_line
from langgraph_checkpoint_agent_memory.db.dialect import Dialect
from langgraph_checkpoint_agent_memory.db.marks import read_setting, record_setting
from langgraph_checkpoint_agent_memory.db.schema import checkpoints, settings, store_items, writes
from langgraph_checkpoint_agent_memory.errors import (
    ConfigurationError,
    DatabaseNotFoundError,
    DatabaseUnavailableError,
    require,
)

B = sa.bindparam

PAGE = 500


class SourceItem(NamedTuple):
    """A live item of LangGraph's ``store`` table (times in seconds since the epoch)."""

    namespace: tuple[str, ...]
    key: str
    value: dict[str, Any]
    created_at: float
    updated_at: float
    expires_at: float | None
    ttl_minutes: float | None


#: ``(checkpoint_ns, checkpoint_id) -> number of pending writes`` of one thread.
ThreadShape = dict[tuple[str, str], int]


_KEY = ("thread_id", "checkpoint_ns", "checkpoint_id")
_WRITE = (*_KEY, "task_id", "idx", "channel", "type")
_STORE = ("prefix", "key", "value", "created_at", "updated_at", "expires_at", "ttl_minutes")
_COLUMNS = {
    "sqlite": {
        "checkpoints": (*_KEY, "parent_checkpoint_id", "type", "checkpoint", "metadata"),
        "writes": (*_WRITE, "value"),
        "store": _STORE,
    },
    "postgresql": {
        "checkpoints": (*_KEY, "parent_checkpoint_id", "checkpoint", "metadata"),
        "checkpoint_blobs": ("thread_id", "checkpoint_ns", "channel", "version", "type", "blob"),
        "checkpoint_writes": (*_WRITE, "blob"),
        "store": _STORE,
    },
}


def seconds(value: Any) -> float | None:
    """A timestamp of LangGraph's tables (``datetime`` or ISO text, default UTC) in seconds."""
    if value is None:
        return None
    when = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.timestamp()


@dataclass
class Source:
    """A read-only connection to a database that LangGraph's savers and stores wrote."""

    kind: str  # "sqlite" | "postgresql"
    connection: Any
    where: str

    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        if self.kind == "sqlite":
            return list(self.connection.execute(sql, tuple(params)).fetchall())
        from psycopg.rows import tuple_row

        with self.reading(), self.connection.cursor(row_factory=tuple_row) as cur:
            cur.execute(sql.replace("?", "%s"), tuple(params))
            return list(cur.fetchall())

    def tables(self) -> set[str]:
        """The names of the tables of LangGraph's schema that the source holds."""
        if self.kind == "sqlite":
            sql = "SELECT name FROM sqlite_master WHERE type = 'table'"
        else:
            sql = (
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_schema = ANY(current_schemas(false))"
            )
        return {name for (name,) in self._rows(sql)}

    @property
    def writes_table(self) -> str:
        return "writes" if self.kind == "sqlite" else "checkpoint_writes"

    def _columns(self, table: str) -> set[str]:
        if self.kind == "sqlite":
            return {row[1] for row in self._rows(f"PRAGMA table_info({table})")}
        sql = (
            "SELECT column_name FROM information_schema.columns WHERE table_name = ? "
            "AND table_schema = ANY(current_schemas(false))"
        )
        return {name for (name,) in self._rows(sql, (table,))}

    def check(self, tables: set[str]) -> None:
        """Refuse a source whose ``tables`` lack a column the import reads (another's table)."""
        for table in sorted(tables):
            lacking = sorted(set(_COLUMNS[self.kind][table]) - self._columns(table))
            if lacking:
                raise ConfigurationError(
                    f"{self.where}: its {table} table is not LangGraph's (it lacks "
                    f"{', '.join(lacking)}): give the database LangGraph's savers wrote"
                )

    def value_types(self) -> set[str]:
        """The serialization types of the stored checkpoints, channel values and writes
        (``msgpack``, ``json``...; ``msgpack+aes`` for LangGraph's ``EncryptedSerializer``)."""
        blobs = "checkpoints" if self.kind == "sqlite" else "checkpoint_blobs"
        return {
            str(found)
            for table in (blobs, self.writes_table)
            for (found,) in self._rows(f"SELECT DISTINCT type FROM {table}")
            if found is not None
        }

    def sqlite_state(self) -> tuple[bool, bool]:
        """Whether the SQLite file is in WAL mode, and whether its ``writes`` table has
        ``task_path`` (what ``SqliteSaver`` sets up, which a read-only connection refuses)."""
        [(mode,)] = self._rows("PRAGMA journal_mode")
        return str(mode).lower() == "wal", "task_path" in self._columns("writes")

    def count(self, what: str) -> int:
        """How many threads (``"threads"``) or live store items (``"items"``) there are."""
        if what == "threads":
            [(n,)] = self._rows("SELECT count(DISTINCT thread_id) FROM checkpoints")
        else:
            [(n,)] = self._rows(
                "SELECT count(*) FROM store WHERE expires_at IS NULL OR expires_at > ?",
                (self._now_param(),),
            )
        return int(n)

    def thread_ids(self) -> Iterator[str]:
        """Every thread id, in order, a page at a time."""
        after = ""
        while True:
            page = self._rows(
                "SELECT DISTINCT thread_id FROM checkpoints WHERE thread_id > ? "
                f"ORDER BY thread_id LIMIT {PAGE}",
                (after,),
            )
            if not page:
                return
            yield from (thread_id for (thread_id,) in page)
            after = page[-1][0]

    def shape(self, thread_id: str) -> ThreadShape:
        """The thread's checkpoints with their numbers of writes."""
        rows = self._rows(
            "SELECT c.checkpoint_ns, c.checkpoint_id, count(w.task_id) FROM checkpoints c "
            f"LEFT JOIN {self.writes_table} w ON w.thread_id = c.thread_id "
            "AND w.checkpoint_ns = c.checkpoint_ns AND w.checkpoint_id = c.checkpoint_id "
            "WHERE c.thread_id = ? GROUP BY c.checkpoint_ns, c.checkpoint_id",
            (thread_id,),
        )
        return {(ns, cid): int(n) for ns, cid, n in rows}

    def with_special_writes(self, thread_id: str, channels: Sequence[str]) -> set[tuple[str, str]]:
        """The thread's checkpoints with writes to ``channels`` (errors, interrupts, resumes)."""
        rows = self._rows(
            f"SELECT DISTINCT checkpoint_ns, checkpoint_id FROM {self.writes_table} "
            f"WHERE thread_id = ? AND channel IN ({', '.join('?' for _ in channels)})",
            (thread_id, *channels),
        )
        return {(ns, cid) for ns, cid in rows}

    def task_paths(self, thread_id: str) -> dict[tuple[str, str, str], str]:
        """``(checkpoint_ns, checkpoint_id, task_id) -> task_path`` (empty: no such column)."""
        if "task_path" not in self._columns(self.writes_table):
            return {}
        rows = self._rows(
            "SELECT DISTINCT checkpoint_ns, checkpoint_id, task_id, task_path "
            f"FROM {self.writes_table} WHERE thread_id = ?",
            (thread_id,),
        )
        return {(ns, cid, task): path or "" for ns, cid, task, path in rows}

    def items(self, now: float) -> Iterator[list[SourceItem]]:
        """The live items of the store, in (namespace, key) order, a page at a time."""
        after: tuple[str, str] = ("", "")
        while True:
            page = self._rows(
                "SELECT prefix, key, value, created_at, updated_at, expires_at, ttl_minutes "
                "FROM store WHERE (prefix > ? OR (prefix = ? AND key > ?)) "
                "AND (expires_at IS NULL OR expires_at > ?) "
                f"ORDER BY prefix, key LIMIT {PAGE}",
                (after[0], after[0], after[1], self._now_param(now)),
            )
            if not page:
                return
            yield [_item(row) for row in page]
            after = (page[-1][0], page[-1][1])

    def clock(self) -> float:
        """The source's time now (a SQLite file's is this machine's clock)."""
        if self.kind == "sqlite":
            return datetime.now(timezone.utc).timestamp()
        [(now,)] = self._rows("SELECT now()")
        return seconds(now) or 0.0

    def _now_param(self, now: float | None = None) -> Any:
        utc = timezone.utc
        when = datetime.now(utc) if now is None else datetime.fromtimestamp(now, utc)
        # SQLite compares the text LangGraph stored: ISO with a space, as its adapter wrote
        return when.isoformat(sep=" ") if self.kind == "sqlite" else when

    @contextmanager
    def reading(self) -> Iterator[None]:
        """Read inside, then end PostgreSQL's read-only transaction (a pooler gets it back)."""
        try:
            yield
        finally:
            if self.kind == "postgresql":
                self.connection.rollback()

    def close(self) -> None:
        self.connection.close()


def _item(row: tuple[Any, ...]) -> SourceItem:
    prefix, key, value, created, updated, expires, ttl = row
    if not isinstance(value, dict):
        value = json.loads(value)
    return SourceItem(
        tuple(prefix.split(".")),
        key,
        value,
        seconds(created) or 0.0,
        seconds(updated) or 0.0,
        seconds(expires),
        None if ttl is None else float(ttl),
    )


def open_source(url: str) -> Source:
    """Open the database at ``url`` (a SQLite file or PostgreSQL) read-only."""
    target = urls.parse(url, "--from")
    where = target.masked()
    if target.kind == "sqlite":
        path = target.options["path"]
        try:
            conn = sqlite3.connect(f"file:{quote(path)}?mode=ro", uri=True, check_same_thread=False)
            conn.execute("SELECT 1 FROM sqlite_master LIMIT 1")
        except sqlite3.Error as exc:
            raise DatabaseNotFoundError(f"cannot open {where}: {first_line(exc)}") from None
        return Source("sqlite", conn, where)
    if target.kind != "postgresql":
        raise ConfigurationError(
            f"LangGraph's savers and stores live on SQLite or PostgreSQL, not {target.kind}"
        )
    psycopg = require("psycopg", "postgres", "reading LangGraph's PostgreSQL tables needs psycopg")
    from psycopg.rows import dict_row

    conninfo, threshold = urls.take_prepare_threshold(target.url)
    options: dict[str, Any] = {"prepare_threshold": 0}
    if threshold is not None:
        from langgraph_checkpoint_agent_memory.db.postgres import prepare_threshold_of

        options["prepare_threshold"] = prepare_threshold_of(threshold)
    try:
        # dict rows, as LangGraph's PostgresSaver reads them
        conn = psycopg.connect(conninfo, row_factory=dict_row, **options)
    except psycopg.OperationalError as exc:
        raise DatabaseUnavailableError(f"cannot connect to {where}: {first_line(exc)}") from None
    # every statement in a transaction begun READ ONLY (a startup option PgBouncer refuses)
    conn.read_only = True
    return Source("postgresql", conn, where)


def thread_shape_plan(d: Dialect, thread_id: str) -> Plan[ThreadShape]:
    """Our checkpoints of ``thread_id`` with their numbers of writes (as :meth:`Source.shape`)."""

    def build() -> Any:
        c, w = checkpoints.alias("c"), writes.alias("w")
        joined = c.outerjoin(w, sa.and_(*(w.c[n] == c.c[n] for n in _KEY)))
        return (
            sa.select(c.c.checkpoint_ns, c.c.checkpoint_id, sa.func.count(w.c.task_id))
            .select_from(joined)
            .where(c.c.thread_id == B("thread_id"))
            .group_by(c.c.checkpoint_ns, c.c.checkpoint_id)
        )

    sql = d.sql("import_thread_shape", build)
    [rows] = yield Batch([Stmt(sql, {"thread_id": thread_id}, fetch=True)])
    return {(ns, cid): int(n) for ns, cid, n in rows}


def stamp_items_plan(d: Dialect, rows: list[dict[str, Any]]) -> Plan[None]:
    """Set the times of items the import put to the source's (``expires_at`` where they had a
    TTL there; else the destination's default TTL from the put stays)."""

    def build(expiry: bool) -> Any:
        t = store_items
        times = ("created_at", "updated_at", "expires_at")[: 3 if expiry else 2]
        return (
            sa.update(t)
            .where(t.c.shard == B("b_shard"), t.c.prefix == B("b_prefix"), t.c.key == B("b_key"))
            .values({n: B(n) for n in times})
        )

    statements = []
    for expiry in (True, False):
        params = [
            {("b_" + k if k in ("shard", "prefix", "key") else k): v for k, v in r.items()}
            for r in rows
            if (r.get("expires_at") is not None) == expiry
        ]
        if params:
            sql = d.sql(("import_stamp_items", expiry), partial(build, expiry))
            statements.append(Stmt(sql, params, many=True))
    if statements:
        yield Batch(statements, write=True)


def read_mark_plan(d: Dialect, name: str) -> Plan[float | None]:
    """The time recorded under ``name`` in ``am_settings`` (``None``: none)."""
    [rows] = yield Batch([Stmt(read_setting(d), {"b_name": name}, fetch=True)])
    return float(rows[0][0]) if rows else None


def record_mark_plan(d: Dialect, name: str, value: float) -> Plan[None]:
    """Record the time ``value`` under ``name`` in ``am_settings``, in place of the last."""
    delete = d.sql(
        "import_forget_mark", lambda: sa.delete(settings).where(settings.c.name == B("b_name"))
    )
    yield Batch(
        [
            Stmt(delete, {"b_name": name}),
            Stmt(record_setting(d), {"b_name": name, "b_value": repr(value)}),
        ],
        write=True,
    )
