"""Short-term memory: LangGraph checkpointers with an idle-time TTL, in memory or in SQL.

The SQL savers load SQLAlchemy and their drivers, so they are imported when first named:
an in-memory checkpointer loads none of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from langgraph_checkpoint_agent_memory import lazy
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
_LAZY = lazy.homes(
    __name__,
    {
        "backends": """AsyncHanaSaver AsyncPostgresSaver AsyncSqliteSaver HanaSaver
            PostgresSaver SqliteSaver""",
        "saver": "SQLSaver",
        "threads": "SweepPreview ThreadInfo ThreadSweep",
    },
)
__getattr__ = lazy.loader(globals(), _LAZY)


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
