"""How importance fades: ``importance * rate ** days`` since last confirmed or recalled.

A decaying item stores ``ln(importance)`` and when it was last reinforced; its importance now
is computed, never rewritten, so nothing has to touch a million rows every night. Decay then
deletes, in one set-based statement, every unpinned item under the threshold (see
:func:`~langgraph_checkpoint_agent_memory.db.memory.decay_plan`). Confirmation and recall
restart the clock; pinned items never decay (:func:`~.writes.pin_plan`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from langgraph_checkpoint_agent_memory.db import memory as sqlm
from langgraph_checkpoint_agent_memory.db.database import Plan
from langgraph_checkpoint_agent_memory.errors import ConfigurationError
from langgraph_checkpoint_agent_memory.memory.model import Scope, ScopeLike

if TYPE_CHECKING:
    from langgraph_checkpoint_agent_memory.memory.context import MemoryContext

DAY = 86400.0
#: The floor stored for importance 0, so its logarithm exists (it decays away at once).
MIN_IMPORTANCE = 1e-6


@dataclass(frozen=True)
class DecayPolicy:
    """``rate`` per day (0 < rate <= 1; 1 never decays) and the deletion ``threshold``."""

    rate: float = 0.95
    threshold: float = 0.05

    def __post_init__(self) -> None:
        if not 0 < self.rate <= 1:
            raise ConfigurationError(f"decay rate must be in (0, 1], got {self.rate}")
        if not 0 <= self.threshold < 1:
            raise ConfigurationError(f"decay threshold must be in [0, 1), got {self.threshold}")

    @property
    def log_rate_per_second(self) -> float:
        return math.log(self.rate) / DAY

    @property
    def log_threshold(self) -> float:
        return math.log(max(self.threshold, MIN_IMPORTANCE / 10))

    def importance(self, log_importance: float, reinforced_at: float, now: float) -> float:
        """The decayed importance at ``now``."""
        return math.exp(log_importance + max(0.0, now - reinforced_at) * self.log_rate_per_second)


def log_importance(importance: float) -> float:
    return math.log(min(1.0, max(MIN_IMPORTANCE, importance)))


def decay_plan(context: MemoryContext, scope: ScopeLike | None) -> Plan[int]:
    """Delete the unpinned facts and episodes (of ``scope``, or all) whose importance
    decayed under the policy's threshold; returns how many."""
    return sqlm.decay_plan(
        context.sql,
        now=context.clock(),
        log_rate_per_second=context.policy.log_rate_per_second,
        log_threshold=context.policy.log_threshold,
        scope=None if scope is None else Scope.of(scope).key,
    )
