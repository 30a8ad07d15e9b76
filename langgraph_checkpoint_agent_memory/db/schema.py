"""The tables, declared once for every dialect.

Checkpoints keep LangGraph's split (a row per checkpoint, per channel version, per pending
write); a list that only grew is stored as its appended items plus ``base_version``.
``threads`` holds the TTL's activity clock and the tombstones that stop late writes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeAlias

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB

metadata = sa.MetaData()

ID = sa.String(255)
NS = sa.String(255)
VERSION = sa.String(128)
PREFIX = sa.String(1024)
TIME = sa.Float(53)  # seconds since the epoch

#: The longest TTL in seconds (about 68 years): the 32-bit ``ttl_seconds`` column's largest.
MAX_TTL_SECONDS = 2**31 - 1

ColumnType: TypeAlias = "sa.types.TypeEngine[Any] | type[sa.types.TypeEngine[Any]]"


def written(table: sa.Table) -> list[sa.Column[Any]]:
    """The columns an insert names: all but those marked ``info={"unwritten": True}``."""
    return [c for c in table.columns if not c.info.get("unwritten")]


def matching(t: Any, *names: str) -> list[Any]:
    """Core: each column ``names`` of ``t`` equals the parameter of its name."""
    return [t.c[n] == sa.bindparam(n) for n in names]


def rows_named(t: Any, n: int, names: Sequence[tuple[str, str]]) -> Any:
    """Core: ``t``'s row is one of ``n`` named by ``(column, prefix)``: ``:<prefix><j>``."""
    return sa.or_(
        *(
            sa.and_(*(t.c[column] == sa.bindparam(f"{prefix}{j}") for column, prefix in names))
            for j in range(n)
        )
    )


def _required(name: str, type_: ColumnType) -> sa.Column[Any]:
    return sa.Column(name, type_, nullable=False)


def _shard(*extra: sa.Column[Any]) -> tuple[sa.Column[Any], ...]:
    """The shard key (see :mod:`.shard`), then ``extra`` key columns."""
    return (sa.Column("shard", PREFIX, primary_key=True), *extra)


def _sharded(name: str, *items: Any, **options: Any) -> sa.Table:
    """A table distributed by its shard key on Citus."""
    return sa.Table(name, metadata, *items, info={"shard_key": "shard"}, **options)


def _item_key(*extra: sa.Column[Any]) -> tuple[sa.Column[Any], ...]:
    """The primary key of a row of one store item, then ``extra`` key columns."""
    prefix = sa.Column("prefix", PREFIX, primary_key=True)
    key = sa.Column("key", sa.String(1024), primary_key=True)
    return _shard(prefix, key, *extra)


def _thread_key(*extra: sa.Column[Any]) -> tuple[sa.Column[Any], ...]:
    """The primary key of a row of one thread's namespace, then ``extra`` key columns."""
    thread_id = sa.Column("thread_id", ID, primary_key=True)
    checkpoint_ns = sa.Column("checkpoint_ns", NS, primary_key=True)
    return (thread_id, checkpoint_ns, *extra)


def _checkpoint_id() -> sa.Column[Any]:
    return sa.Column("checkpoint_id", sa.String(64), primary_key=True)


checkpoints = sa.Table(
    "am_checkpoints",
    metadata,
    *_thread_key(_checkpoint_id()),
    sa.Column("parent_checkpoint_id", sa.String(64)),
    sa.Column("run_id", sa.String(255)),
    _required("type", sa.String(32)),
    _required("checkpoint", sa.LargeBinary),
    _required("metadata", sa.Text),
    # {channel: version} of the channels whose value lives in checkpoint_blobs
    _required("blob_versions", sa.Text),
    sa.Index("am_checkpoints_run_id", "run_id"),
)

blobs = sa.Table(
    "am_checkpoint_blobs",
    metadata,
    *_thread_key(
        sa.Column("channel", sa.String(255), primary_key=True),
        sa.Column("version", VERSION, primary_key=True),
    ),
    _required("type", sa.String(32)),
    sa.Column("blob", sa.LargeBinary),
    # set when ``blob`` holds only the items appended to the list at ``base_version``
    sa.Column("base_version", VERSION),
)

writes = sa.Table(
    "am_checkpoint_writes",
    metadata,
    *_thread_key(
        _checkpoint_id(),
        sa.Column("task_id", sa.String(255), primary_key=True),
        sa.Column("idx", sa.Integer, primary_key=True, autoincrement=False),
    ),
    _required("channel", sa.String(255)),
    _required("type", sa.String(32)),
    sa.Column("blob", sa.LargeBinary),
    _required("task_path", sa.String(1024)),
)

