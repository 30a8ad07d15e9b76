"""Metrics of the package's operations, by OpenTelemetry's conventions.

Instruments (the meter is named :data:`SCOPE`; the user guide's table lists each with its
unit, and a test holds the two together):

- ``db.client.operation.duration`` (s): each saver and store operation, by
  ``db.system.name``, ``db.namespace``, ``db.operation.name``, ``db.collection.name``,
  ``error.type`` and ``db.response.status_code``;
- ``agent_memory.operation.duration`` (s): each memory operation, and each of
  ``TimedInMemorySaver``'s, by ``agent_memory.operation.name``;
- ``agent_memory.checkpoint.bytes_written``, ``agent_memory.checkpoint.threads_swept``,
  ``agent_memory.store.items_swept``, ``agent_memory.consolidation.jobs`` (by
  ``agent_memory.job.status``), ``agent_memory.ranker.cache.requests`` (by
  ``agent_memory.cache.name`` and ``agent_memory.cache.hit``): counters;
- ``agent_memory.consolidation.backlog``, ``.oldest_pending_age`` and ``.parked``: pending
  episodes per database, as the last consolidation round there saw them (the age measured
  at each collection);
- ``db.client.connection.count`` (by ``db.client.connection.state``),
  ``db.client.connection.max``, ``db.client.connection.pending_requests`` and
  ``db.client.connection.wait_time`` (s, each wait for a connection), per
  ``db.client.connection.pool.name``.

No cost when off: while no meter provider is set, :func:`instruments` returns ``None`` after
a cached check, and nothing is measured.
"""

from __future__ import annotations

import functools
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from langgraph_checkpoint_agent_memory.telemetry import (
    METER,
    SCOPE,
    _lock,
    current,
    logger,
    safely,
    version,
)

if TYPE_CHECKING:
    from langgraph_checkpoint_agent_memory.db.database import PoolUsage

#: Bucket bounds of the duration histograms (s), as OpenTelemetry's database conventions
#: advise.
DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0)
POOL = "db.client.connection.pool.name"


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
    METER.use(provider)


