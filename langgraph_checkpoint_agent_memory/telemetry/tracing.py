"""Spans for the package's operations, in OpenTelemetry's database conventions.

A saver's or the store's operation on a database runs inside :func:`db_operation`: a
``CLIENT`` span named ``{db.operation.name} {db.collection.name}`` (``put am_checkpoints``,
``search am_store_items``), a child of whatever span is current (LangGraph's, the
application's), with ``db.system.name``, ``db.namespace``, ``server.address``,
``server.port`` and what an operator filters by. Agent memory's operations, and
``TimedInMemorySaver``'s (no database), run inside :func:`operation`: ``INTERNAL`` spans named
``memory.record``, ``checkpoint.put``. An exception marks the span as an error, with
``error.type`` (the exception's class) and, for a database's error, ``db.response.status_code``.

The same object measures the operation's duration for the metrics (see :mod:`.metrics`).
When telemetry is off, :func:`operation` returns one shared object that does nothing.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any

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

    recording = False
    live = False

    def __enter__(self) -> _Idle:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def set(self, name: str, value: AttributeValue | None) -> None:
        """Nothing to record."""

    def fail(self, error_type: str, description: str = "") -> None:
        """Nothing to record."""

    def written(self, size: int) -> None:
        """Nothing to record."""


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

    @classmethod
    def of(cls, database: Database[Any]) -> Target:
        """The target of ``database`` (its dialect, server and namespace)."""
        address, port = database.server()
        system = SYSTEMS.get(database.dialect.name, "other_sql")
        return cls(system, address, port, database.namespace())

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
    target = _targets.get(database)
    if target is None:
        target = _targets[database] = Target.of(database)
        metrics.watch(database)
    return target


def use_tracer_provider(provider: Any) -> None:
    """Record the package's spans with ``provider`` instead of OpenTelemetry's global one
    (``None``: back to the global one), as OpenTelemetry's instrumentations take a
    ``tracer_provider``.

    Args:
        provider: An ``opentelemetry.sdk.trace.TracerProvider`` (or any tracer provider).

    Example:
        >>> from opentelemetry.sdk.trace import TracerProvider
        >>> use_tracer_provider(TracerProvider())
        >>> use_tracer_provider(None)
    """
    TRACER.use(provider)


#: The package's tracer, the provider it was made on, and the API's module (replaced as one).
_tracers: list[tuple[Any, Any, Any]] = [(None, None, None)]


def _tracer() -> tuple[Any, Any]:
    """The package's tracer of the provider in use, made once per provider (an SDK makes
    a new tracer, and checks its arguments, at each ``get_tracer``), and the API."""
    provider = TRACER.current()
    made_on, tracer, api = _tracers[0]
    if made_on is not provider:
        tracer, api = provider.get_tracer(SCOPE, version()), TRACER.module()
        _tracers[0] = (provider, tracer, api)
    return tracer, api


def tracing_now() -> bool:
    """Whether spans are recorded, looked at now: a tracer provider was given to
    :func:`use_tracer_provider`, or the application set OpenTelemetry's global one.

    Example:
        >>> tracing_now()
        False
    """
    return TRACER.recording()


def tracing() -> bool:
    """Whether spans are recorded (:func:`tracing_now`, looked at again at most every
    :data:`~langgraph_checkpoint_agent_memory.telemetry.RECHECK_SECONDS`).

    Example:
        >>> tracing()
        False
    """
    return current()[1]


def error_type(error: BaseException) -> str:
    """``error.type`` of ``error``: its class's fully qualified name (a built-in's name).

    Example:
        >>> error_type(ValueError("bad")), error_type(KeyboardInterrupt())
        ('ValueError', 'KeyboardInterrupt')
    """
    kind = type(error)
    if kind.__module__ == "builtins":
        return kind.__qualname__
    return f"{kind.__module__}.{kind.__qualname__}"


def status_code(error: BaseException) -> str | None:
    """``db.response.status_code`` of ``error``: the code of the driver's error it is, or
    was raised from (SQLAlchemy's ``orig``, a ``__cause__``), else ``None``.

    Example:
        >>> import sqlite3
        >>> try:
        ...     sqlite3.connect(":memory:").execute("select * from missing")
        ... except sqlite3.Error as error:
        ...     status_code(RuntimeError("wrapped")) or status_code(error)
        '1'
    """
    seen: BaseException | None = error
    for _ in range(8):  # a chain of causes, never a cycle
        if seen is None:
            return None
        for name in STATUS_CODES:
            code = getattr(seen, name, None)
            if code is not None:
                return str(code)
        seen = getattr(seen, "orig", None) or seen.__cause__ or seen.__context__
    return None


class _Live:
    """One operation: its span (current while the ``with`` block runs) when tracing is on,
    its duration in ``histogram`` when metrics are on. With ``sealed`` (encryption on), an
    exception's message, which may quote what was sealed, goes neither into an event nor
    into the span's status: only its type does."""

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
            tracer, self._api = _tracer()
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
        self._client = client
        self._histogram = histogram
        self._measured = measured
        self._sealed = sealed
        self._started = 0.0
        self._written = 0

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
                code = status_code(error) if self._client else None
                if code is not None:
                    self._measured = {**self._measured, "db.response.status_code": code}
                    self.set("db.response.status_code", code)
                self._failed(error_type(error), "")
            if self._histogram is not None:
                elapsed = time.perf_counter() - self._started
                safely(self._histogram.record, elapsed, self._measured)
                if self._written and error is None:
                    system = {"db.system.name": self._measured.get("db.system.name", "")}
                    metrics.add("bytes_written", self._written, system)
        finally:
            if self._manager is not None:
                self._manager.__exit__(kind, error, tb)

    def _failed(self, error_type: str, description: str) -> None:
        self._measured = {**self._measured, "error.type": error_type}
        self.set("error.type", error_type)
        if self._span is not None and (self._sealed or description):
            said = None if self._sealed else description
            self._span.set_status(self._api.Status(self._api.StatusCode.ERROR, said))

    def set(self, name: str, value: AttributeValue | None) -> None:
        """Add an attribute to the span (``None``: leave it out)."""
        if value is not None and self._span is not None:
            safely(self._span.set_attribute, name, value)

    def written(self, size: int) -> None:
        """The operation stores ``size`` bytes: ``agent_memory.bytes_written`` on the span,
        added to ``agent_memory.checkpoint.bytes_written`` once it succeeds (a write
        built again, after data keys were loaded, replaces the size, never adds to it)."""
        self._written = size
        self.set("agent_memory.bytes_written", size)

    def fail(self, error_type: str, description: str = "") -> None:
        """Mark the operation failed without an exception (a consolidation job whose
        extractor failed is recorded, not raised): ``error.type`` and an error status, with
        ``description`` unless the operation is sealed."""
        self._failed(error_type, description or "failed")


#: Each operation's span name and the attributes it is measured by, per operation and
#: target (made once: an operation runs thousands of times a second, on a few targets).
_named: dict[tuple[str, Target, str | None, bool], tuple[str, dict[str, AttributeValue]]] = {}


def _name_of(
    name: str, target: Target, collection: str | None, client: bool
) -> tuple[str, dict[str, AttributeValue]]:
    key = (name, target, collection, client)
    found = _named.get(key)
    if found is None:
        if client:
            operation = name.rpartition(".")[2]
            measured = {**target.attributes(), "db.operation.name": operation}
            if collection is not None:
                measured["db.collection.name"] = collection
            about = collection or target.namespace  # the conventions' {target}
            found = (f"{operation} {about}" if about else operation, measured)
        else:
            found = (name, {**target.attributes(), "agent_memory.operation.name": name})
        _named[key] = found
    return found


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
    span_name, measured = _name_of(name, target, collection, client)
    histogram = None
    if made is not None:
        histogram = made.db_duration if client else made.memory_duration
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
    """An operation of a database client, ``<component>.<operation>`` (``name``): a
    ``CLIENT`` span named ``{db.operation.name} {db.collection.name}`` (the table the
    operation is about), with the target's attributes, measured in
    ``db.client.operation.duration``; ``sealed``: encryption is on (an exception's message
    is left out).

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
    """The span of one operation of agent memory (``memory.record``, ...), to run the
    operation in, measured in ``agent_memory.operation.duration``: ``with
    operation("memory.record", target) as op: ...``; ``op.set(...)`` adds what is learned on
    the way (counts). Attributes that are ``None`` are left out; ``sealed``: encryption is
    on (an exception's message is left out).

    Example:
        >>> with operation("memory.recall", Target("sqlite")) as op:
        ...     op.set("agent_memory.fact_count", 1)
    """
    return _start(name, target, None, attributes, client=False, sealed=sealed)
