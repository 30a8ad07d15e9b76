"""The background worker of an :class:`~.agent.AgentMemory`: consolidation, decay and
sweeps on the settings' intervals, in a daemon thread or an asyncio task."""

from __future__ import annotations

from typing import cast

from langgraph_checkpoint_agent_memory.memory.settings import MemorySettings
from langgraph_checkpoint_agent_memory.memory.worker import Maintained, MemoryWorker


class Running:
    """Starts and stops the worker of a memory (a part of :class:`~.agent.AgentMemory`)."""

    settings: MemorySettings
    _worker: MemoryWorker | None = None

    def worker(self) -> MemoryWorker:
        """The background worker (created once; :meth:`start` and :meth:`astart` run it)."""
        if self._worker is None:
            st = self.settings
            self._worker = MemoryWorker(
                cast(Maintained, self),  # the AgentMemory this is a part of
                consolidate_every=st.consolidate_every_seconds,
                decay_every=st.decay_every_seconds,
                sweep_every=st.sweep_every_seconds,
            )
        return self._worker

    def start(self) -> MemoryWorker:
        """Consolidate, decay and sweep in a daemon thread, on the settings' intervals
        (``consolidate_every_seconds``, ``decay_every_seconds``, ``sweep_every_seconds``).

        Returns:
            The running :class:`MemoryWorker`; :meth:`stop` stops it.

        Example:
            ```python
            memory.start()
            try:
                ...  # serve the app
            finally:
                memory.stop()
            ```
        """
        w = self.worker()
        w.start()
        return w

    def stop(self) -> None:
        """Stop the worker of :meth:`start`."""
        if self._worker is not None:
            self._worker.stop()

    async def astart(self) -> MemoryWorker:
        """:meth:`start` as an asyncio task of the running loop; stop it with :meth:`astop`."""
        w = self.worker()
        await w.astart()
        return w

    async def astop(self) -> None:
        """Stop the task of :meth:`astart`."""
        if self._worker is not None:
            await self._worker.astop()