def metering() -> bool:
    """Whether metrics are recorded: the application gave a meter provider (to
    :func:`use_meter_provider`, or as OpenTelemetry's global one, seen within
    :data:`~langgraph_checkpoint_agent_memory.telemetry.RECHECK_SECONDS` of being set).

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
    """Report ``database``'s pools in the connection metrics while it lives, and the waits
    for their connections.

    Example:
        >>> from langgraph_checkpoint_agent_memory.db.sqlite import SQLiteDatabase
        >>> watch(SQLiteDatabase(":memory:"))
    """
    from langgraph_checkpoint_agent_memory.db.database import connection_waits

    with _lock:
        _databases.add(database)
        if _waited not in connection_waits:
            connection_waits.append(_waited)


def _waited(pool: str, seconds: float) -> None:
    """Record a wait of ``seconds`` for a connection of ``pool`` (told by the pools)."""
    made = instruments()
    if made is not None:
        safely(made.connection_wait.record, seconds, {POOL: pool})


def _usage() -> Iterator[PoolUsage]:
    with _lock:
        databases = list(_databases)
    for database in databases:
        try:
            yield from database.pool_usage()
        except Exception:  # a pool closing as it is read: reported at the next collection
            continue


#: What an observable instrument reports: ``(value, attributes)`` pairs, read at collection.
Observed = Callable[[], Iterable[tuple[float, dict[str, Any]]]]


def _pools(read: Callable[[PoolUsage], Iterable[tuple[float, dict[str, Any]]]]) -> Observed:
    return lambda: [(value, {POOL: u.name, **extra}) for u in _usage() for value, extra in read(u)]


def _backlog(read: Callable[[Backlog, float], float | None]) -> Observed:
    def values() -> list[tuple[float, dict[str, Any]]]:
        with _lock:
            backlogs = list(_backlogs.values())
        now = time.time()
        observed = ((read(b, now), b.attributes) for b in backlogs if b.pending is not None)
        return [(value, attributes) for value, attributes in observed if value is not None]

    return values


def _oldest_age(backlog: Backlog, now: float) -> float | None:
    return None if backlog.oldest_at is None else max(now - backlog.oldest_at, 0)


#: The counters, by the name :func:`add` knows them by: (instrument, unit, description).
COUNTERS = {
    "bytes_written": (
        "agent_memory.checkpoint.bytes_written",
        "By",
        "Bytes of checkpoints, channel values and writes stored.",
    ),
    "threads_swept": (
        "agent_memory.checkpoint.threads_swept",
        "{thread}",
        "Expired checkpointer threads removed (or pruned) by sweeps.",
    ),
    "items_swept": (
        "agent_memory.store.items_swept",
        "{item}",
        "Expired store items removed by sweeps.",
    ),
    "jobs": (
        "agent_memory.consolidation.jobs",
        "{job}",
        "Consolidation jobs run, by agent_memory.job.status.",
    ),
    "cache": (
        "agent_memory.ranker.cache.requests",
        "{request}",
        "Look-ups of the search ranker's caches, by cache and hit.",
    ),
}

#: The instruments read at each collection: (kind, instrument, unit, description, read).
OBSERVED: list[tuple[str, str, str, str, Observed]] = [
    (
        "gauge",
        "agent_memory.consolidation.backlog",
        "{episode}",
        "Episodes waiting to be consolidated.",
        _backlog(lambda b, now: b.pending),
    ),
    (
        "gauge",
        "agent_memory.consolidation.oldest_pending_age",
        "s",
        "How long the oldest pending episode has waited.",
        _backlog(_oldest_age),
    ),
    (
        "gauge",
        "agent_memory.consolidation.parked",
        "{episode}",
        "Episodes parked after failing every attempt, waiting for a retry.",
        _backlog(lambda b, now: b.parked),
    ),
    (
        "up_down_counter",
        "db.client.connection.count",
        "{connection}",
        "Connections of the pool, by state.",
        _pools(
            lambda u: [
                (u.idle, {"db.client.connection.state": "idle"}),
                (u.used, {"db.client.connection.state": "used"}),
            ]
        ),
    ),
    (
        "up_down_counter",
        "db.client.connection.max",
        "{connection}",
        "The most connections the pool opens.",
        _pools(lambda u: [(u.max, {})]),
    ),
    (
        "up_down_counter",
        "db.client.connection.pending_requests",
        "{request}",
        "Callers waiting for a connection of the pool.",
        _pools(lambda u: [(u.pending, {})]),
    ),
]


def _callback(read: Observed, observation: Any) -> Callable[[Any], Iterable[Any]]:
    """An observable instrument's callback: ``read()``'s values, or none when reading them
    fails (a metrics reader's thread must not fail for the package's sake)."""

    def callback(options: Any) -> Iterable[Any]:
        try:
            return [observation(value, extra) for value, extra in read()]
        except Exception:
            logger.warning("agent memory's metrics could not be read", exc_info=True)
            return []

    return callback


class Instruments:
    """The package's instruments on one meter provider (see the module's text)."""

    def __init__(self, provider: Any) -> None:
        meter = provider.get_meter(SCOPE, version())
        histogram = functools.partial(
            meter.create_histogram, unit="s", explicit_bucket_boundaries_advisory=DURATION_BUCKETS
        )
        self.db_duration = histogram(
            "db.client.operation.duration", description="Duration of database client operations."
        )
        self.memory_duration = histogram(
            "agent_memory.operation.duration", description="Duration of agent memory operations."
        )
        self.connection_wait = histogram(
            "db.client.connection.wait_time",
            description="The time it took to obtain an open connection from the pool.",
        )
        self.counters = {
            key: meter.create_counter(name, unit=unit, description=description)
            for key, (name, unit, description) in COUNTERS.items()
        }
        observation = METER.module().Observation
        for kind, name, unit, description, read in OBSERVED:
            make = getattr(meter, f"create_observable_{kind}")
            make(name, [_callback(read, observation)], unit=unit, description=description)


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
    provider = METER.current()
    used, made = _last[0]
    if used is not provider or made is None:
        with _lock:
            made = _made.get(provider)
            if made is None:
                made = _made[provider] = Instruments(provider)
        _last[0] = (provider, made)
    return made


def add(counter: str, amount: float, attributes: dict[str, Any] | None = None) -> None:
    """Add ``amount`` to the counter :data:`COUNTERS` names ``counter``
    (``"bytes_written"``, ``"threads_swept"``, ...); nothing when metrics are off, and
    nothing but a log line when recording fails (telemetry never fails an operation).

    Example:
        >>> add("threads_swept", 2, {"db.system.name": "sqlite"})
    """
    made = instruments()
    if made is not None and amount:
        safely(made.counters[counter].add, amount, attributes or {})


def cache_lookup(cache: str, hit: bool) -> None:
    """Count one look-up of the ranker's cache named ``cache``.

    Example:
        >>> cache_lookup("statistics", True)
    """
    add("cache", 1, {"agent_memory.cache.name": cache, "agent_memory.cache.hit": hit})
