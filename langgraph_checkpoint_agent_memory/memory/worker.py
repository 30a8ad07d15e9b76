"""The background worker: consolidation, decay and TTL sweeps on their own schedules.

Any number of workers, in any number of processes, can run against one database: each job
leases its scope, decay is one idempotent statement, sweeps are single-flight. A failing
round is logged and retried at the next tick.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from langgraph_checkpoint_agent_memory.memory.context import Call, Steps

if TYPE_CHECKING:
    from langgraph_checkpoint_agent_memory.memory.agent import AgentMemory

logger = logging.getLogger(__name__)


@dataclass
class WorkerStats:
    rounds: int = 0
    consolidated: int = 0
    decayed: int = 0
    swept: int = 0
    #: Data keys destroyed that erases owed (their key store was down, or their process stopped).
    keys_destroyed: int = 0
    errors: list[str] = field(default_factory=list)


class MemoryWorker:
    """Periodic maintenance for one :class:`AgentMemory`.

    Args:
        memory: The memory to maintain.
        consolidate_every: Seconds between consolidation rounds.
        decay_every: Seconds between decay runs.
        sweep_every: Seconds between TTL sweeps of the store and the checkpointer, each
            followed by the destruction of the data keys erases still owe.
    """

    def __init__(
        self,
        memory: AgentMemory[Any],
        *,
        consolidate_every: float,
        decay_every: float,
        sweep_every: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.memory = memory
        self.every = {"consolidate": consolidate_every, "decay": decay_every, "sweep": sweep_every}
        self._clock = clock
        self._due = dict.fromkeys(self.every, 0.0)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._task: asyncio.Task[None] | None = None
        self._async_stop: asyncio.Event | None = None
        self.stats = WorkerStats()

    @property
    def running(self) -> bool:
        return (self._thread is not None and self._thread.is_alive()) or (
            self._task is not None and not self._task.done()
        )

    def _tick_seconds(self) -> float:
        return max(0.05, min(self.every.values()) / 2)

    def _due_now(self) -> list[str]:
        now = self._clock()
        due = [name for name, at in self._due.items() if now >= at]
        for name in due:
            self._due[name] = now + self.every[name]
        return due

    def run_once(self) -> WorkerStats:
        """Do whatever is due now, synchronously."""
        return self.memory.context.run_steps(self._round())

    async def arun_once(self) -> WorkerStats:
        return await self.memory.context.arun_steps(self._round())

    def _round(self) -> Steps[WorkerStats]:
        m, stats = self.memory, self.stats
        for name in self._due_now():
            try:
                if name == "consolidate":
                    stats.consolidated += (yield Call(m.consolidate, m.aconsolidate)).episodes
                elif name == "decay":
                    stats.decayed += yield Call(m.decay, m.adecay)
                else:
                    stats.swept += yield Call(m.sweep, m.asweep)
                    stats.keys_destroyed += yield Call(m.settle_erasures, m.asettle_erasures)
            except Exception as exc:
                self._failed(name, exc)
        stats.rounds += 1
        return stats

    def _failed(self, name: str, exc: BaseException) -> None:
        message = f"{name}: {type(exc).__name__}: {exc}"
        logger.warning("memory worker round failed, retrying next tick: %s", message)
        self.stats.errors = [*self.stats.errors[-9:], message]

    def start(self) -> None:
        if self.running:
            return
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._loop, name=f"agent-memory-worker-{id(self):x}", daemon=True
        )
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.run_once()
            self._stop.wait(self._tick_seconds())

    def stop(self, timeout: float | None = 30.0) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def run_forever(self) -> None:
        """Run in the calling thread until :meth:`stop` (or Ctrl-C)."""
        self._stop.clear()
        self._loop()

    async def astart(self) -> None:
        if self.running:
            return
        self._async_stop = asyncio.Event()
        self._task = asyncio.create_task(self._aloop(), name="agent-memory-worker")

    async def _aloop(self) -> None:
        assert self._async_stop is not None
        while not self._async_stop.is_set():
            await self.arun_once()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._async_stop.wait(), self._tick_seconds())

    async def astop(self) -> None:
        if self._async_stop is not None:
            self._async_stop.set()
        task, self._task = self._task, None
        if task is not None:
            await task
