"""Short-term memory: LangGraph checkpointers with an idle-time TTL, in memory or in SQL.

The SQL savers load SQLAlchemy and their drivers, so they are imported when first named:
an in-memory checkpointer loads none of them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from langgraph_checkpoint_agent_memory.checkpoint.timed import TimedInMemorySaver

if TYPE_CHECKING:
    from langgraph_checkpoint_agent_memory.checkpoint.backends import (
        AsyncHanaSaver,
        AsyncPostgresSaver,
        AsyncSqliteSaver,
        HanaSaver,
        PostgresSaver,
        SqliteSaver,
    )
    from langgraph_checkpoint_agent_memory.checkpoint.saver import SQLSaver
    from langgraph_checkpoint_agent_memory.checkpoint.threads import (
        SweepPreview,
        ThreadInfo,
        ThreadSweep,
    )

#: Each lazily imported name, and the module that holds it.
_LAZY = {
    **dict.fromkeys(
        (
            "AsyncHanaSaver",
            "AsyncPostgresSaver",
            "AsyncSqliteSaver",
            "HanaSaver",
            "PostgresSaver",
            "SqliteSaver",
        ),
        "backends",
    ),
    "SQLSaver": "saver",
    **dict.fromkeys(("SweepPreview", "ThreadInfo", "ThreadSweep"), "threads"),
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    globals()[name] = value
    return value


__all__ = [
    "AsyncHanaSaver",
    "AsyncPostgresSaver",
    "AsyncSqliteSaver",
    "HanaSaver",
    "PostgresSaver",
    "SQLSaver",
    "SqliteSaver",
    "SweepPreview",
    "ThreadInfo",
    "ThreadSweep",
    "TimedInMemorySaver",
]
