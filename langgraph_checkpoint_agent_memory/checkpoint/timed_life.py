"""The life of each thread of a ``TimedInMemorySaver``: when it was last used, and what a
thread that ended (deleted or expired) leaves behind to refuse late writes.

Pure bookkeeping, no checkpoint data: the saver holds its lock around every call and frees the
thread's data itself when :meth:`ThreadLife.end` tells it the thread is over.
"""

from __future__ import annotations

from collections import OrderedDict

from langgraph_checkpoint_agent_memory.checkpoint.activity import (
    generation_boundary,
    is_late,
    thread_deleted,
)


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
        self.ttl_seconds = ttl_seconds
        self.tombstone_seconds = tombstone_seconds
        #: thread -> when it was last used; oldest first, so a sweep pops from the front
        self.last_used: OrderedDict[str, float] = OrderedDict()
        #: thread -> (when it was deleted or expired, where its history ended)
        self.tombstones: OrderedDict[str, tuple[float, str | None]] = OrderedDict()
        #: a thread started afresh -> where its previous history ended: writes naming a
        #: checkpoint at or below it are late
        self.floors: dict[str, str] = {}

    def touch(self, thread_id: str, now: float) -> None:
        """Record a use of ``thread_id`` at ``now``."""
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
        """Record that ``thread_id`` ended at ``now`` with ``newest`` its namespaces' latest
        checkpoints; it is no longer in use."""
        ended = generation_boundary(
            self.tombstones.get(thread_id, (now, None))[1],
            self.floors.pop(thread_id, None),
            *newest,
        )
        self.last_used.pop(thread_id, None)
        self.tombstones[thread_id] = (now, ended)
        self.tombstones.move_to_end(thread_id)

    def admit(self, thread_id: str, parent_id: str | None, own_id: str | None = None) -> None:
        """Refuse a late write into an ended thread (one naming a checkpoint of its ended
        history); on a fresh start, forget the tombstone and keep its boundary as a floor.

        Raises:
            ThreadDeletedError: The write is late.
        """
        tombstone = self.tombstones.get(thread_id)
        if tombstone is None:
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
        found: list[str] = []
        for thread_id, last in self.last_used.items():
            if len(found) >= most or now - last <= self.ttl_seconds:
                break
            found.append(thread_id)
        return found

    def forget_old_tombstones(self, now: float) -> None:
        """Drop tombstones older than ``tombstone_seconds``."""
        horizon = now - self.tombstone_seconds
        while self.tombstones and next(iter(self.tombstones.values()))[0] < horizon:
            self.tombstones.popitem(last=False)
