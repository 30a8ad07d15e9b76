"""Thread expiry and the background sweeper, shared by the in-memory and the SQL savers.

``ttl_seconds`` is idle time: every read or write of a thread counts as activity. Readers
treat an expired thread as gone at once; the sweeper only frees what readers already ignore,
so the eviction delay bound is ``ttl + sweep interval`` for memory, never for visibility.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)

#: Sweeps run at most this often and at least this rarely, whatever the TTL.
MIN_SWEEP_INTERVAL = 0.5
MAX_SWEEP_INTERVAL = 60.0


def validate_ttl(value: Any, name: str = "ttl_seconds") -> int | None:
    """Accept ``None``, ``0`` (off) or a positive whole number of seconds; name the culprit."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(
            f"{name} must be a whole number of seconds or None, got {type(value).__name__} "
            f"{value!r}"
        )
    if value < 0:
        raise ValueError(f"{name} must be >= 0 (0 or None turns expiry off), got {value}")
    return value or None


def validate_interval(value: Any, name: str = "sweep_interval_seconds") -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, got {type(value).__name__}")
    if not value > 0:
        raise ValueError(f"{name} must be > 0, got {value}")
    return float(value)


def default_sweep_interval(ttl_seconds: float) -> float:
    """A tenth of the TTL, kept between 0.5 s and 60 s.

    Short TTLs (tests, kiosks) free memory promptly; long ones do not wake a thread needlessly.
    """
    return min(MAX_SWEEP_INTERVAL, max(MIN_SWEEP_INTERVAL, ttl_seconds / 10))


class Sweeper:
    """A stoppable daemon thread that calls ``owner.<method>()`` every ``interval`` seconds.

    It holds its owner weakly: when the owner is garbage collected the thread notices at once
    (a finalizer wakes it) and exits, so no sweeper outlives the saver that started it.
    """

    def __init__(self, owner: object, method: str, interval: float, name: str) -> None:
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run,
            args=(weakref.ref(owner), method, interval, self._stop),
            name=name,
            daemon=True,
        )
        self._finalizer = weakref.finalize(owner, self._stop.set)

    def start(self) -> None:
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self, timeout: float | None = 5.0) -> None:
        """Ask the thread to stop and wait for it (unless called from the thread itself)."""
        self._stop.set()
        self._finalizer.detach()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    @staticmethod
    def _run(
        ref: Callable[[], object | None], method: str, interval: float, stop: threading.Event
    ) -> None:
        while not stop.wait(interval):
            owner = ref()
            if owner is None:
                return
            try:
                getattr(owner, method)()
            except Exception:  # a failed sweep must not kill the sweeper; the next one retries
                logger.exception("TTL sweep failed; retrying in %.1f s", interval)
            del owner
