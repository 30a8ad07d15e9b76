"""A thread's lifetime, with no I/O: one TTL policy for every saver of the package.

``ttl_seconds`` is idle time, and an idle thread is invisible at once; the sweeper only frees
what readers already ignore. An ended thread leaves a tombstone recording where its history
ended (:func:`generation_boundary`), so a late write naming one of its checkpoints is refused
(:func:`is_late`), not resurrected. Activity lives in thread rows for the SQL saver
(:class:`ThreadActivity`), in memory for :class:`TimedInMemorySaver` (:class:`ThreadLife`).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal, NamedTuple

from langgraph_checkpoint_agent_memory.background import Sweeper
from langgraph_checkpoint_agent_memory.errors import ConfigurationError, ThreadDeletedError

logger = logging.getLogger(__name__)

#: The longest TTL: 2**31 - 1 seconds (about 68 years), what every database's TTL column
#: holds (``db.schema.MAX_TTL_SECONDS``; kept here so that no saver loads SQL to check it).
MAX_TTL_SECONDS = 2**31 - 1

#: Sweeps run at most this often and at least this rarely, whatever the TTL.
MIN_SWEEP_INTERVAL = 0.5
MAX_SWEEP_INTERVAL = 60.0


def validate_ttl(value: Any, name: str = "ttl_seconds") -> int | None:
    """Accept ``None``, ``0`` (off) or a whole number of seconds up to :data:`MAX_TTL_SECONDS`."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        hint = " (a database URL goes in url=)" if "://" in str(value) else ""
        raise ConfigurationError(
            f"{name} must be a whole number of seconds or None, got {type(value).__name__} "
            f"{value!r}{hint}"
        )
    if value < 0:
        raise ConfigurationError(f"{name} must be >= 0 (0 or None turns expiry off), got {value}")
    if value > MAX_TTL_SECONDS:
        raise ConfigurationError(
            f"{name} must be at most {MAX_TTL_SECONDS} seconds (about 68 years), got {value}"
        )
    return value or None


def thread_ttl(config: Mapping[str, Any], default: int | None) -> int | None:
    """The thread's own ``ttl_seconds`` in ``config`` (checked), else ``default``."""
    if (override := (config.get("configurable") or {}).get("ttl_seconds")) is None:
        return default
    return validate_ttl(override, name="config['configurable']['ttl_seconds']")


def sweep_interval(value: Any, ttl_seconds: int | None) -> float:
    """The seconds between sweeps: ``value``, or a tenth of the TTL kept between 0.5 s and
    60 s, so short TTLs free memory promptly and long ones do not wake a thread needlessly."""
    if value is None:
        bounded = min(MAX_SWEEP_INTERVAL, max(MIN_SWEEP_INTERVAL, (ttl_seconds or 0) / 10))
        return bounded if ttl_seconds else MAX_SWEEP_INTERVAL
    name = "sweep_interval_seconds"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigurationError(f"{name} must be a number of seconds, got {type(value).__name__}")
    if not 0 < value <= MAX_TTL_SECONDS:  # NaN fails both
        raise ConfigurationError(f"{name} must be > 0 and <= {MAX_TTL_SECONDS}, got {value}")
    return float(value)


Strategy = Literal["delete", "keep_latest"]
#: A "live after" bound that nothing expires before.
NEVER = -1e300
#: Without a TTL, a thread's activity row is written at most this often per process.
IDLE_TOUCH_SECONDS = 600.0
#: Threads whose last activity write this process remembers.
TOUCHED_THREADS = 10_000


def validate_strategy(strategy: Any, name: str = "strategy") -> Strategy:
    """What expiry (or ``prune``) does: ``"delete"`` the thread or ``"keep_latest"``."""
    if strategy not in ("delete", "keep_latest"):
        raise ConfigurationError(f"{name} must be 'delete' or 'keep_latest', got {strategy!r}")
    return strategy  # type: ignore[no-any-return]


