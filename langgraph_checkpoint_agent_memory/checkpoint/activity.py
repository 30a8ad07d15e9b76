"""The thread-activity and TTL policy, with no I/O: one policy for every saver of the package.

``ttl_seconds`` is idle time: every read or write of a thread counts as activity, and an idle
thread is invisible at once, before any sweep. A deleted or expired thread leaves a
*tombstone* that records where its history ended (:func:`generation_boundary`), so a late
write that names one of its checkpoints is refused with :class:`ThreadDeletedError` rather
than resurrecting it (:func:`is_late`); a write with no parent, or naming a newer checkpoint,
starts the thread afresh. Tombstones are forgotten after :func:`tombstone_seconds`.

:class:`TimedInMemorySaver` keeps activity in a dict ordered by last use; the SQL saver keeps
it in each thread's row (``expires_at``) and coalesces the writes of that row
(:class:`ThreadActivity`): at most once per ``activity_precision`` of the TTL per thread and
process, with expiry pushed out by the same slack.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, Literal, NamedTuple

from langchain_core.runnables import RunnableConfig

from langgraph_checkpoint_agent_memory.checkpoint.ttl import thread_ttl
from langgraph_checkpoint_agent_memory.errors import ConfigurationError, ThreadDeletedError

Strategy = Literal["delete", "keep_latest"]
#: A "live after" bound that nothing expires before.
NEVER = -1e300
#: Without a TTL, a thread's activity row is written at most this often per process.
IDLE_TOUCH_SECONDS = 600.0
#: Threads whose last activity write this process remembers.
TOUCHED_THREADS = 10_000


def validate_strategy(strategy: Any) -> Strategy:
    """What expiry does: ``"delete"`` the thread or ``"keep_latest"`` of each namespace."""
    if strategy not in ("delete", "keep_latest"):
        raise ConfigurationError(f"strategy must be 'delete' or 'keep_latest', got {strategy!r}")
    return strategy  # type: ignore[no-any-return]


def validate_prune_strategy(strategy: str) -> None:
    """``prune(strategy=...)`` takes the same two strategies; say which when it is neither."""
    if strategy not in ("keep_latest", "delete"):
        raise ConfigurationError(
            f"unknown prune strategy {strategy!r}; use 'keep_latest' or 'delete'"
        )


def validate_keep_last(value: Any, name: str = "keep_last") -> int:
    """How many checkpoints of each namespace ``keep_latest`` keeps: a whole number >= 1.

    Raises:
        ConfigurationError: ``value`` is not a whole number, or is below 1 (a ``ValueError``).
    """
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
    """The error for a late write into a deleted or expired thread."""
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
    """Whether a write into a deleted or expired thread names a checkpoint of the history
    that ended (its parent, or for ``put_writes`` its checkpoint): refused, as it would
    resurrect that history. A write naming none, or a newer one, starts the thread afresh:
    LangGraph sends a fresh run's ``put_writes`` while its first ``put`` is still on its
    way, so either may arrive first."""
    return named is not None and boundary is not None and named <= boundary


class ThreadState(NamedTuple):
    """A thread's activity row (``select thread_state``)."""

    deleted_at: float | None
    expires_at: float | None
    ttl_seconds: int | None
    ended_after: str | None


class ThreadActivity:
    """The SQL saver's TTL policy: thread rows, the live-after bound, touch coalescing.

    Args:
        ttl_seconds: The saver's TTL (validated); ``None`` when off.
        strategy: ``"delete"``: an expired thread is invisible at once; ``"keep_latest"``:
            it stays readable (the sweep prunes it), so nothing is ever expired for a reader.
        refresh_on_read: Whether reads extend a thread's expiry.
        activity_precision: Fraction of the TTL within which a thread's activity is written
            at most once per thread and process (see :class:`SQLSaver`).
        clock: Wall clock in seconds since the epoch.
    """

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
        self.ttl_seconds = ttl_seconds
        self.strategy = strategy
        self.refresh_on_read = refresh_on_read
        self.precision = float(activity_precision)
        self.slack = 1 + self.precision
        self.clock = clock
        # thread -> (time this process last wrote its activity row, the TTL it wrote)
        self.touched: OrderedDict[str, tuple[float, int | None]] = OrderedDict()

    def live_after(self, now: float) -> float:
        """Threads that expired before this bound are invisible (never, for keep_latest)."""
        return now if self.strategy == "delete" else NEVER

    def is_gone(self, state: ThreadState, now: float) -> bool:
        """Whether a thread row is a tombstone or expired for readers as of ``now``."""
        return state.deleted_at is not None or (
            state.expires_at is not None and state.expires_at < self.live_after(now)
        )

    def thread_ttl(self, config: RunnableConfig) -> int | None:
        """The TTL of the thread ``config`` names: its own ``ttl_seconds`` or the saver's."""
        return thread_ttl(config, self.ttl_seconds)

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
        """Record that the thread's activity row was written at ``now``."""
        touched = self.touched
        touched[thread_id] = (now, ttl)
        touched.move_to_end(thread_id)
        while len(touched) > TOUCHED_THREADS:
            touched.popitem(last=False)

    def refresh_due(self, thread_id: str, now: float) -> bool:
        """Refresh-on-read, when due (only threads with a TTL have expiry to extend); a due
        refresh counts as written."""
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
        """Forget the activity written for threads that were deleted or pruned."""
        for thread_id in thread_ids:
            self.touched.pop(thread_id, None)
