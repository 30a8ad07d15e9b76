"""The benchmark suites, by name."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from benchmarks.suites.cli import run as cli
from benchmarks.suites.embedders import run as embedders
from benchmarks.suites.feedback import run as feedback
from benchmarks.suites.floor import run as floor
from benchmarks.suites.locomo import run as locomo
from benchmarks.suites.memory_pipeline import run as memory_pipeline
from benchmarks.suites.memory_savers import run as memory_savers
from benchmarks.suites.savers import run as savers
from benchmarks.suites.scale import run as scale
from benchmarks.suites.stores import run as stores
from benchmarks.suites.telemetry import run as telemetry

SUITES: dict[str, Callable[..., None]] = {
    "memory-savers": memory_savers,
    "savers": savers,
    "floor": floor,
    "stores": stores,
    "memory-pipeline": memory_pipeline,
    "locomo": locomo,
    "feedback": feedback,
    "embedders": embedders,
    "scale": scale,
    "telemetry": telemetry,
    "cli": cli,
}

__all__ = ["SUITES", "Path"]
