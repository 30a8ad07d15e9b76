"""Spans for the package's operations, following OpenTelemetry's database conventions.

Every public operation of the savers, the store and agent memory runs inside
:func:`operation`: a span named after it (``checkpoint.put``, ``store.search``), a child of
whatever span is current (LangGraph's, the application's), with ``db.system.name``,
``db.operation.name``, ``server.address`` and what an operator filters by. An exception
marks the span as an error, with ``error.type``.

The same object measures the operation's duration for the metrics (see :mod:`.metrics`).
No cost when off: without ``opentelemetry-api`` installed, or while the application has set
neither a tracer nor a meter provider, :func:`operation` returns one shared object that does
nothing.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from langgraph_checkpoint_agent_memory.db.database import Database
from langgraph_checkpoint_agent_memory.telemetry import metrics
from langgraph_checkpoint_agent_memory.telemetry.metrics import SCOPE

try:  # the [otel] extra
    from opentelemetry import trace as _trace
except ImportError:  # pragma: no cover - exercised in a process without it
    _trace = None  # type: ignore[assignment]

__all__ = ["IDLE", "SCOPE", "Target", "db_operation", "live", "operation", "target_of", "tracing"]

#: ``db.system.name`` of each dialect (OpenTelemetry's well-known values).
SYSTEMS = {"sqlite": "sqlite", "postgresql": "postgresql", "hana": "sap.hana"}

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
    """What spans and metrics say of a database: ``db.system.name``, ``server.address``,
    ``server.port``.

    Example:
        >>> from langgraph_checkpoint_agent_memory.db.sqlite import SQLiteDatabase
        >>> Target.of(SQLiteDatabase(":memory:")).attributes()
        {'db.system.name': 'sqlite'}
    """

    system: str
    address: str | None = None
    port: int | None = None

    @classmethod
    def of(cls, database: Database[Any]) -> Target:
        """The target of ``database`` (its dialect and server)."""
        address, port = database.server()
        return cls(SYSTEMS.get(database.dialect.name, "other_sql"), address, port)

    def attributes(self) -> dict[str, AttributeValue]:
        """The conventions' attributes of this target (those known)."""
        found = {
            "db.system.name": self.system,
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


#: A tracer provider given to :func:`use_tracer_provider` (``None``: the global one).
_provider: Any = None


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
    global _provider
    _provider = provider
    metrics.recheck()


#: The package's tracer, and the provider it was made on (replaced as one).
_tracers: list[tuple[Any, Any]] = [(None, None)]


def _tracer() -> Any:
    """The package's tracer of the provider in use, made once per provider (an SDK makes
    a new tracer, and checks its arguments, at each ``get_tracer``)."""
    assert _trace is not None
    provider = _provider if _provider is not None else _trace.get_tracer_provider()
    made_on, tracer = _tracers[0]
    if made_on is not provider:
        tracer = provider.get_tracer(SCOPE, metrics.version())
        _tracers[0] = (provider, tracer)
    return tracer


def tracing_now() -> bool:
    """Whether spans are recorded, looked at now: ``opentelemetry-api`` is installed and the
    application gave a tracer provider, to :func:`use_tracer_provider` or as OpenTelemetry's
    global one (the API's stand-in before one is set, and its no-op one, record nothing).

    Example:
        >>> tracing_now()
        False
    """
    if _provider is not None:
        return True
    if _trace is None:
        return False
    provider = _trace.get_tracer_provider()
    return not isinstance(provider, (_trace.ProxyTracerProvider, _trace.NoOpTracerProvider))


def tracing() -> bool:
    """Whether spans are recorded (:func:`tracing_now`, looked at again at most every
    :data:`RECHECK_SECONDS`).

    Example:
        >>> tracing()
        False
    """
    return metrics.current()[1]


#: Whether operations are recorded at all: spans or metrics (see :func:`.metrics.live`).
live = metrics.live
metrics.spans_recorded_when(tracing_now)


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


class _Live:
    """One operation: its span (current while the ``with`` block runs) when tracing is on,
    its duration in ``histogram`` when metrics are on. With ``sealed`` (encryption on), an
    exception's message, which may quote what was sealed, goes neither into an event nor
    into the span's status: only its type does."""

    __slots__ = (
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
        kind: str,
        attributes: dict[str, AttributeValue],
        histogram: Any,
        measured: dict[str, AttributeValue],
        traced: bool,
        sealed: bool,
    ) -> None:
        self._manager: Any = None
        if traced:
            assert _trace is not None
            self._manager = _tracer().start_as_current_span(
                name,
                kind=_trace.SpanKind.CLIENT if kind == "client" else _trace.SpanKind.INTERNAL,
                attributes=attributes,
                record_exception=not sealed,
                set_status_on_exception=not sealed,
            )
        self.recording = self._manager is not None
        self._span: Any = None
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
                self._failed(error_type(error), "")
            if self._histogram is not None:
                elapsed = time.perf_counter() - self._started
                metrics.safely(self._histogram.record, elapsed, self._measured)
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
            assert _trace is not None
            said = None if self._sealed else description
            self._span.set_status(_trace.Status(_trace.StatusCode.ERROR, said))

    def set(self, name: str, value: AttributeValue | None) -> None:
        """Add an attribute to the span (``None``: leave it out)."""
        if value is not None and self._span is not None:
            metrics.safely(self._span.set_attribute, name, value)

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


#: The attributes an operation is measured by, per operation and target (made once: an
#: operation runs thousands of times a second, on a few targets).
_measured: dict[tuple[str, Target, str | None, bool], dict[str, AttributeValue]] = {}


def _measured_by(
    name: str, target: Target, collection: str | None, client: bool
) -> dict[str, AttributeValue]:
    key = (name, target, collection, client)
    found = _measured.get(key)
    if found is None:
        named: dict[str, AttributeValue] = (
            {"db.operation.name": name.rsplit(".", 1)[-1]}
            if client
            else {"agent_memory.operation.name": name}
        )
        if collection is not None:
            named["db.collection.name"] = collection
        found = _measured[key] = {**target.attributes(), **named}
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
    made, traced = metrics.instruments(), tracing()
    if made is None and not traced:
        return IDLE
    measured = _measured_by(name, target, collection, client)
    histogram = None
    if made is not None:
        histogram = made.db_duration if client else made.memory_duration
    described = measured
    if traced and attributes:
        described = {**measured, **{k: v for k, v in attributes.items() if v is not None}}
    kind = "client" if client else "internal"
    return _Live(name, kind, described, histogram, measured, traced, sealed)


def db_operation(
    name: str,
    target: Target,
    collection: str | None,
    attributes: Mapping[str, AttributeValue | None] | None = None,
    *,
    sealed: bool = False,
) -> _Idle | _Live:
    """The operation of a database client: ``<component>.<operation>`` (``name``), a
    ``CLIENT`` span with the conventions' ``db.system.name``, ``server.address``,
    ``db.operation.name`` and ``db.collection.name`` (the table the operation is about),
    measured in ``db.client.operation.duration``; ``sealed``: encryption is on (an
    exception's message is left out).

    Example:
        >>> with db_operation("store.get", Target("sqlite"), "am_store_items") as op:
        ...     op.set("agent_memory.result_count", 1)
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
        ...     op.set("agent_memory.result_count", 1)
    """
    return _start(name, target, None, attributes, client=False, sealed=sealed)
