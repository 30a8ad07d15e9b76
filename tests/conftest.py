from __future__ import annotations

import pytest

from langgraph_checkpoint_agent_memory import settings
from tests.helpers import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(autouse=True)
def _isolated_settings(monkeypatch: pytest.MonkeyPatch):
    """No test sees another's @agent_config declarations, overrides or environment."""
    saved = dict(settings._registry)
    monkeypatch.delenv(settings.CONFIG_FILE_ENV, raising=False)
    monkeypatch.delenv("AGENT_MEMORY_URL", raising=False)
    yield
    settings._registry.clear()
    settings._registry.update(saved)
    settings.clear_override()
