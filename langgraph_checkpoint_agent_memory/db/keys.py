"""The key store's plans over ``am_keys``, the wrapped data keys."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple, TypeVar

import sqlalchemy as sa

from langgraph_checkpoint_agent_memory.db.database import Batch, Plan, Stmt, carry_plan
from langgraph_checkpoint_agent_memory.db.dialect import Dialect, Sql, values_params
from langgraph_checkpoint_agent_memory.db.schema import data_keys

T = TypeVar("T")


class KeyRow(NamedTuple):
    """A stored data key, still wrapped."""

    key_id: str
    owner: str
    wrapped: bytes
    created_at: float


_COLUMNS = tuple(data_keys.c[n] for n in KeyRow._fields)


def _row(raw: Sequence[Any]) -> KeyRow:
    key_id, owner, wrapped, created_at = raw
    return KeyRow(str(key_id), str(owner), bytes(wrapped), float(created_at))


def _find(dialect: Dialect, value: str, column: str = "owner") -> Stmt:
    """Read the key whose ``column`` is ``value``."""
    sql = dialect.sql(
        ("key_by", column),
        lambda: sa.select(*_COLUMNS).where(data_keys.c[column] == sa.bindparam(f"b_{column}")),
    )
    return Stmt(sql, {f"b_{column}": value}, fetch=True)


def _insert(dialect: Dialect) -> Sql:
    return dialect.sql("key_insert", lambda: dialect.insert_row_ignore(data_keys, ["owner"]))


def by_owner_plan(dialect: Dialect, owner: str) -> Plan[KeyRow | None]:
    """The key of ``owner``, or ``None``."""
    [rows] = yield Batch([_find(dialect, owner)])
    return _row(rows[0]) if rows else None


def held_plan(dialect: Dialect, owners: Sequence[str]) -> Plan[list[str]]:
    """Those of ``owners`` that have a key here, in one round trip."""
    if not owners:
        return []
    found = yield Batch([_find(dialect, o) for o in owners])
    return [o for o, rows in zip(owners, found, strict=True) if rows]


def by_id_plan(dialect: Dialect, key_id: str) -> Plan[KeyRow | None]:
    """The key named ``key_id``, or ``None`` (never made here, or destroyed)."""
    [rows] = yield Batch([_find(dialect, key_id, "key_id")])
    return _row(rows[0]) if rows else None


def create_plan(dialect: Dialect, row: KeyRow) -> Plan[KeyRow]:
    """Store ``row`` unless its owner has a key already; the owner's key (a race's winner's)."""
    # one round trip: the insert, then the owner's key as the same transaction sees it
    insert = Stmt(_insert(dialect), row._asdict())
    _, rows = yield Batch([insert, _find(dialect, row.owner)], write=True)
    if not rows:  # pragma: no cover - the insert or the key it lost to is there
        raise LookupError(f"the data key of {row.owner!r} was destroyed while being created")
    return _row(rows[0])


class KeyTaken(Exception):
    """The insert a write carried lost to another key of the same owner; nothing of that
    write was committed (the keyring loads the winner's key and writes again)."""

    def __init__(self, owner: str) -> None:
        self.owner = owner
        super().__init__(f"the data key of {owner!r} was created meanwhile")


#: The unique index a carried insert may lose to (the owner's key).
_OWNER_INDEX = next(i for i in data_keys.indexes if i.name == "am_keys_owner")


def carries(dialect: Dialect) -> bool:
    """Whether a new key can travel in the first write sealed with it: the database tells
    a lost race from other failures, and is not Citus (the key table is replicated)."""
    return dialect.tells_unique_violations and not dialect.distributed


def carrying_plan(dialect: Dialect, row: KeyRow, plan: Plan[T]) -> Plan[tuple[bool, T]]:
    """Run ``plan`` (a write sealed with ``row``'s key) with the key's insert carried
    (:func:`.database.carry_plan`): nothing sealed with it commits without it. Returns whether
    the key was stored and the plan's value; :class:`KeyTaken` if the owner has one already."""
    strict = dialect.sql(
        "key_insert_strict",
        lambda: sa.insert(data_keys).values(values_params(data_keys, KeyRow._fields)),
    )
    head = Stmt(strict, row._asdict())

    def lost(exc: Exception) -> Exception | None:
        return KeyTaken(row.owner) if dialect.unique_violation(exc, _OWNER_INDEX) else None

    return (yield from carry_plan(head, plan, lost))


def destroy_plan(dialect: Dialect, owners: Sequence[str]) -> Plan[list[KeyRow]]:
    """Delete the keys of ``owners`` in one transaction; the keys deleted."""
    if not owners:
        return []
    of_owner = data_keys.c.owner == sa.bindparam("b_owner")
    delete = dialect.sql("key_delete", lambda: sa.delete(data_keys).where(of_owner))
    statements = []
    for owner in owners:
        statements += [_find(dialect, owner), Stmt(delete, {"b_owner": owner})]
    results = yield Batch(statements, write=True)
    return [_row(r) for rows in results[::2] for r in rows]


def copy_plan(dialect: Dialect, rows: Sequence[KeyRow]) -> Plan[list[KeyRow]]:
    """Store ``rows`` (wrapped) in one round trip, each unless its owner has a key; the keys now."""
    if not rows:
        return []
    insert = Stmt(_insert(dialect), [row._asdict() for row in rows], many=True)
    found = yield Batch([insert, *[_find(dialect, r.owner) for r in rows]], write=True)
    return [_row(stored[0]) for stored in found[1:]]


def count_plan(dialect: Dialect) -> Plan[int]:
    """How many data keys the key table holds."""
    sql = dialect.sql("key_count", lambda: sa.select(sa.func.count()).select_from(data_keys))
    [[(n,)]] = yield Batch([Stmt(sql, fetch=True)])
    return int(n)


def page_plan(dialect: Dialect, after: str, limit: int) -> Plan[list[KeyRow]]:
    """Up to ``limit`` keys whose id sorts after ``after``, in id order (for rotation)."""
    sql = dialect.sql(
        "key_page",
        lambda: (
            sa.select(*_COLUMNS)
            .where(data_keys.c.key_id > sa.bindparam("b_after"))
            .order_by(data_keys.c.key_id)
            .limit(sa.bindparam("b_limit", type_=sa.Integer))
        ),
    )
    [rows] = yield Batch([Stmt(sql, {"b_after": after, "b_limit": limit}, fetch=True)])
    return [_row(r) for r in rows]


def rewrap_plan(dialect: Dialect, rows: Sequence[tuple[str, bytes]]) -> Plan[int]:
    """Replace the wrapped form of each ``(key_id, wrapped)``; how many keys changed."""
    if not rows:
        return 0
    sql = dialect.sql(
        "key_rewrap",
        lambda: (
            sa.update(data_keys)
            .where(data_keys.c.key_id == sa.bindparam("b_key_id"))
            .values(wrapped=sa.bindparam("b_wrapped"))
        ),
    )
    params = [{"b_key_id": k, "b_wrapped": w} for k, w in rows]
    [count] = yield Batch([Stmt(sql, params, many=True)], write=True)
    return int(count) if isinstance(count, int) and count >= 0 else len(rows)