def validate_keep_last(value: Any, name: str = "keep_last") -> int:
    """How many checkpoints of each namespace ``keep_latest`` keeps: a whole number >= 1."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigurationError(
            f"{name} must be a whole number of checkpoints, got {type(value).__name__} {value!r}"
        )
    if value < 1:
        raise ConfigurationError(
            f"{name} must be >= 1 (the latest checkpoint is always kept), got {value}"
        )
    return value


def tombstone_seconds(default: float, ttl_seconds: float | None) -> float:
    """How long a tombstone is kept: ``default``, never shorter than the TTL itself."""
    return max(default, float(ttl_seconds or 0))


def thread_deleted(thread_id: str, parent_id: str) -> ThreadDeletedError:
    return ThreadDeletedError(
        f"thread {thread_id!r} was deleted or expired; refusing a write that names its "
        f"checkpoint {parent_id!r}. Start the thread afresh (a config without "
        "checkpoint_id) or use a new thread_id."
    )


def generation_boundary(*checkpoint_ids: str | None) -> str | None:
    """Where a deleted or expired thread's history ended: the newest of its checkpoint ids
    (LangGraph's ids are time-ordered, so a fresh start's are newer), or ``None``."""
    return max((c for c in checkpoint_ids if c is not None), default=None)


def is_late(named: str | None, boundary: str | None) -> bool:
    """Whether a write into an ended thread names a checkpoint of its ended history (refused).
    One naming none or a newer one starts afresh: a fresh run's ``put_writes`` may come first."""
    return named is not None and boundary is not None and named <= boundary


class ThreadState(NamedTuple):
    """A thread's activity row (``select thread_state``)."""

    deleted_at: float | None
    expires_at: float | None
    ttl_seconds: int | None
    ended_after: str | None


