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
  (s): pending episodes per database, as the last consolidation round there saw them, and
  how long the oldest of them has waited (its age at each collection);
- ``agent_memory.consolidation.parked``: episodes parked after failing every attempt;
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

import logging
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

logger = logging.getLogger(__name__)

#: The instrumentation scope of every span and instrument of the package.
SCOPE = "langgraph_checkpoint_agent_memory"
#: Seconds between two looks at OpenTelemetry's global providers (a look reads the
#: environment: about 0.7 µs; a store read from memory takes about 20 µs).
RECHECK_SECONDS = 1.0
#: Bucket bounds of the duration histograms (s), as OpenTelemetry's database conventions
#: advise.
DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0)

_provider: Any = None
_lock = threading.Lock()
#: What telemetry records, as last looked at: ``(until, spans, metrics, generation)``; the
#: answer holds until the monotonic clock reads ``until``; :func:`recheck` moves to a new
#: generation, so an answer looked up before it is never kept.
_state: tuple[float, bool, bool, int] = (-1.0, False, False, 0)
#: Whether spans are recorded now, uncached (given by :mod:`.tracing`, which imports this
#: module).
_spans_now: list[Callable[[], bool]] = [lambda: False]


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


def _metering_now() -> bool:
    if _provider is not None:
        return True
    if _metrics is None:
        return False
    # The API's own providers (the proxy that stands in until one is set, the no-op one)
    # record nothing; SDK and vendor providers live outside the API's package.
    provider = _metrics.get_meter_provider()
    return not type(provider).__module__.startswith("opentelemetry.metrics")


def recheck() -> None:
    """Look at the providers again at the next operation: one was given or taken back."""
    global _state
    with _lock:
        _state = (-1.0, False, False, _state[3] + 1)


def spans_recorded_when(check: Callable[[], bool]) -> None:
    """Make the package ask ``check`` (uncached) whether spans are recorded: the tracing
    module's.

    Example:
        >>> from langgraph_checkpoint_agent_memory.telemetry import tracing
        >>> spans_recorded_when(tracing.tracing_now)
    """
    _spans_now[0] = check
    recheck()


def current() -> tuple[float, bool, bool, int]:
    """What telemetry records: ``(until, spans, metrics, generation)``, looked at again at
    most every :data:`RECHECK_SECONDS` (a look at the global providers reads the
    environment, about 0.7 µs; an answer that holds costs a clock read)."""
    global _state
    state = _state
    now = time.monotonic()
    if now < state[0]:
        return state
    fresh = (now + RECHECK_SECONDS, _spans_now[0](), _metering_now(), state[3])
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


def metering() -> bool:
    """Whether metrics are recorded: ``opentelemetry-api`` is installed and the application
    gave a meter provider (to :func:`use_meter_provider`, or as OpenTelemetry's global one,
    seen within :data:`RECHECK_SECONDS` of being set).

    Example:
        >>> metering()
        False
    """
    return current()[2]


class Watched(Protocol):
    """A database whose connection pools the metrics report."""

    def pool_usage(self) -> list[PoolUsage]: ...


@dataclass
class Backlog:
    """Pending episodes in one database, as the last consolidation round there saw them
    (every memory on the database shares one: see :func:`backlog_of`).

    Args:
        attributes: What tells the database apart (``db.system.name``, ``server.address``,
            ``agent_memory.database``).
        pending: Episodes waiting to be consolidated (``None``: not known yet, so not
            reported).
        oldest_at: When the oldest of them was recorded (seconds since the epoch; ``None``:
            none pending); the gauge reports its age at each collection.
        parked: Episodes parked after failing ``max_attempts`` times, waiting for
            ``retry``.
    """

    attributes: dict[str, Any]
    pending: int | None = None
    oldest_at: float | None = None
    parked: int = 0


_databases: weakref.WeakSet[Any] = weakref.WeakSet()
_backlogs: weakref.WeakValueDictionary[tuple[Any, ...], Backlog] = weakref.WeakValueDictionary()


def backlog_of(attributes: dict[str, Any]) -> Backlog:
    """The backlog the consolidation gauges report for the database ``attributes`` name,
    while a memory holds it (memories on one database share it).

    Example:
        >>> backlog = backlog_of({"db.system.name": "sqlite"})
        >>> backlog is backlog_of({"db.system.name": "sqlite"})
        True
    """
    key = tuple(sorted(attributes.items()))
    with _lock:
        backlog = _backlogs.get(key)
        if backlog is None:
            backlog = _backlogs[key] = Backlog(dict(attributes))
        return backlog


def watch(database: Watched) -> None:
    """Report ``database``'s pools in the connection metrics while it lives.

    Example:
        >>> from langgraph_checkpoint_agent_memory.db.sqlite import SQLiteDatabase
        >>> watch(SQLiteDatabase(":memory:"))
    """
    with _lock:
        _databases.add(database)