threads = sa.Table(
    "am_threads",
    metadata,
    sa.Column("thread_id", ID, primary_key=True),
    sa.Column("last_active", sa.Float(53), nullable=False),  # seconds since the epoch
    sa.Column("ttl_seconds", sa.Integer),  # NULL: never expires
    sa.Column("expires_at", sa.Float(53)),  # last_active + ttl_seconds
    sa.Column("deleted_at", sa.Float(53)),  # set: a tombstone
    # a tombstone's newest checkpoint id: a write naming one at or below it is late, above new
    sa.Column("ended_after", sa.String(64)),
    sa.Index("am_threads_expires_at", "expires_at"),
    sa.Index("am_threads_deleted_at", "deleted_at"),
)

migrations = sa.Table(
    "am_migrations",
    metadata,
    sa.Column("version", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("description", sa.String(255), nullable=False),
    sa.Column("applied_at", sa.Float(53), nullable=False),
)

CHECKPOINT_TABLES = (checkpoints, blobs, writes, threads)

for _table in CHECKPOINT_TABLES:
    _table.info["shard_key"] = "thread_id"
migrations.info["reference"] = True

store_items = _sharded(
    "am_store_items",
    *_item_key(),
    # JSON; JSONB on PostgreSQL, so filters read it without re-parsing every row
    _required("value", sa.Text().with_variant(JSONB(), "postgresql")),
    _required("created_at", TIME),
    _required("updated_at", TIME),
    sa.Column("ttl_minutes", TIME),
    sa.Column("expires_at", TIME),
    # the term index (``store.index``): the item's number in the term lists (kept when it is
    # rewritten), its length in terms, and its terms as a retraction needs them (the lists
    # that hold the item, or will: until a merge lists them, ``am_store_unlisted`` has them)
    sa.Column("num", sa.BigInteger, info={"numbered": True}),
    sa.Column("doc_len", sa.Integer),
    sa.Column("terms", sa.LargeBinary),
    # encrypted at rest: the sealed value (``value`` then holds ``{}``)
    sa.Column("sealed", sa.LargeBinary, info={"optional": True}),
    sa.Index("am_store_items_updated_at", "prefix", "updated_at"),
    # a filtered newest-first listing walks it and stops at the first page of matches
    sa.Index("am_store_items_recent", "updated_at"),
    sa.Index("am_store_items_expires_at", "expires_at"),
    # the number first: SQLite's next number is its largest, a candidate read names it
    sa.Index("am_store_items_num", "num", "shard"),
)

# The terms of items a merge has yet to list (``db.term_index``), which every query of their
# namespace reads, a row per item until the merge deletes it: the item's own row is written
# once, in its final form (a merge that marked it would leave a dead version of every item
# on PostgreSQL, and the space of one after ``VACUUM``).
store_unlisted = _sharded(
    "am_store_unlisted",
    *_item_key(),
    # the item's number and length, as its row has them: a query reads no item row for them
    _required("num", sa.BigInteger),
    sa.Column("doc_len", sa.Integer),
    _required("terms", sa.LargeBinary),
    sqlite_with_rowid=False,
)

store_vectors = _sharded(
    "am_store_vectors",
    *_item_key(sa.Column("field", sa.String(512), primary_key=True)),
    _required("vector", sa.LargeBinary),  # float32, little-endian
)


# The term lists of one namespace: a row holds one term's entries (item number, tf, dl) from
# item ``start`` on, packed (``db.term_index``); the term is a 64-bit hash in two halves. The
# namespace is its shard key and ``rest``, its labels after the shard key ("" for none).
store_chunks = _sharded(
    "am_store_chunks",
    _required("shard", PREFIX),
    _required("hi", sa.Integer),
    _required("lo", sa.BigInteger),
    _required("rest", PREFIX),
    _required("start", sa.BigInteger),
    _required("payload", sa.LargeBinary),
    # the term before the namespace: a query under a prefix finds its terms' chunks at once
    sa.PrimaryKeyConstraint("shard", "hi", "lo", "rest", "start"),
    sqlite_with_rowid=False,
)

# Items rewritten or deleted since their terms were listed: ``terms`` names the lists that
# still hold ``num`` until the next merge takes it out of them.
store_retractions = _sharded(
    "am_store_retractions",
    *_shard(
        sa.Column("prefix", PREFIX, primary_key=True),
        sa.Column("num", sa.BigInteger, primary_key=True, autoincrement=False),
    ),
    _required("terms", sa.LargeBinary),
)

# Encryption at rest: the keyed hashes of an item's filterable fields, which SQL tests.
store_tags = _sharded(
    "am_store_tags",
    *_item_key(sa.Column("tag", sa.String(64), primary_key=True)),
    # the items holding a tag, at once: a filter under an OR (a tag, or none of the field's)
    # is planned as the set of the tag's items, which without it was a scan of every tag
    # (12 ms of a filtered search's 18 at 100,000 items on PostgreSQL)
    sa.Index("am_store_tags_tag", "tag", "shard", "prefix", "key"),
    sqlite_with_rowid=False,
)

#: Tables holding an item's rows: deletes go through all of them, the item's terms to list
#: after the item (a delete of many deletes those whose item is gone: a write committing
#: meanwhile leaves none behind, see :meth:`.StoreStatements.delete_under`).
STORE_ROW_TABLES = ("am_store_vectors", "am_store_tags", "am_store_items", "am_store_unlisted")

#: Tables of rows under a namespace: the items before the retractions and lists, so a delete
#: waits for a merge that holds its items and then removes what the merge wrote.
STORE_NS_TABLES = (*STORE_ROW_TABLES, "am_store_retractions", "am_store_chunks")

STORE_TABLES = (
    store_items,
    store_vectors,
    store_tags,
    store_unlisted,
    store_retractions,
    store_chunks,
)

SCOPE = sa.String(1024)


def _scope_key(*extra: sa.Column[Any]) -> tuple[sa.Column[Any], ...]:
    """The primary key of a row of one memory scope, then ``extra`` key columns."""
    return _shard(sa.Column("scope", SCOPE, primary_key=True), *extra)


memory_scopes = _sharded(
    "am_memory_scopes",
    *_scope_key(),
    _required("root", sa.String(255)),  # the namespace root, e.g. memory
    sa.Column("lease_owner", sa.String(64)),  # the job holding the scope, while it runs
    sa.Column("lease_until", TIME),
    _required("failures", sa.Integer),  # consecutive failed jobs
    sa.Column("next_attempt_at", TIME),  # back-off after a failure
    sa.Column("last_error", sa.Text),
    _required("created_at", TIME),
)

memory_pending = _sharded(
    "am_memory_pending",
    *_scope_key(sa.Column("episode_key", sa.String(255), primary_key=True)),
    _required("recorded_at", TIME),
    _required("status", sa.String(16)),  # pending | parked
    sa.Index("am_memory_pending_status", "status", "scope"),
)

memory_jobs = _sharded(
    "am_memory_jobs",
    *_shard(sa.Column("job_id", sa.String(255), primary_key=True)),
    _required("scope", SCOPE),
    _required("episodes", sa.Text),  # JSON list of episode keys
    _required("extractor_version", sa.String(255)),
    _required("status", sa.String(16)),  # completed | failed
    _required("attempt", sa.Integer),
    sa.Column("error", sa.Text),
    _required("started_at", TIME),
    _required("finished_at", TIME),
    sa.Column("outcome", sa.Text),  # JSON: what the job changed
    sa.Index("am_memory_jobs_scope", "scope"),
    sa.Index("am_memory_jobs_status", "status", "finished_at"),
)

memory_decay = _sharded(
    "am_memory_decay",
    *_item_key(),
    _required("scope", SCOPE),
    # ln(importance): decay is then arithmetic every database has (no POWER, no LN needed)
    _required("log_importance", sa.Float(53)),
    _required("reinforced_at", TIME),  # last confirmed or recalled
    _required("pinned", sa.Integer),
    sa.Index("am_memory_decay_scope", "scope"),
)

memory_threads = _sharded(
    "am_memory_threads",
    *_scope_key(sa.Column("thread_id", sa.String(255), primary_key=True)),
    _required("seen_at", TIME),
)

MEMORY_TABLES = (memory_scopes, memory_pending, memory_jobs, memory_decay, memory_threads)

#: The erase ledger: data keys to destroy, written with the deletes (no ``thread_id``: a shard's).
memory_erasures = _sharded(
    "am_memory_erasures",
    *_shard(sa.Column("thread_id", sa.String(255), primary_key=True)),
    _required("erased_at", TIME),
)

#: Settings recorded at the first setup that later processes must share (``shard_depth``).
settings = sa.Table(
    "am_settings",
    metadata,
    sa.Column("name", sa.String(64), primary_key=True),
    _required("value", sa.String(255)),
    info={"reference": True},
)

#: Encryption at rest's wrapped data keys, one per owner; ``key_id`` is random and never reused.
data_keys = sa.Table(
    "am_keys",
    metadata,
    sa.Column("key_id", sa.String(16), primary_key=True),
    _required("owner", sa.String(1100)),
    _required("wrapped", sa.LargeBinary),
    _required("created_at", TIME),
    sa.Index("am_keys_owner", "owner", unique=True),
    info={"reference": True},
)

#: The aliases the store's joined statements name their tables by.
vectors_v = store_vectors.alias("v")
items_i = store_items.alias("i")
