"""Plans and the drivers that run them: every database operation is written once, as a
generator that yields :class:`Batch` objects and receives their results, with no I/O, so
one plan runs sync (:meth:`Database.run`) or async (:meth:`Database.arun`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Generator, Sequence
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

from langgraph_checkpoint_agent_memory.db.dialect import Dialect, Sql

T = TypeVar("T")
ConnT = TypeVar("ConnT")


@dataclass(frozen=True)
class Stmt:
    """One statement: SQL, parameters (a sequence of mappings with ``many``), whether rows come
    back; ``prepare=False``: never prepared (PostgreSQL), as its generic plan is far worse."""

    sql: Sql
    params: Any = None
    many: bool = False
    fetch: bool = False
    prepare: bool = True


@dataclass(frozen=True)
class Batch:
    """Statements sent together; ``write``: in one transaction; ``lock``: write lock first (SQLite
    ``BEGIN IMMEDIATE``); ``hold``: keep it open for the next batch; ``rollback``: roll it back."""

    statements: Sequence[Stmt]
    write: bool = False
    lock: bool = False
    hold: bool = False
    rollback: bool = False


#: A plan yields batches, gets per statement its rows (``fetch``) or row count, returns a value.
Plan = Generator[Batch, list[Any], T]


def carry_plan(
    head: Stmt, plan: Plan[T], lost: Callable[[Exception], Exception | None] | None = None
) -> Plan[tuple[bool, T]]:
    """Run ``plan`` with ``head`` (its result kept from ``plan``) at the start of each transaction
    that may write until one commits, so ``head`` commits with the plan's first write or not at
    all; ``lost`` maps such a transaction's failure to the error to raise (``None``: pass it to
    ``plan``). Returns whether a transaction carrying ``head`` committed, and the plan's value."""
    stored = carrying = in_tx = False
    try:
        batch = next(plan)
        while True:
            carry = not stored and not in_tx and (batch.write or batch.hold or batch.lock)
            sent = replace(batch, statements=[head, *batch.statements]) if carry else batch
            carrying = carrying or carry
            try:
                results = yield sent
            except Exception as exc:  # the driver rolled the transaction back
                failure = lost(exc) if carrying and lost is not None else None
                in_tx = carrying = False
                if failure is not None:
                    plan.close()
                    raise failure from exc
                batch = plan.throw(exc)
                continue
            if carry:
                results = results[1:]
            in_tx = batch.hold
            if not in_tx:
                stored = stored or (carrying and not batch.rollback)
                carrying = False
            batch = plan.send(results)
    except StopIteration as stop:
        return stored, stop.value


@dataclass(frozen=True)
class PoolUsage:
    """One pool's connections now, for OpenTelemetry (``name``: its database, masked, and ``sync``
    or ``async``): lent (``used``), free (``idle``), at most (``max``), waiting (``pending``)."""

    name: str
    used: int
    idle: int
    max: int
    pending: int


#: Told ``(pool name, seconds waited)`` of each connection lent (telemetry's wait time).
connection_waits: list[Callable[[str, float], None]] = []


def connection_waited(pool: Callable[[], str], started: float) -> None:
    if connection_waits:
        waited, name = time.perf_counter() - started, pool()
        for tell in connection_waits:
            tell(name, waited)


class Database(Generic[ConnT]):
    """A connection source of one dialect: :meth:`_run_sync`, and :meth:`arun` if async."""

    dialect: Dialect

    def run(self, plan: Plan[T]) -> T:
        return self._run_sync(plan)

    async def arun(self, plan: Plan[T]) -> T:
        return await asyncio.to_thread(self._run_sync, plan)

    def _run_sync(self, plan: Plan[T]) -> T:  # pragma: no cover - abstract
        raise NotImplementedError

    def close(self) -> None:
        """Release connections this object opened (never ones the caller passed in)."""

    async def aclose(self) -> None:
        self.close()

    def describe(self) -> str:
        """Where this database is, with any password masked."""
        return self.dialect.name

    def server(self) -> tuple[str | None, int | None]:
        """The server's host and port (``None`` when there is no server, or unknown).

        Example:
            >>> from langgraph_checkpoint_agent_memory.db.sqlite import SQLiteDatabase
            >>> SQLiteDatabase(":memory:").server()
            (None, None)
        """
        return None, None

    def namespace(self) -> str | None:
        """OpenTelemetry's ``db.namespace`` (``None``: unknown)."""
        return None

    def pool_usage(self) -> list[PoolUsage]:
        """What this database's connection pools hold now (none open: an empty list).

        Example:
            >>> from langgraph_checkpoint_agent_memory.db.sqlite import SQLiteDatabase
            >>> SQLiteDatabase(":memory:").pool_usage()
            []
        """
        return []


Y = TypeVar("Y")
R = TypeVar("R")


def drive(plan: Generator[Y, R, T], execute: Callable[[Y], R]) -> T:
    """Run ``plan`` with a sync ``execute(batch) -> results``; a failed execution is thrown in."""
    try:
        batch = next(plan)
        while True:
            try:
                result = execute(batch)
            except Exception as exc:
                batch = plan.throw(exc)
            else:
                batch = plan.send(result)
    except StopIteration as stop:
        value: T = stop.value
        return value


async def adrive(plan: Generator[Y, R, T], execute: Callable[[Y], Awaitable[R]]) -> T:
    """Run ``plan`` with an asynchronous ``execute(batch) -> results`` coroutine function."""
    result: Any = None  # the first send starts the generator
    failure: Exception | None = None
    while True:
        try:
            batch = plan.send(result) if failure is None else plan.throw(failure)
        except StopIteration as stop:
            value: T = stop.value
            return value
        try:
            result, failure = await execute(batch), None
        except Exception as exc:
            failure = exc


def retryable(exc: BaseException) -> bool:
    """Whether ``exc`` aborted a transaction that may run again (a deadlock, a serialization)."""
    return getattr(exc, "sqlstate", None) in ("40P01", "40001")


def first_line(error: object) -> str:
    """The first line of ``error``'s message, or its class's name."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