def _usage() -> Iterator[PoolUsage]:
    with _lock:
        databases = list(_databases)
    for database in databases:
        try:
            yield from database.pool_usage()
        except Exception:  # a pool closing as it is read: reported at the next collection
            continue


def _observations(read: Callable[[], Iterable[tuple[float, dict[str, Any]]]]) -> Any:
    """An observable instrument's callback: ``read()``'s values, or none when reading them
    fails (a metrics reader's thread must not fail for the package's sake)."""

    def callback(options: Any) -> Iterable[Any]:
        assert _metrics is not None
        try:
            return [_metrics.Observation(value, extra) for value, extra in read()]
        except Exception:
            logger.warning("agent memory's metrics could not be read", exc_info=True)
            return []

    return callback


def _pools(
    read: Callable[[PoolUsage], Iterable[tuple[float, dict[str, Any]]]],
) -> Any:
    return _observations(
        lambda: [
            (value, {"db.client.connection.pool.name": u.name, **extra})
            for u in _usage()
            for value, extra in read(u)
        ]
    )


def _backlog(read: Callable[[Backlog, float], float | None]) -> Any:
    def values() -> list[tuple[float, dict[str, Any]]]:
        with _lock:
            backlogs = list(_backlogs.values())
        now = time.time()
        observed = ((read(b, now), b.attributes) for b in backlogs if b.pending is not None)
        return [(value, attributes) for value, attributes in observed if value is not None]

    return _observations(values)


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
            [_backlog(lambda b, now: b.pending)],
            unit="{episode}",
            description="Episodes waiting to be consolidated.",
        )
        meter.create_observable_gauge(
            "agent_memory.consolidation.oldest_pending_age",
            [_backlog(lambda b, now: None if b.oldest_at is None else max(now - b.oldest_at, 0))],
            unit="s",
            description="How long the oldest pending episode has waited.",
        )
        meter.create_observable_gauge(
            "agent_memory.consolidation.parked",
            [_backlog(lambda b, now: b.parked)],
            unit="{episode}",
            description="Episodes parked after failing every attempt, waiting for a retry.",
        )
        meter.create_observable_up_down_counter(
            "db.client.connection.count",
            [
                _pools(
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
            [_pools(lambda u: [(u.max, {})])],
            unit="{connection}",
            description="The most connections the pool opens.",
        )
        meter.create_observable_up_down_counter(
            "db.client.connection.pending_requests",
            [_pools(lambda u: [(u.pending, {})])],
            unit="{request}",
            description="Callers waiting for a connection of the pool.",
        )
        meter.create_observable_counter(
            "agent_memory.db.client.connection.wait_time",
            [_pools(lambda u: [(u.wait_seconds, {})])],
            unit="s",
            description="Seconds callers have waited for a connection of the pool.",
        )


#: The instruments made on each meter provider (once each: an instrument made again would
#: register its callbacks twice), and the last one used, with its provider, for a quick look.
_made: weakref.WeakKeyDictionary[Any, Instruments] = weakref.WeakKeyDictionary()
_last: list[tuple[Any, Instruments | None]] = [(None, None)]


def instruments() -> Instruments | None:
    """The instruments to record with, or ``None`` when metrics are off (see
    :func:`metering`); made once per meter provider.

    Example:
        >>> use_meter_provider(None)
        >>> instruments() is None or isinstance(instruments(), Instruments)
        True
    """
    if not current()[2]:
        return None
    assert _metrics is not None
    provider = _provider if _provider is not None else _metrics.get_meter_provider()
    used, made = _last[0]
    if used is not provider or made is None:
        with _lock:
            made = _made.get(provider)
            if made is None:
                made = _made[provider] = Instruments(provider)
        _last[0] = (provider, made)
    return made


def add(counter: str, amount: float, attributes: dict[str, Any] | None = None) -> None:
    """Add ``amount`` to the counter named by its attribute in :class:`Instruments`
    (``"bytes_written"``, ``"threads_swept"``, ...); nothing when metrics are off, and
    nothing but a log line when recording fails (telemetry never fails an operation).

    Example:
        >>> add("threads_swept", 2, {"db.system.name": "sqlite"})
    """
    made = instruments()
    if made is not None and amount:
        safely(getattr(made, counter).add, amount, attributes or {})


def cache_lookup(cache: str, hit: bool) -> None:
    """Count one look-up of the ranker's cache named ``cache``.

    Example:
        >>> cache_lookup("statistics", True)
    """
    made = instruments()
    if made is not None:
        attributes = {"agent_memory.cache.name": cache, "agent_memory.cache.hit": hit}
        safely(made.cache.add, 1, attributes)


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
