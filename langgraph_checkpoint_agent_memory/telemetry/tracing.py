"""Spans for the package's operations, in OpenTelemetry's database conventions: a database
operation runs in :func:`db_operation`, any other in :func:`operation`, each a child of the
current span. The same object measures the duration for :mod:`.metrics`; when telemetry is
off it is one shared object that does nothing."""

from __future__ import annotations

import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any

from langgraph_checkpoint_agent_memory.errors import error_type
from langgraph_checkpoint_agent_memory.telemetry import (
    SCOPE,
    TRACER,
    current,
    live,
    metrics,
    safely,
    version,
)

if TYPE_CHECKING:
    from langgraph_checkpoint_agent_memory.db.database import Database

__all__ = ["IDLE", "SCOPE", "Target", "db_operation", "live", "operation", "target_of", "tracing"]

#: ``db.system.name`` of each dialect (OpenTelemetry's well-known values).
SYSTEMS = {"sqlite": "sqlite", "postgresql": "postgresql", "hana": "sap.hana"}
#: Where a driver's error holds its code (``db.response.status_code``): psycopg's SQLSTATE,
#: sqlite3's extended result code, hdbcli's error code, as the conventions ask of each.
STATUS_CODES = ("sqlstate", "sqlite_errorcode", "errorcode")

AttributeValue = str | bool | int | float


class _Idle:
    """The operation when telemetry is off: enters and leaves, records nothing."""

    recording = live = False

    def __enter__(self) -> _Idle:
        return self

    def __exit__(self, *exc: object) -> None: ...
    def set(self, name: str, value: AttributeValue | None) -> None: ...
    def fail(self, error_type: str, description: str = "") -> None: ...
    def written(self, size: int) -> None: ...


IDLE = _Idle()


@dataclass(frozen=True)
class Target:
    """What spans and metrics say of a database: ``db.system.name``, ``db.namespace``,
    ``server.address``, ``server.port``.

    Example:
        >>> Target("sqlite", namespace="/data/chk.db").attributes()
        {'db.system.name': 'sqlite', 'db.namespace': '/data/chk.db'}
    """

    system: str
    address: str | None = None
    port: int | None = None
    namespace: str | None = None

    def attributes(self) -> dict[str, AttributeValue]:
        """The conventions' attributes of this target (those known)."""
        found = {
            "db.system.name": self.system,
            "db.namespace": self.namespace,
            "server.address": self.address,
            "server.port": self.port,
        }
        return {k: v for k, v in found.items() if v}


_targets: weakref.WeakKeyDictionary[Any, Target] = weakref.WeakKeyDictionary()


def target_of(database: Database[Any]) -> Target:
    """``database``'s :class:`Target`, read once; its pools are reported in the connection
    metrics from then on (:func:`.metrics.watch`).

    Example:
        >>> from langgraph_checkpoint_agent_memory.db.sqlite import SQLiteDatabase
        >>> target_of(SQLiteDatabase(":memory:")).system
        'sqlite'
    """
    if (target := _targets.get(database)) is None:
        system = SYSTEMS.get(database.dialect.name, "other_sql")
        target = _targets[database] = Target(system, *database.server(), database.namespace())
        metrics.watch(database)
    return target


#: Record the package's spans with a tracer provider of its own (see :meth:`.Provider.use`).
use_tracer_provider = TRACER.use

#: The provider in use, its tracer and the API's module (replaced as one): the tracer is
#: made once per provider (an SDK makes a new one, and checks its arguments, at each call).
_tracers: list[tuple[Any, Any, Any]] = [(None, None, None)]


def tracing() -> bool:
    """Whether spans are recorded (looked at again at most every ``RECHECK_SECONDS``).

    Example:
        >>> tracing()
        False
    """
    return current()[1]


def status_code(error: BaseException) -> str | None:
    """``db.response.status_code`` of ``error``: the code of the driver's error it is, or
    was raised from (SQLAlchemy's ``orig``, a ``__cause__``), else ``None``.

    Example:
        >>> status_code(RuntimeError("not a driver's")) is None
        True
    """
    seen: BaseException | None = error
    for _ in range(8):  # a chain of causes, never a cycle
        if seen is None:
            return None
        for name in STATUS_CODES:
            if (code := getattr(seen, name, None)) is not None:
                return str(code)
        seen = getattr(seen, "orig", None) or seen.__cause__ or seen.__context__
    return None


