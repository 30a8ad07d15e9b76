"""Starting and stopping a saver's background sweep: a daemon thread for sync code, a task of
the running event loop for async code. Shared by every saver of the package."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable

from langgraph_checkpoint_agent_memory.background import Sweeper

logger = logging.getLogger(__name__)


class SweeperHookup:
    """The sweeper of one saver: at most one thread or task at a time, restartable.

    The thread holds its saver weakly (see :class:`Sweeper`), so this object never keeps the
    saver alive; the task runs a coroutine the saver gives it and is cancelled by
    :meth:`stop`.

    Args:
        name: The thread's name, e.g. ``"SQLSaver-sweeper-7f3a"``.
        interval: Seconds between sweeps.
    """

    def __init__(self, name: str, interval: float) -> None:
        self.name = name
        self.interval = interval
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
        """Stop the thread (waiting for it) and cancel the task; return the task, if any, for
        an async caller to await."""
        with self._lock:
            sweeper, self.sweeper = self.sweeper, None
        if sweeper is not None:
            sweeper.stop()
        task, self.task = self.task, None
        self._stopped.set()
        if task is not None and not task.done():
            task.cancel()
        return task
