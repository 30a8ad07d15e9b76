"""Spans for the package's operations, following OpenTelemetry's database conventions.

Every public operation of the savers, the store and agent memory runs inside
:func:`operation`: a span named after it (``checkpoint.put``, ``store.search``), a child of
whatever span is current (LangGraph's, the application's), with ``db.system.name``,
``db.operation.name``, ``server.address`` and what an operator filters by. An exception
marks the span as an error, with ``error.type``.

No cost when off: without ``opentelemetry-api`` installed, or while the application has
not set a tracer provider, :func:`operation` returns one shared object that does nothing.
"""

from __future__ import annotations

import time
from types import TracebackType
from typing import Any

try:  # the [otel] extra
    from opentelemetry import trace as _trace
except ImportError:  # pragma: no cover - exercised in a process without it
    _trace = None  # type: ignore[assignment]

#: The instrumentation scope of every span and instrument of the package.
SCOPE = "langgraph_checkpoint_agent_memory"
#: ``db.system.name`` of each dialect (OpenTelemetry's well-known values).
SYSTEMS = {"sqlite": "sqlite", "postgresql": "postgresql", "hana": "sap.hana"}

AttributeValue = str | bool | int | float


class _Idle:
    """The operation when tracing is off: enters and leaves, records nothing."""

    recording = False

    def __enter__(self) -> _Idle:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def set(self, name: str, value: AttributeValue | None) -> None:
        """Nothing to record."""


IDLE = _Idle()

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


def _tracer() -> Any:
    assert _trace is not None
    if _provider is not None:
        return _provider.get_tracer(SCOPE)
    return _trace.get_tracer(SCOPE)


class _Traced:
    """One operation's span, current while the ``with`` block runs."""

    recording = True

    def __init__(self, name: str, attributes: dict[str, AttributeValue]) -> None:
        assert _trace is not None
        self._manager = _tracer().start_as_current_span(
            name,
            kind=_trace.SpanKind.CLIENT,
            attributes=attributes,
            record_exception=True,
            set_status_on_exception=True,
        )
        self._span: Any = None

    def __enter__(self) -> _Traced:
        self._span = self._manager.__enter__()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if error is not None and self._span is not None:
            self._span.set_attribute("error.type", type(error).__qualname__)
        self._manager.__exit__(kind, error, tb)

    def set(self, name: str, value: AttributeValue | None) -> None:
        """Add an attribute to the span (``None``: leave it out)."""
        if value is not None and self._span is not None:
            self._span.set_attribute(name, value)


#: Seconds between two looks at OpenTelemetry's global tracer provider: the look costs
#: about 0.7 µs (it reads the environment), a store read from memory about 20 µs.
RECHECK_SECONDS = 1.0
_global = {"on": False, "checked": -RECHECK_SECONDS}


def tracing() -> bool:
    """Whether spans are recorded: ``opentelemetry-api`` is installed and the application
    gave a tracer provider (to :func:`use_tracer_provider`, or as OpenTelemetry's global
    one, which is seen within :data:`RECHECK_SECONDS` of being set)."""
    if _provider is not None:
        return True
    if _trace is None:
        return False
    now = time.monotonic()
    if now - _global["checked"] >= RECHECK_SECONDS:
        provider = _trace.get_tracer_provider()
        _global["on"] = not isinstance(provider, _trace.ProxyTracerProvider)
        _global["checked"] = now
    return bool(_global["on"])


def db_operation(
    name: str, system: str, collection: str, **attributes: AttributeValue | None
) -> _Idle | _Traced:
    """:func:`operation` of a database client: ``<component>.<operation>`` (``name``) with
    the conventions' ``db.system.name`` (of dialect ``system``), ``db.operation.name`` and
    ``db.collection.name`` (the table the operation is about)."""
    if not tracing():
        return IDLE
    conventions: dict[str, AttributeValue | None] = {
        "db.system.name": SYSTEMS.get(system, "other_sql"),
        "db.operation.name": name.rsplit(".", 1)[-1],
        "db.collection.name": collection,
    }
    return operation(name, **conventions, **attributes)


def operation(name: str, **attributes: AttributeValue | None) -> _Idle | _Traced:
    """The span of one operation, to run the operation in: ``with operation("checkpoint.put",
    **{"db.system.name": "sqlite"}) as op: ...``; ``op.set(...)`` adds what is learned on
    the way (counts, bytes). Attributes that are ``None`` are left out.

    Example:
        >>> with operation("checkpoint.get_tuple", **{"db.system.name": "sqlite"}) as op:
        ...     op.set("agent_memory.result_count", 1)
    """
    if not tracing():
        return IDLE
    return _Traced(name, {k: v for k, v in attributes.items() if v is not None})