class _Live:
    """One operation: its span when tracing is on, its duration in ``histogram`` when metrics
    are on. An exception marks it failed (``error.type``, ``db.response.status_code``); with
    ``sealed`` (encryption on), its message, which may quote what was sealed, is left out."""

    __slots__ = (
        "_api",
        "_client",
        "_histogram",
        "_manager",
        "_measured",
        "_sealed",
        "_span",
        "_started",
        "_written",
        "recording",
    )
    live = True

    def __init__(
        self,
        name: str,
        client: bool,
        attributes: dict[str, AttributeValue],
        histogram: Any,
        measured: dict[str, AttributeValue],
        traced: bool,
        sealed: bool,
    ) -> None:
        self._manager: Any = None
        self._api: Any = None
        if traced:
            provider = TRACER.current()
            made_on, tracer, self._api = _tracers[0]
            if made_on is not provider:
                tracer, self._api = provider.get_tracer(SCOPE, version()), TRACER.module()
                _tracers[0] = (provider, tracer, self._api)
            kinds = self._api.SpanKind
            self._manager = tracer.start_as_current_span(
                name,
                kind=kinds.CLIENT if client else kinds.INTERNAL,
                attributes=attributes,
                record_exception=not sealed,
                set_status_on_exception=not sealed,
            )
        self.recording = self._manager is not None
        self._span: Any = None
        self._client, self._histogram, self._measured = client, histogram, measured
        self._sealed, self._started, self._written = sealed, 0.0, 0

    def __enter__(self) -> _Live:
        if self._manager is not None:
            self._span = self._manager.__enter__()
        self._started = time.perf_counter()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if error is not None:
                self._failed(error_type(error), "", status_code(error) if self._client else None)
            if self._histogram is not None:
                safely(self._histogram.record, time.perf_counter() - self._started, self._measured)
                if self._written and error is None:
                    system = {"db.system.name": self._measured.get("db.system.name", "")}
                    metrics.add("bytes_written", self._written, system)
        finally:
            if self._manager is not None:
                self._manager.__exit__(kind, error, tb)

    def _failed(self, error_type: str, description: str, code: str | None = None) -> None:
        failed = {"error.type": error_type, "db.response.status_code": code}
        self._measured = {**self._measured, **{k: v for k, v in failed.items() if v}}
        for name, value in failed.items():
            self.set(name, value)
        if self._span is not None and (self._sealed or description):
            said = None if self._sealed else description
            self._span.set_status(self._api.Status(self._api.StatusCode.ERROR, said))

    def set(self, name: str, value: AttributeValue | None) -> None:
        """Add an attribute to the span (``None``: leave it out)."""
        if value is not None and self._span is not None:
            safely(self._span.set_attribute, name, value)

    def written(self, size: int) -> None:
        """The operation stores ``size`` bytes (a write built again replaces the size): on the
        span, and added to ``agent_memory.checkpoint.bytes_written`` once it succeeds."""
        self._written = size
        self.set("agent_memory.bytes_written", size)

    def fail(self, error_type: str, description: str = "") -> None:
        """Mark the operation failed without an exception (``description``: unless sealed)."""
        self._failed(error_type, description or "failed")


#: Each operation's span name and the attributes it is measured by, per operation and
#: target (made once: an operation runs thousands of times a second, on a few targets).
_named: dict[tuple[str, Target, str | None, bool], tuple[str, dict[str, AttributeValue]]] = {}


def _start(
    name: str,
    target: Target,
    collection: str | None,
    attributes: Mapping[str, AttributeValue | None] | None,
    *,
    client: bool,
    sealed: bool,
) -> _Idle | _Live:
    state = current()
    traced, made = state[1], metrics.instruments() if state[2] else None
    if made is None and not traced:
        return IDLE
    key = (name, target, collection, client)
    if (named := _named.get(key)) is None:
        if client:
            operation = name.rpartition(".")[2]
            measured = {**target.attributes(), "db.operation.name": operation}
            if collection is not None:
                measured["db.collection.name"] = collection
            about = collection or target.namespace  # the conventions' {target}
            named = (f"{operation} {about}" if about else operation, measured)
        else:
            named = (name, {**target.attributes(), "agent_memory.operation.name": name})
        _named[key] = named
    span_name, measured = named
    histogram = None if made is None else (made.db_duration if client else made.memory_duration)
    described = measured
    if traced and attributes:
        described = {**measured, **{k: v for k, v in attributes.items() if v is not None}}
    return _Live(span_name, client, described, histogram, measured, traced, sealed)


def db_operation(
    name: str,
    target: Target,
    collection: str | None,
    attributes: Mapping[str, AttributeValue | None] | None = None,
    *,
    sealed: bool = False,
) -> _Idle | _Live:
    """A database operation ``name`` (``<component>.<operation>``): a ``CLIENT`` span named
    ``{db.operation.name} {db.collection.name}``, measured in ``db.client.operation.duration``
    (``sealed``: see :func:`operation`).

    Example:
        >>> with db_operation("store.get", Target("sqlite"), "am_store_items") as op:
        ...     op.set("db.response.returned_rows", 1)
    """
    return _start(name, target, collection, attributes, client=True, sealed=sealed)


def operation(
    name: str,
    target: Target,
    attributes: Mapping[str, AttributeValue | None] | None = None,
    *,
    sealed: bool = False,
) -> _Idle | _Live:
    """The span of one operation of agent memory (``memory.record``, ...), measured in
    ``agent_memory.operation.duration``; ``op.set(...)`` adds what is learned on the way
    (``None``: left out); ``sealed``: encryption is on (an exception's message is left out).

    Example:
        >>> with operation("memory.recall", Target("sqlite")) as op:
        ...     op.set("agent_memory.fact_count", 1)
    """
    return _start(name, target, None, attributes, client=False, sealed=sealed)
