"""OpenTelemetry traces (:mod:`.tracing`) and metrics (:mod:`.metrics`), and the providers
they share. When off, an operation pays one cached look (a clock read), and ``opentelemetry``
is not imported (only a process that imported it, or named a provider in an ``OTEL_PYTHON_*``
variable, can have set a global provider)."""

from __future__ import annotations

import importlib
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from langgraph_checkpoint_agent_memory.db import fork

logger = logging.getLogger(__name__)

#: The instrumentation scope of every span and instrument of the package.
SCOPE = "langgraph_checkpoint_agent_memory"
#: Seconds between two looks at OpenTelemetry's global providers (a look reads the
#: environment: about 0.7 µs; a store read from memory takes about 20 µs).
RECHECK_SECONDS = 1.0

_lock = fork.module_lock(globals(), "_lock", threading.Lock)


class Provider:
    """One signal's provider: the one given to the package, else OpenTelemetry's global one
    (``getter``, a function of the ``api`` module; ``variable`` may name one)."""

    def __init__(self, api: str, getter: str, variable: str) -> None:
        self.api, self.getter, self.variable = api, getter, variable
        self.given: Any = None

    def use(self, provider: Any) -> None:
        """Record the package's spans (:data:`TRACER`: ``tracing.use_tracer_provider``) or
        metrics (:data:`METER`: ``metrics.use_meter_provider``) with ``provider`` instead of
        OpenTelemetry's global one, as OpenTelemetry's instrumentations take one.

        Args:
            provider: An SDK's ``TracerProvider`` or ``MeterProvider`` (``None``: back to
                the global one).

        Example:
            >>> from opentelemetry.sdk.trace import TracerProvider
            >>> TRACER.use(TracerProvider())
            >>> TRACER.use(None)
        """
        self.given = provider
        recheck()

    def module(self) -> Any:
        return sys.modules.get(self.api) or importlib.import_module(self.api)

    def current(self) -> Any:
        return self.given if self.given is not None else getattr(self.module(), self.getter)()

    def recording(self) -> bool:
        """Whether a provider was given, or the application set a global one (uncached): SDK and
        vendor providers live outside the API's module, whose own ones record nothing."""
        if self.given is not None:
            return True
        if self.api not in sys.modules and self.variable not in os.environ:
            return False  # nobody imported the API: no global provider was set
        try:
            provider = self.current()
        except ImportError:  # the [otel] extra is not installed
            return False
        return not type(provider).__module__.startswith(self.api)


TRACER = Provider("opentelemetry.trace", "get_tracer_provider", "OTEL_PYTHON_TRACER_PROVIDER")
METER = Provider("opentelemetry.metrics", "get_meter_provider", "OTEL_PYTHON_METER_PROVIDER")

#: What telemetry records, as last looked at: ``(until, spans, metrics, generation)``, valid
#: until the monotonic clock reads ``until``; :func:`recheck` starts a new generation.
_state: tuple[float, bool, bool, int] = (-1.0, False, False, 0)


def recheck() -> None:
    """Look at the providers again at the next operation: one was given or taken back."""
    global _state
    with _lock:
        _state = (-1.0, False, False, _state[3] + 1)


def current() -> tuple[float, bool, bool, int]:
    """What telemetry records: ``(until, spans, metrics, generation)``, looked at again at
    most every :data:`RECHECK_SECONDS` (an answer that holds costs a clock read)."""
    global _state
    state = _state
    now = time.monotonic()
    if now < state[0]:
        return state
    fresh = (now + RECHECK_SECONDS, TRACER.recording(), METER.recording(), state[3])
    with _lock:
        if _state[3] == state[3]:  # no provider was given or taken back since
            _state = fresh
    return fresh


def live() -> bool:
    """Whether spans or metrics are recorded (see :func:`current`).

    Example:
        >>> live()
        False
    """
    state = current()
    return state[1] or state[2]


def version() -> str:
    """The package's version (the instrumentation scope's, and ``__version__``)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("langgraph-checkpoint-agent-memory")
    except PackageNotFoundError:  # pragma: no cover - a source tree that is not installed
        return "0.0.0"


def safely(record: Callable[..., Any], *args: Any) -> None:
    """Call ``record(*args)`` (an instrument's), logging instead of raising what it raises:
    an application's operation must not fail because its telemetry did.

    Example:
        >>> safely(print, "recorded")
        recorded
    """
    try:
        record(*args)
    except Exception:
        logger.warning("agent memory's telemetry could not record", exc_info=True)
