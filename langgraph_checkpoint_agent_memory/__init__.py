"""Memory that lasts for LangGraph agents.

Short-term memory is a LangGraph checkpointer (:func:`create_checkpointer`): in memory, or
persistent on SQLite, PostgreSQL or SAP HANA with a TTL that survives restarts; configuration
comes from :func:`agent_config` fields that operators can change without touching code.
Long-term memory is :class:`AgentMemory` over an :class:`AgentMemoryStore`
(:func:`create_store`): facts and episodes, consolidated by an LLM, decayed, recalled.
"""

from importlib.metadata import PackageNotFoundError, version

from langgraph_checkpoint_agent_memory.checkpoint import (
    AsyncHanaSaver,
    AsyncPostgresSaver,
    AsyncSqliteSaver,
    HanaSaver,
    PostgresSaver,
    SqliteSaver,
    SQLSaver,
    TimedInMemorySaver,
)
from langgraph_checkpoint_agent_memory.errors import (
    AgentMemoryError,
    ConfigurationError,
    ThreadDeletedError,
)
from langgraph_checkpoint_agent_memory.factory import create_checkpointer, create_store
from langgraph_checkpoint_agent_memory.memory import (
    AgentMemory,
    ChatModelExtractor,
    ExtractionError,
    Extractor,
    RuleBasedExtractor,
    Scope,
)
from langgraph_checkpoint_agent_memory.settings import (
    ConfigField,
    ConfigValueError,
    agent_config,
)
from langgraph_checkpoint_agent_memory.store import AgentMemoryStore

try:
    __version__ = version("langgraph-checkpoint-agent-memory")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0"

__all__ = [
    "AgentMemory",
    "AgentMemoryError",
    "AgentMemoryStore",
    "AsyncHanaSaver",
    "AsyncPostgresSaver",
    "AsyncSqliteSaver",
    "ChatModelExtractor",
    "ConfigField",
    "ConfigValueError",
    "ConfigurationError",
    "ExtractionError",
    "Extractor",
    "HanaSaver",
    "PostgresSaver",
    "RuleBasedExtractor",
    "SQLSaver",
    "Scope",
    "SqliteSaver",
    "ThreadDeletedError",
    "TimedInMemorySaver",
    "__version__",
    "agent_config",
    "create_checkpointer",
    "create_store",
]
