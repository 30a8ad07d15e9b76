"""Short-term memory: LangGraph checkpointers with an idle-time TTL, in memory or in SQL."""

from langgraph_checkpoint_agent_memory.checkpoint.backends import (
    AsyncHanaSaver,
    AsyncPostgresSaver,
    AsyncSqliteSaver,
    HanaSaver,
    PostgresSaver,
    SqliteSaver,
)
from langgraph_checkpoint_agent_memory.checkpoint.retention import (
    SweepPreview,
    ThreadInfo,
    ThreadSweep,
)
from langgraph_checkpoint_agent_memory.checkpoint.saver import SQLSaver
from langgraph_checkpoint_agent_memory.checkpoint.timed import TimedInMemorySaver

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
