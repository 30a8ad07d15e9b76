"""What an :class:`~.agent.AgentMemory` can be tuned with: :class:`MemorySettings`, and the
keyword options of ``record``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypedDict

from langgraph_checkpoint_agent_memory import settings as config_registry
from langgraph_checkpoint_agent_memory.errors import ConfigurationError
from langgraph_checkpoint_agent_memory.memory.model import SCOPE_KEYS, check_count

#: The settings that count something: whole numbers >= 1.
_COUNTS = (
    "budget_tokens",
    "episode_candidates",
    "max_episodes_per_job",
    "relevant_facts",
    "max_attempts",
)
#: The settings that are finite numbers >= 0: whether 0 is refused too (a loop's wait, a lease).
_NUMBERS = {
    "time_weight": False,
    "link_weight": False,
    "half_life_days": True,
    "lease_seconds": True,
    "backoff_seconds": False,
    "reinforce_every_seconds": False,
    "consolidate_every_seconds": True,
    "decay_every_seconds": True,
    "sweep_every_seconds": True,
}


@dataclass(frozen=True)
class RecallWeights:
    """How past episodes are ranked (see :mod:`.recall`)."""

    relevance: float = 0.6
    recency: float = 0.2
    importance: float = 0.2
    half_life_days: float = 30.0


@dataclass(frozen=True)
class MemorySettings:
    """Every tunable of :class:`AgentMemory`.

    Each can be passed to ``AgentMemory(...)``, or changed by operators without code through
    an ``@agent_config("config.memory.<name>", ...)`` field; an argument wins over a field,
    a field over the default.
    """

    namespace_root: str = "memory"
    #: Which configurable keys make a run's scope: the isolation mode (see ``nodes``).
    scope_keys: tuple[str, ...] = SCOPE_KEYS
    budget_tokens: int = 1000
    #: Past episodes considered by recall before ranking.
    episode_candidates: int = 20
    relevance_weight: float = 0.6
    recency_weight: float = 0.2
    importance_weight: float = 0.2
    half_life_days: float = 30.0
    #: Added to an episode's score when it happened inside the time a question names ("last
    #: week", "in May 2023"); 0 turns it off. Measured on LoCoMo: 0.1-0.2 gain and lose
    #: nothing, 0.4 and more lose as many as they gain.
    time_weight: float = 0.2
    #: How much facts and episodes vouch for each other in recall (see ``recall.linked``);
    #: 0 turns it off. Measured on LoCoMo (the user guide gives the figures).
    link_weight: float = 0.5
    max_episodes_per_job: int = 20
    #: Current facts shown to the extractor (top-k by relevance, so cost does not grow).
    relevant_facts: int = 20
    lease_seconds: float = 300.0
    max_attempts: int = 3
    backoff_seconds: float = 30.0
    decay_rate: float = 0.95
    decay_threshold: float = 0.05
    near_duplicate_threshold: float = 0.92
    near_duplicate_words: float = 0.8
    #: A recalled item is reinforced at most this often (recall must not write every step).
    reinforce_every_seconds: float = 3600.0
    consolidate_every_seconds: float = 30.0
    decay_every_seconds: float = 3600.0
    sweep_every_seconds: float = 300.0
    #: Write the context block to this state key instead of a system message.
    context_key: str | None = None

    def __post_init__(self) -> None:
        """Refuse counts below 1 and times that are negative, not finite, or zero where a
        loop waits that long (a zero interval spins a worker)."""
        for name in _COUNTS:
            check_count(getattr(self, name), name)
        for name, least_open in _NUMBERS.items():
            value = getattr(self, name)
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            if not number or not math.isfinite(value) or value < 0 or (least_open and value == 0):
                bound = "> 0" if least_open else ">= 0"
                raise ConfigurationError(f"{name} must be a finite number {bound}, got {value!r}")

    @classmethod
    def resolve(cls, explicit: dict[str, Any]) -> MemorySettings:
        known = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(explicit) - set(known))
        if unknown:
            raise TypeError(
                f"AgentMemory() got unknown setting(s) {', '.join(unknown)}; known: "
                + ", ".join(sorted(known))
            )
        values = dict(explicit)
        for name in known:
            declared = config_registry.get_field(f"config.memory.{name}")
            if name not in explicit and declared is not None:
                values[name] = declared.value()
        if "scope_keys" in values:
            keys = values["scope_keys"]
            keys = values["scope_keys"] = (keys,) if isinstance(keys, str) else tuple(keys)
            if not keys or any(k not in SCOPE_KEYS for k in keys):
                raise ConfigurationError(
                    f"scope_keys must be a non-empty subset of {SCOPE_KEYS}, got {keys}"
                )
        return cls(**values)

    @property
    def weights(self) -> RecallWeights:
        return RecallWeights(
            self.relevance_weight, self.recency_weight, self.importance_weight, self.half_life_days
        )


class RecordOptions(TypedDict, total=False):
    """Keyword options of :meth:`AgentMemory.record` and :meth:`AgentMemory.arecord`."""

    #: The conversation the messages come from (:meth:`AgentMemory.erase` removes it too).
    thread_id: str | None
    #: The episode's key (default: from the thread and the messages' ids); a key already
    #: stored is not stored again.
    key: str | None
    #: When the turn happened: seconds since the epoch or a timezone-aware ``datetime``,
    #: between the years 1 and 9999 (default: now).
    occurred_at: float | datetime | None
