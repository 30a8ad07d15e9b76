"""Thread expiry and the background sweeper, shared by the in-memory and the SQL savers.

``ttl_seconds`` is idle time: every read or write of a thread counts as activity. Readers
treat an expired thread as gone at once; the sweeper only frees what readers already ignore,
so the eviction delay bound is ``ttl + sweep interval`` for memory, never for visibility.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langgraph_checkpoint_agent_memory.db.schema import MAX_TTL_SECONDS
from langgraph_checkpoint_agent_memory.errors import ConfigurationError

__all__ = [
    "MAX_TTL_SECONDS",
    "default_sweep_interval",
    "thread_ttl",
    "validate_interval",
    "validate_ttl",
]

#: Sweeps run at most this often and at least this rarely, whatever the TTL.
MIN_SWEEP_INTERVAL = 0.5
MAX_SWEEP_INTERVAL = 60.0


def validate_ttl(value: Any, name: str = "ttl_seconds") -> int | None:
    """Accept ``None``, ``0`` (off) or a whole number of seconds from 1 to
    :data:`MAX_TTL_SECONDS` (2**31 - 1, about 68 years); name the culprit."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigurationError(
            f"{name} must be a whole number of seconds or None, got {type(value).__name__} "
            f"{value!r}"
        )
    if value < 0:
        raise ConfigurationError(f"{name} must be >= 0 (0 or None turns expiry off), got {value}")
    if value > MAX_TTL_SECONDS:
        raise ConfigurationError(
            f"{name} must be at most {MAX_TTL_SECONDS} seconds (about 68 years), got {value}"
        )
    return value or None


def thread_ttl(config: Mapping[str, Any], default: int | None) -> int | None:
    """The TTL of the thread ``config`` names: its own ``ttl_seconds``, checked as
    :func:`validate_ttl` checks it, else ``default``."""
    override = (config.get("configurable") or {}).get("ttl_seconds")
    if override is None:
        return default
    return validate_ttl(override, name="config['configurable']['ttl_seconds']")


def validate_interval(value: Any, name: str = "sweep_interval_seconds") -> float | None:
    """Accept ``None`` (the default) or a number of seconds above 0 and at most
    :data:`MAX_TTL_SECONDS`."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigurationError(f"{name} must be a number of seconds, got {type(value).__name__}")
    if not 0 < value <= MAX_TTL_SECONDS:  # NaN fails both
        raise ConfigurationError(f"{name} must be > 0 and <= {MAX_TTL_SECONDS}, got {value}")
    return float(value)


def default_sweep_interval(ttl_seconds: float) -> float:
    """A tenth of the TTL, kept between 0.5 s and 60 s.

    Short TTLs (tests, kiosks) free memory promptly; long ones do not wake a thread needlessly.
    """
    return min(MAX_SWEEP_INTERVAL, max(MIN_SWEEP_INTERVAL, ttl_seconds / 10))
