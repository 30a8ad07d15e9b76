"""Background work with no SQL, below every component: the checkpointers and the store sweep
with it without depending on each other."""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable

from typing_extensions import Self

logger = logging.getLogger(__name__)


class Sweeper:
    """A stoppable daemon thread that calls ``owner.<method>()`` every ``interval`` seconds,
    holding its owner weakly: a finalizer stops it when the owner is garbage collected."""

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
            if (owner := ref()) is None:
                return
            try:
                getattr(owner, method)()
            except Exception:  # a failed sweep must not kill the sweeper; the next one retries
                logger.exception("TTL sweep failed; retrying in %.1f s", interval)
            del owner


class ClosesOnExit:
    """``with`` and ``async with`` for an object with ``close()`` and ``aclose()`` (which the
    class using the mixin provides)."""

    def close(self) -> None: ...
    async def aclose(self) -> None: ...

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
