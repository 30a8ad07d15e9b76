"""Memory that lasts for LangGraph agents.

Short-term memory is a LangGraph checkpointer (:func:`create_checkpointer`): in memory, or
persistent on SQLite, PostgreSQL or SAP HANA with a TTL that survives restarts; configuration
comes from :func:`agent_config` fields that operators can change without touching code.
Long-term memory is :class:`AgentMemory` over an :class:`AgentMemoryStore`
(:func:`create_store`): facts and episodes, consolidated by an LLM, decayed, recalled.
"""

from importlib import import_module
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

from langgraph_checkpoint_agent_memory import checkpoint as _checkpoint
from langgraph_checkpoint_agent_memory.checkpoint import *  # noqa: F403 - the savers, as listed in checkpoint.__all__
from langgraph_checkpoint_agent_memory.crypto import (
    Encryption,
    KeyProvider,
    MasterKeyProvider,
    generate_master_key,
)
from langgraph_checkpoint_agent_memory.errors import (
    AgentMemoryError,
    ClosedError,
    ConfigurationError,
    DatabaseNotFoundError,
    DatabaseUnavailableError,
    DecryptionError,
    EncryptionError,
    InvalidNamespaceValueError,
    InvalidValueError,
    KeyMissingError,
    KeysBesideDataWarning,
    PlaintextRowError,
    ReadOnlyDatabaseError,
    ThreadDeletedError,
)
from langgraph_checkpoint_agent_memory.factory import create_checkpointer, create_store
from langgraph_checkpoint_agent_memory.rerank import Reranking
from langgraph_checkpoint_agent_memory.settings import (
    ConfigField,
    ConfigValue,
    ConfigValueError,
    agent_config,
)
from langgraph_checkpoint_agent_memory.store import AgentMemoryStore
from langgraph_checkpoint_agent_memory.store.feedback import Feedback

if TYPE_CHECKING:
    from langgraph_checkpoint_agent_memory.memory import (
        AgentMemory,
        ChatModelExtractor,
        ExtractionError,
        Extractor,
        RuleBasedExtractor,
        Scope,
        ScopeError,
    )

#: Agent memory pulls in LangChain's runnables (and LangSmith); a process that only needs a
#: checkpointer should not pay for that at import, so these load on first access.
_LAZY = {
    name: "langgraph_checkpoint_agent_memory.memory"
    for name in (
        "AgentMemory",
        "ChatModelExtractor",
        "ExtractionError",
        "Extractor",
        "RuleBasedExtractor",
        "Scope",
        "ScopeError",
    )
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


try:
    __version__ = version("langgraph-checkpoint-agent-memory")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0"

__all__ = [
    "AgentMemory",
    "AgentMemoryError",
    "AgentMemoryStore",
    "ChatModelExtractor",
    "ClosedError",
    "ConfigField",
    "ConfigValue",
    "ConfigValueError",
    "ConfigurationError",
    "DatabaseNotFoundError",
    "DatabaseUnavailableError",
    "DecryptionError",
    "Encryption",
    "EncryptionError",
    "ExtractionError",
    "Extractor",
    "Feedback",
    "InvalidNamespaceValueError",
    "InvalidValueError",
    "KeyMissingError",
    "KeyProvider",
    "KeysBesideDataWarning",
    "MasterKeyProvider",
    "PlaintextRowError",
    "ReadOnlyDatabaseError",
    "Reranking",
    "RuleBasedExtractor",
    "Scope",
    "ScopeError",
    "ThreadDeletedError",
    "__version__",
    "agent_config",
    "create_checkpointer",
    "create_store",
    "generate_master_key",
]
__all__ += _checkpoint.__all__