class ThreadActivity:
    """The SQL saver's TTL policy (:class:`SQLSaver`'s arguments): thread rows, the live-after
    bound (``keep_latest`` keeps expired threads readable until swept), touch coalescing."""

    def __init__(
        self,
        ttl_seconds: int | None,
        strategy: Strategy,
        refresh_on_read: bool,
        activity_precision: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not 0 <= activity_precision <= 1:
            raise ConfigurationError(
                f"activity_precision must be between 0 and 1, got {activity_precision!r}"
            )
        self.ttl_seconds, self.strategy = ttl_seconds, strategy
        self.refresh_on_read = refresh_on_read
        self.precision = float(activity_precision)
        self.slack = 1 + self.precision
        self.clock = clock
        # thread -> (time this process last wrote its activity row, the TTL it wrote)
        self.touched: OrderedDict[str, tuple[float, int | None]] = OrderedDict()

    def live_after(self, now: float) -> float:
        """Threads that expired before this bound are invisible (none, for keep_latest)."""
        return now if self.strategy == "delete" else NEVER

    def is_gone(self, state: ThreadState, now: float) -> bool:
        """Whether a thread row is a tombstone or expired for readers as of ``now``."""
        return state.deleted_at is not None or (
            state.expires_at is not None and state.expires_at < self.live_after(now)
        )

    def thread_row(self, thread_id: str, now: float, ttl: int | None) -> dict[str, Any]:
        """Parameters of a live thread row active at ``now`` (with ``live_after``)."""
        return {
            "thread_id": thread_id,
            "last_active": now,
            "ttl_seconds": ttl,
            "expires_at": now + ttl * self.slack if ttl else None,
            "deleted_at": None,
            "ended_after": None,  # kept on an existing row: upserts leave it out
            "live_after": self.live_after(now),
        }

    def tombstone_rows(self, thread_ids: Sequence[str], now: float) -> list[dict[str, Any]]:
        """Parameters of the tombstones of ``thread_ids`` deleted at ``now``."""
        return [
            {
                "thread_id": t,
                "last_active": now,
                "ttl_seconds": None,
                "expires_at": None,
                "deleted_at": now,
                "ended_after": None,  # set from the thread's rows (end_generation)
            }
            for t in thread_ids
        ]

    def touch_due(self, thread_id: str, now: float, ttl: int | None) -> bool:
        """Whether this call must write the thread's activity row (see activity_precision)."""
        seen = self.touched.get(thread_id)
        if seen is None or seen[1] != ttl:
            return True
        every = ttl * self.precision if ttl else IDLE_TOUCH_SECONDS
        return now - seen[0] >= every

    def touched_at(self, thread_id: str, now: float, ttl: int | None) -> None:
        touched = self.touched
        touched[thread_id] = (now, ttl)
        touched.move_to_end(thread_id)
        while len(touched) > TOUCHED_THREADS:
            touched.popitem(last=False)

    def refresh_due(self, thread_id: str, now: float) -> bool:
        """Whether a refresh-on-read is due (a TTL to extend), then counted as written."""
        seen = self.touched.get(thread_id)
        ttl = seen[1] if seen is not None else self.ttl_seconds
        if not self.refresh_on_read or not ttl or not self.touch_due(thread_id, now, ttl):
            return False
        self.touched_at(thread_id, now, ttl)
        return True

    def refreshed(self, thread_id: str, due: bool, counts: Sequence[Any]) -> None:
        """A refresh that found no activity row (a new thread, or one written before the TTL
        was on) refreshed nothing: the next write must record the thread's activity."""
        if due and counts and not counts[0]:
            self.touched.pop(thread_id, None)

    def forget(self, thread_ids: set[str]) -> None:
        for thread_id in thread_ids:
            self.touched.pop(thread_id, None)


class ThreadLife:
    """Last use per thread, oldest first; tombstones of ended threads; floors of fresh starts.

    Args:
        ttl_seconds: Idle time after which a thread is expired.
        tombstone_seconds: How long an ended thread is remembered.

    Example:
        >>> life = ThreadLife(ttl_seconds=60, tombstone_seconds=3600)
        >>> life.touch("1", now=0.0)
        >>> life.expired("1", now=61.0)
        True
    """

    def __init__(self, ttl_seconds: float, tombstone_seconds: float) -> None:
        self.ttl_seconds, self.tombstone_seconds = ttl_seconds, tombstone_seconds
        #: thread -> when it was last used; oldest first, so a sweep pops from the front
        self.last_used: OrderedDict[str, float] = OrderedDict()
        #: thread -> (when it was deleted or expired, where its history ended)
        self.tombstones: OrderedDict[str, tuple[float, str | None]] = OrderedDict()
        #: a thread started afresh -> where its previous history ended: writes naming a
        #: checkpoint at or below it are late
        self.floors: dict[str, str] = {}

    def touch(self, thread_id: str, now: float) -> None:
        self.last_used[thread_id] = now
        self.last_used.move_to_end(thread_id)

    def expired(self, thread_id: str, now: float) -> bool:
        """Whether ``thread_id`` has been idle past the TTL (a thread never used is not)."""
        last = self.last_used.get(thread_id)
        return last is not None and now - last > self.ttl_seconds

    def needs_admission(self, thread_id: str, now: float) -> bool:
        """Whether a write must pass :meth:`admit`: the thread is new or idle. A thread in
        use never holds a tombstone, so only its floor (if any) needs checking."""
        last = self.last_used.get(thread_id)
        return last is None or now - last > self.ttl_seconds

    def end(self, thread_id: str, now: float, newest: list[str | None]) -> None:
        """``thread_id`` ended at ``now``, ``newest`` its namespaces' latest checkpoints."""
        ended = generation_boundary(
            self.tombstones.get(thread_id, (now, None))[1],
            self.floors.pop(thread_id, None),
            *newest,
        )
        self.last_used.pop(thread_id, None)
        self.tombstones[thread_id] = (now, ended)
        self.tombstones.move_to_end(thread_id)

    def admit(self, thread_id: str, parent_id: str | None, own_id: str | None = None) -> None:
        """Refuse a late write into an ended thread; a fresh start keeps the boundary as a floor."""
        if (tombstone := self.tombstones.get(thread_id)) is None:
            self.check_floor(thread_id, parent_id)
            return
        if is_late(parent_id, tombstone[1]) or is_late(own_id, tombstone[1]):
            raise thread_deleted(thread_id, parent_id or own_id or "")
        del self.tombstones[thread_id]
        if tombstone[1] is not None:
            self.floors[thread_id] = tombstone[1]

    def check_floor(self, thread_id: str, named: str | None) -> None:
        """Refuse a write into a thread started afresh that names its ended history."""
        if self.floors and is_late(named, self.floors.get(thread_id)):
            raise thread_deleted(thread_id, named or "")

    def took_history(self, thread_id: str) -> None:
        """``thread_id`` received a copied history: what it had ended no longer applies."""
        self.tombstones.pop(thread_id, None)
        self.floors.pop(thread_id, None)

    def idle(self, now: float, most: int) -> list[str]:
        """Up to ``most`` threads idle past the TTL, oldest first."""
        idle = itertools.takewhile(lambda t: now - t[1] > self.ttl_seconds, self.last_used.items())
        return [thread_id for thread_id, _ in itertools.islice(idle, most)]

    def forget_old_tombstones(self, now: float) -> None:
        horizon = now - self.tombstone_seconds
        while self.tombstones and next(iter(self.tombstones.values()))[0] < horizon:
            self.tombstones.popitem(last=False)


class SweeperHookup:
    """A saver's sweeper: one thread (holding it weakly) or task at a time, restartable."""

    def __init__(self, name: str, interval: float) -> None:
        self.name, self.interval = name, interval
        self.sweeper: Sweeper | None = None
        self.task: asyncio.Task[None] | None = None
        self._stopped = threading.Event()
        self._lock = threading.Lock()

    def after_fork(self) -> None:
        """A forked child has none of the parent's threads: the next write starts its own."""
        self.sweeper, self.task = None, None
        self._lock = threading.Lock()

    @property
    def started(self) -> bool:
        return self.sweeper is not None or self.task is not None

    @property
    def running(self) -> bool:
        return (self.sweeper is not None and self.sweeper.alive) or (
            self.task is not None and not self.task.done()
        )

    def start_thread(self, owner: object, method: str) -> None:
        """Call ``owner.<method>()`` every ``interval`` seconds in a daemon thread."""
        with self._lock:
            if self.sweeper is None or not self.sweeper.alive:
                self.sweeper = Sweeper(owner, method, self.interval, name=self.name)
                self.sweeper.start()

    def start_task(self, sweep: Callable[[], Awaitable[object]]) -> asyncio.Task[None]:
        """Await ``sweep()`` every ``interval`` seconds in a task of the running loop."""
        if self.task is None or self.task.done():
            self._stopped = threading.Event()
            self.task = asyncio.get_running_loop().create_task(
                self._sweep_forever(sweep, self._stopped)
            )
        return self.task

    def start(self, owner: object, method: str, asweep: Callable[[], Awaitable[object]]) -> None:
        """Start the task inside a running event loop, the thread elsewhere."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            self.start_thread(owner, method)
        else:
            self.start_task(asweep)

    async def _sweep_forever(
        self, sweep: Callable[[], Awaitable[object]], stopped: threading.Event
    ) -> None:
        # The flag, not only the cancellation, ends the loop: a pool may swallow a
        # cancellation that arrives while it hands over a connection (psycopg_pool before
        # 3.3), and the task would then sweep on forever with its saver closing under it.
        while not stopped.is_set():
            await asyncio.sleep(self.interval)
            if stopped.is_set():
                return
            try:
                await sweep()
            except Exception:  # the next sweep retries; never let the task die
                logger.exception("TTL sweep failed")

    def stop(self) -> asyncio.Task[None] | None:
        """Stop the thread (waiting for it) and cancel the task, returned for awaiting."""
        with self._lock:
            sweeper, self.sweeper = self.sweeper, None
        if sweeper is not None:
            sweeper.stop()
        task, self.task = self.task, None
        self._stopped.set()
        if task is not None and not task.done():
            task.cancel()
        return task
