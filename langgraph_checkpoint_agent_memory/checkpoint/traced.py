"""Spans and durations of the in-memory saver's operations (see :mod:`..telemetry`):
internal spans (no database is involved) named ``checkpoint.put``, ``checkpoint.get_tuple``,
..., with the thread (left out with encryption on) and the rows returned."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

from langgraph_checkpoint_agent_memory.telemetry import metrics
from langgraph_checkpoint_agent_memory.telemetry.tracing import (
    AttributeValue,
    Target,
    live,
    operation,
)

F = TypeVar("F", bound=Callable[..., Any])
#: The target of the in-memory saver's operations: no database (no ``db.system.name``),
#: no server; its spans are internal ones, measured in ``agent_memory.operation.duration``.
MEMORY = Target("")


def span(saver: Any, name: str, about: Any) -> Any:
    """The span ``checkpoint.<name>`` of an operation of ``saver`` on a thread (``about``: a
    config, or a thread id; left out when the saver encrypts); for the hot operations, which
    check :func:`live` themselves rather than pay a wrapper's call.

    Example:
        >>> class Saver:
        ...     keyring = None
        >>> with span(Saver(), "get_tuple", {"configurable": {"thread_id": "t"}}) as op:
        ...     op.set("db.response.returned_rows", 0)
    """
    if isinstance(about, Mapping):
        about = (about.get("configurable") or {}).get("thread_id")
    sealed = saver.keyring is not None
    thread = None if sealed or not isinstance(about, str) else about
    return operation(f"checkpoint.{name}", MEMORY, {"langgraph.thread_id": thread}, sealed=sealed)


def traced(
    name: str, counts: Callable[[Any], Mapping[str, AttributeValue]] | None = None
) -> Callable[[F], F]:
    """Run a method of the in-memory saver in the span ``checkpoint.<name>``, with the
    thread its first argument names and the attributes ``counts`` reads from its result.

    Example:
        >>> class Saver:
        ...     keyring = None
        ...     @traced("get_tuple")
        ...     def get_tuple(self, config): return None
        >>> Saver().get_tuple({"configurable": {"thread_id": "t"}}) is None
        True
    """

    def wrap(method: F) -> F:
        @functools.wraps(method)
        def run(saver: Any, *args: Any, **kwargs: Any) -> Any:
            if not live():
                return method(saver, *args, **kwargs)
            about = args[0] if args else kwargs.get("config", kwargs.get("thread_id"))
            with span(saver, name, about) as op:
                result = method(saver, *args, **kwargs)
                for key, value in (counts(result) if counts else {}).items():
                    op.set(key, value)
                return result

        return cast(F, run)

    return wrap


def listed(result: Any) -> dict[str, AttributeValue]:
    """How many checkpoints a listing selected."""
    return {"db.response.returned_rows": len(result)}


def swept(result: int) -> dict[str, AttributeValue]:
    """How many threads a sweep evicted, also counted in the swept-threads metric."""
    metrics.add("threads_swept", result, {})
    return {"agent_memory.thread_count": result}
