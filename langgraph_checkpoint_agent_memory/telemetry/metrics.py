"""Metrics of the package's operations, by OpenTelemetry's conventions (the user guide's
table lists them). While no meter provider is set, :func:`instruments` returns ``None`` after
a cached check, and nothing is measured."""

from __future__ import annotations

import functools
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

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
    from langgraph_checkpoint_agent_memory.db.database import Database, PoolUsage

#: Bucket bounds of the duration histograms (s), as the database conventions advise.
DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0)
POOL, STATE = "db.client.connection.pool.name", "db.client.connection.state"


#: Record the package's metrics with a meter provider of its own (see :meth:`.Provider.use`).
use_meter_provider = METER.use


def metering() -> bool:
    """Whether metrics are recorded: a meter provider was given to :func:`use_meter_provider`
    or set as OpenTelemetry's global one (seen within ``RECHECK_SECONDS``).

    Example:
        >>> metering()
        False
    """
    return current()[2]


@dataclass
class Backlog:
    """Pending episodes in one database (named by ``attributes``), as its last consolidation
    round saw them (see :func:`backlog_of`). ``None``: ``pending`` not known yet, or no
    ``oldest_at`` (none pending); ``parked``: failed ``max_attempts`` times, awaiting ``retry``."""

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
        if (backlog := _backlogs.get(key)) is None:
            backlog = _backlogs[key] = Backlog(dict(attributes))
        return backlog


def watch(database: Database[Any]) -> None:
    """Report ``database``'s pools and waits in the connection metrics while it lives."""
    from langgraph_checkpoint_agent_memory.db.database import connection_waits

    with _lock:
        _databases.add(database)
        if _waited not in connection_waits:
            connection_waits.append(_waited)


def _waited(pool: str, seconds: float) -> None:
    if (made := instruments()) is not None:
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


#: The counters, ``name: (unit, description)`` (:func:`add` knows each by its name's last part).
COUNTERS = {
    "agent_memory.checkpoint.bytes_written": ("By", "Checkpoint, blob and write bytes stored."),
    "agent_memory.checkpoint.threads_swept": ("{thread}", "Expired threads removed by sweeps."),
    "agent_memory.store.items_swept": ("{item}", "Expired store items removed by sweeps."),
    "agent_memory.consolidation.jobs": ("{job}", "Consolidation jobs run, by status."),
    "agent_memory.ranker.cache.requests": ("{request}", "Look-ups of the ranker's caches."),
}
#: The instruments read at each collection: ``name: (unit, description, values, kind)``.
GAUGE, UP_DOWN = "gauge", "up_down_counter"
OBSERVED: dict[str, tuple[str, str, Observed, str]] = {
    "agent_memory.consolidation.backlog": (
        "{episode}",
        "Episodes waiting.",
        _backlog(lambda b, _: b.pending),
        GAUGE,
    ),
    "agent_memory.consolidation.oldest_pending_age": (
        "s",
        "How long the oldest pending episode has waited.",
        _backlog(lambda b, now: None if b.oldest_at is None else max(now - b.oldest_at, 0)),
        GAUGE,
    ),
    "agent_memory.consolidation.parked": (
        "{episode}",
        "Episodes whose every attempt failed.",
        _backlog(lambda b, _: b.parked),
        GAUGE,
    ),
    "db.client.connection.count": (
        "{connection}",
        "Connections of the pool, by state.",
        _pools(lambda u: [(u.idle, {STATE: "idle"}), (u.used, {STATE: "used"})]),
        UP_DOWN,
    ),
    "db.client.connection.max": (
        "{connection}",
        "The pool's size limit.",
        _pools(lambda u: [(u.max, {})]),
        UP_DOWN,
    ),
    "db.client.connection.pending_requests": (
        "{request}",
        "Callers waiting.",
        _pools(lambda u: [(u.pending, {})]),
        UP_DOWN,
    ),
}


def _callback(read: Observed, observation: Any) -> Callable[[Any], Iterable[Any]]:
    """``read()``'s values, or none when reading fails (the reader's thread must not fail)."""

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
            name.rsplit(".", 1)[1]: meter.create_counter(name, unit=unit, description=desc)
            for name, (unit, desc) in COUNTERS.items()
        }
        observation = METER.module().Observation
        for name, (unit, description, read, kind) in OBSERVED.items():
            make = getattr(meter, f"create_observable_{kind}")
            make(name, [_callback(read, observation)], unit=unit, description=description)


#: The instruments made on each meter provider (made again, an instrument would register
#: its callbacks twice), and the last ones used, with their provider.
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
            if (made := _made.get(provider)) is None:
                made = _made[provider] = Instruments(provider)
        _last[0] = (provider, made)
    return made


def add(counter: str, amount: float, attributes: dict[str, Any] | None = None) -> None:
    """Add ``amount`` to the counter of :data:`COUNTERS` whose name ends in ``counter``
    (``"threads_swept"``); nothing when metrics are off, a log line when recording fails.

    Example:
        >>> add("threads_swept", 2, {"db.system.name": "sqlite"})
    """
    if (made := instruments()) is not None and amount:
        safely(made.counters[counter].add, amount, attributes or {})


def cache_lookup(cache: str, hit: bool) -> None:
    """Count one look-up of the ranker's cache named ``cache``."""
    add("requests", 1, {"agent_memory.cache.name": cache, "agent_memory.cache.hit": hit})
