"""Reading a memory as it is stored: the public ``facts``, ``history`` and ``episodes`` of an
:class:`~.agent.AgentMemory` (sync and async), over the plans of :mod:`.reading`."""

from __future__ import annotations

from langgraph_checkpoint_agent_memory.memory import reading as R
from langgraph_checkpoint_agent_memory.memory.context import MemoryContext
from langgraph_checkpoint_agent_memory.memory.model import AsOf, Episode, Fact, ScopeLike


class Reads:
    """What a memory holds, read (a part of :class:`~.agent.AgentMemory`)."""

    context: MemoryContext

    def facts(
        self, scope: ScopeLike, *, as_of: AsOf | None = None, known_at: AsOf | None = None
    ) -> list[Fact]:
        """The scope's current facts, by attribute; or, with ``as_of``, the facts that held
        at that moment; with ``known_at``, as the memory believed them at that moment.

        Args:
            scope: A :class:`Scope`, ``"user=alice"`` or ``{"user": "alice"}``.
            as_of: A moment (seconds since the epoch, or a timezone-aware ``datetime``; a
                naive one raises ``ConfigurationError``): the facts learned by then and not
                yet superseded, each as it was held then (a value superseded later is shown
                current, with ``valid_to`` unset). Times are those of the episodes that stated
                the facts. Confirmations and importance are today's; facts that decayed or
                were erased are gone.
            known_at: A moment (transaction time): what the memory believed then: only what
                it had learned by then, before the corrections it learned later (``as_of``
                defaults to this moment: "what did we believe on D was true on D").

        Example:
            ```python
            from datetime import datetime, timezone

            for fact in memory.facts("user=alice"):
                print(fact.attribute, fact.value)
            before = memory.facts("user=alice", as_of=datetime(2024, 1, 1, tzinfo=timezone.utc))
            new_year = datetime(2024, 1, 1, tzinfo=timezone.utc)
            believed = memory.facts("user=alice", known_at=new_year)
            ```
        """
        return self.context.run(lambda: R.facts_plan(self.context, scope, as_of, known_at))

    async def afacts(
        self, scope: ScopeLike, *, as_of: AsOf | None = None, known_at: AsOf | None = None
    ) -> list[Fact]:
        """Async :meth:`facts`."""
        return await self.context.arun(lambda: R.facts_plan(self.context, scope, as_of, known_at))

    def history(
        self,
        scope: ScopeLike,
        attribute: str | None = None,
        *,
        as_of: AsOf | None = None,
        known_at: AsOf | None = None,
    ) -> list[Fact]:
        """Every value an attribute had (all attributes when ``None``), oldest first; the
        current one last, with ``valid_to`` unset.

        Args:
            scope: Whose facts.
            attribute: One attribute (``"home city"`` and ``home_city`` are one); ``None``:
                all.
            as_of: A moment (seconds since the epoch, or a timezone-aware ``datetime``): the
                history as it was known then: values learned later are left out, and the
                value current then has ``valid_to`` unset.
            known_at: A moment (transaction time): the history as the memory recorded it
                then; default now, where a version a correction replaced is left out.

        Example:
            ```python
            for version in memory.history("user=alice", "city"):
                print(version.value, version.valid_from, version.valid_to)
            ```
        """
        return self.context.run(
            lambda: R.history_plan(self.context, scope, attribute, as_of, known_at)
        )

    async def ahistory(
        self,
        scope: ScopeLike,
        attribute: str | None = None,
        *,
        as_of: AsOf | None = None,
        known_at: AsOf | None = None,
    ) -> list[Fact]:
        """Async :meth:`history`."""
        return await self.context.arun(
            lambda: R.history_plan(self.context, scope, attribute, as_of, known_at)
        )

    def episodes(self, scope: ScopeLike, *, status: str | None = None) -> list[Episode]:
        """The scope's episodes (recorded turns), oldest first.

        Args:
            scope: Whose episodes.
            status: Only ``"pending"`` (not consolidated yet), ``"done"`` or ``"parked"``
                (failed too often; see :meth:`retry`); ``None``: all.

        Example:
            ```python
            waiting = memory.episodes("user=alice", status="pending")
            ```
        """
        return self.context.run(lambda: R.episodes_plan(self.context, scope, status))

    async def aepisodes(self, scope: ScopeLike, *, status: str | None = None) -> list[Episode]:
        """Async :meth:`episodes`."""
        return await self.context.arun(lambda: R.episodes_plan(self.context, scope, status))
