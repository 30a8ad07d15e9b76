"""Metrics of the package's operations, by OpenTelemetry's conventions.

Instruments (the meter is named :data:`SCOPE`):

- ``db.client.operation.duration`` (s): each saver and store operation, by
  ``db.system.name``, ``db.operation.name``, ``db.collection.name`` and ``error.type``;
- ``agent_memory.operation.duration`` (s): each memory operation (``record``, ``recall``,
  ``consolidate``, a job, ``decay``, ``erase``, a tool), by ``agent_memory.operation.name``;
- ``agent_memory.checkpoint.bytes_written`` (By): checkpoint, blob and write bytes stored;
- ``agent_memory.checkpoint.threads_swept``, ``agent_memory.store.items_swept``: what TTL
  sweeps removed;
- ``agent_memory.consolidation.jobs``: jobs by ``agent_memory.job.status`` (``completed``,
  ``failed``, ``parked``, ...);
- ``agent_memory.consolidation.backlog`` and ``agent_memory.consolidation.oldest_pending_age``
  (s): pending episodes, as each memory's last consolidation round saw them;
- ``db.client.connection.count`` (by ``db.client.connection.state``: ``idle``, ``used``),
  ``db.client.connection.max``, ``db.client.connection.pending_requests`` and
  ``agent_memory.db.client.connection.wait_time`` (s waited, cumulative), per
  ``db.client.connection.pool.name``;
- ``agent_memory.ranker.cache.requests``: look-ups of the ranker's caches, by
  ``agent_memory.cache.name`` and ``agent_memory.cache.hit``.

No cost when off: without ``opentelemetry-api``, or while the application has set no meter
provider, :func:`instruments` returns ``None`` after a cached check, and nothing is measured.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from langgraph_checkpoint_agent_memory.db.database import PoolUsage

try:  # the [otel] extra
    from opentelemetry import metrics as _metrics
except ImportError:  # pragma: no cover - exercised in a process without it
    _metrics = None  # type: ignore[assignment]

#: The instrumentation scope of every span and instrument of the package.
SCOPE = "langgraph_checkpoint_agent_memory"
#: Seconds between two looks at OpenTelemetry's global providers (a look reads the
#: environment: about 0.7 µs; a store read from memory takes about 20 µs).
RECHECK_SECONDS = 1.0
#: Bucket bounds of the duration histograms (s), as OpenTelemetry's database conventions
#: advise.
DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0)

_provider: Any = None
_global = {"on": False, "checked": -RECHECK_SECONDS}


def use_meter_provider(provider: Any) -> None:
    """Record the package's metrics with ``provider`` instead of OpenTelemetry's global one
    (``None``: back to the global one), as OpenTelemetry's instrumentations take a
    ``meter_provider``.

    Args:
        provider: An ``opentelemetry.sdk.metrics.MeterProvider`` (or any meter provider).

    Example:
        >>> from opentelemetry.sdk.metrics import MeterProvider
        >>> use_meter_provider(MeterProvider())
        >>> use_meter_provider(None)
    """
    global _provider
    _provider = provider
    recheck()


def metering() -> bool:
    """Whether metrics are recorded: ``opentelemetry-api`` is installed and the application
    gave a meter provider (to :func:`use_meter_provider`, or as OpenTelemetry's global one,
    seen within :data:`RECHECK_SECONDS` of being set). The API's own providers (the proxy
    that stands in until one is set, the no-op one) record nothing, so they count as off."""
    if _provider is not None:
        return True
    if _metrics is None:
        return False
    now = time.monotonic()
    if now - _global["checked"] >= RECHECK_SECONDS:
        provider = _metrics.get_meter_provider()
        _global["on"] = not type(provider).__module__.startswith("opentelemetry.metrics")
        _global["checked"] = now
    return bool(_global["on"])


#: Whether anything is recorded (spans or metrics), and until when that answer holds.
_live: list[Any] = [False, -1.0]


def recheck() -> None:
    """Forget whether telemetry is on: a provider was given or taken back."""
    _live[1] = -1.0


#: Whether spans are recorded (given by :mod:`.tracing`, which imports this module).
_tracing: list[Callable[[], bool]] = [lambda: False]


def spans_recorded_when(check: Callable[[], bool]) -> None:
    """Make :func:`live` ask ``check`` whether spans are recorded (the tracing module's).

    Example:
        >>> from langgraph_checkpoint_agent_memory.telemetry import tracing
        >>> spans_recorded_when(tracing.tracing)
    """
    _tracing[0] = check
    recheck()


def live() -> bool:
    """Whether spans or metrics are recorded: the answer is kept for
    :data:`RECHECK_SECONDS` (a look costs a clock read, about 0.1 µs, while it holds)."""
    now = time.monotonic()
    if now < _live[1]:
        return bool(_live[0])
    _live[0] = _tracing[0]() or metering()
    _live[1] = now + RECHECK_SECONDS
    return bool(_live[0])


class Watched(Protocol):
    """A database whose connection pools the metrics report."""

    def pool_usage(self) -> list[PoolUsage]: ...


@dataclass
class Backlog:
    """Pending episodes of one memory, as its last consolidation round saw them.

    Args:
        attributes: What tells this memory apart (``db.system.name``,
            ``agent_memory.namespace_root``).
        pending: Episodes waiting to be consolidated.
        oldest_age: Seconds the oldest of them has waited (``None``: none pending).
    """

    attributes: dict[str, Any]
    pending: int = 0
    oldest_age: float | None = None


_lock = threading.Lock()
_databases: weakref.WeakSet[Any] = weakref.WeakSet()
_backlogs: weakref.WeakValueDictionary[int, Backlog] = weakref.WeakValueDictionary()


def watch(database: Watched) -> None:
    """Report ``database``'s pools in the connection metrics while it lives.

    Example:
        >>> from langgraph_checkpoint_agent_memory.db.sqlite import SQLiteDatabase
        >>> watch(SQLiteDatabase(":memory:"))
    """
    with _lock:
        _databases.add(database)


def watch_backlog(backlog: Backlog) -> None:
    """Report ``backlog`` in the consolidation gauges while it lives (its owner keeps it).

    Example:
        >>> backlog = Backlog({"db.system.name": "sqlite"})
        >>> watch_backlog(backlog)
    """
    with _lock:
        _backlogs[id(backlog)] = backlog


def _usage() -> Iterator[PoolUsage]:
    with _lock:
        databases = list(_databases)
    for database in databases:
        try:
            yield from database.pool_usage()
        except Exception:  # a pool closing as it is read: reported at the next collection
            continue


def _pool_callback(read: Callable[[PoolUsage], Iterable[tuple[float, dict[str, Any]]]]) -> Any:
    def callback(options: Any) -> Iterable[Any]:
        assert _metrics is not None
        return [
            _metrics.Observation(value, {"db.client.connection.pool.name": u.name, **extra})
            for u in _usage()
            for value, extra in read(u)
        ]

    return callback


def _backlog_callback(read: Callable[[Backlog], float | None]) -> Any:
    def callback(options: Any) -> Iterable[Any]:
        assert _metrics is not None
        with _lock:
            backlogs = list(_backlogs.values())
        observed = ((read(b), b.attributes) for b in backlogs)
        return [_metrics.Observation(v, a) for v, a in observed if v is not None]

    return callback


def version() -> str:
    """The package's version, the instrumentation scope's."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("langgraph-checkpoint-agent-memory")
    except PackageNotFoundError:  # pragma: no cover - a source tree that is not installed
        return "0.0.0"


class Instruments:
    """The package's instruments on one meter provider (see the module's text)."""

    def __init__(self, provider: Any) -> None:
        meter = provider.get_meter(SCOPE, version())
        self.db_duration = meter.create_histogram(
            "db.client.operation.duration",
            unit="s",
            description="Duration of database client operations.",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self.memory_duration = meter.create_histogram(
            "agent_memory.operation.duration",
            unit="s",
            description="Duration of agent memory operations.",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self.bytes_written = meter.create_counter(
            "agent_memory.checkpoint.bytes_written",
            unit="By",
            description="Bytes of checkpoints, channel values and writes stored.",
        )
        self.threads_swept = meter.create_counter(
            "agent_memory.checkpoint.threads_swept",
            unit="{thread}",
            description="Expired checkpointer threads removed (or pruned) by sweeps.",
        )
        self.items_swept = meter.create_counter(
            "agent_memory.store.items_swept",
            unit="{item}",
            description="Expired store items removed by sweeps.",
        )
        self.jobs = meter.create_counter(
            "agent_memory.consolidation.jobs",
            unit="{job}",
            description="Consolidation jobs run, by agent_memory.job.status.",
        )
        self.cache = meter.create_counter(
            "agent_memory.ranker.cache.requests",
            unit="{request}",
            description="Look-ups of the search ranker's caches, by cache and hit.",
        )
        meter.create_observable_gauge(
            "agent_memory.consolidation.backlog",
            [_backlog_callback(lambda b: b.pending)],
            unit="{episode}",
            description="Episodes waiting to be consolidated.",
        )
        meter.create_observable_gauge(
            "agent_memory.consolidation.oldest_pending_age",
            [_backlog_callback(lambda b: b.oldest_age)],
            unit="s",
            description="How long the oldest pending episode has waited.",
        )
        meter.create_observable_up_down_counter(
            "db.client.connection.count",
            [
                _pool_callback(
                    lambda u: [
                        (u.idle, {"db.client.connection.state": "idle"}),
                        (u.used, {"db.client.connection.state": "used"}),
                    ]
                )
            ],
            unit="{connection}",
            description="Connections of the pool, by state.",
        )
        meter.create_observable_up_down_counter(
            "db.client.connection.max",
            [_pool_callback(lambda u: [(u.max, {})])],
            unit="{connection}",
            description="The most connections the pool opens.",
        )
        meter.create_observable_up_down_counter(
            "db.client.connection.pending_requests",
            [_pool_callback(lambda u: [(u.pending, {})])],
            unit="{request}",
            description="Callers waiting for a connection of the pool.",
        )
        meter.create_observable_counter(
            "agent_memory.db.client.connection.wait_time",
            [_pool_callback(lambda u: [(u.wait_seconds, {})])],
            unit="s",
            description="Seconds callers have waited for a connection of the pool.",
        )


_instruments: dict[str, Any] = {"provider": None, "instruments": None}


def instruments() -> Instruments | None:
    """The instruments to record with, or ``None`` when metrics are off (see
    :func:`metering`); made once per meter provider.

    Example:
        >>> use_meter_provider(None)
        >>> instruments() is None or isinstance(instruments(), Instruments)
        True
    """
    if not metering():
        return None
    assert _metrics is not None
    provider = _provider if _provider is not None else _metrics.get_meter_provider()
    if _instruments["provider"] is not provider:
        with _lock:
            if _instruments["provider"] is not provider:
                _instruments["instruments"] = Instruments(provider)
                _instruments["provider"] = provider
    made: Instruments = _instruments["instruments"]
    return made


def add(counter: str, amount: float, attributes: dict[str, Any] | None = None) -> None:
    """Add ``amount`` to the counter named by its attribute in :class:`Instruments`
    (``"bytes_written"``, ``"threads_swept"``, ...); nothing when metrics are off.

    Example:
        >>> add("threads_swept", 2, {"db.system.name": "sqlite"})
    """
    made = instruments()
    if made is not None and amount:
        getattr(made, counter).add(amount, attributes or {})


def cache_lookup(cache: str, hit: bool) -> None:
    """Count one look-up of the ranker's cache named ``cache``.

    Example:
        >>> cache_lookup("statistics", True)
    """
    made = instruments()
    if made is not None:
        made.cache.add(1, {"agent_memory.cache.name": cache, "agent_memory.cache.hit": hit})
