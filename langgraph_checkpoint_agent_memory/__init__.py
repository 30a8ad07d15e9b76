"""Memory that lasts for LangGraph agents.

Short-term memory is a LangGraph checkpointer (:func:`create_checkpointer`): in memory, or
persistent on SQLite, PostgreSQL or SAP HANA with a TTL that survives restarts; configuration
comes from :func:`agent_config` fields that operators can change without touching code.
Long-term memory is :class:`AgentMemory` over an :class:`AgentMemoryStore`
(:func:`create_store`): facts and episodes, consolidated by an LLM, decayed, recalled.
"""

from importlib import import_module
from importlib.util import find_spec
from typing import TYPE_CHECKING, Any

from langgraph_checkpoint_agent_memory import lazy

if TYPE_CHECKING:
    __version__: str
    from langgraph_checkpoint_agent_memory.checkpoint import (
        AsyncHanaSaver as AsyncHanaSaver,
        AsyncPostgresSaver as AsyncPostgresSaver,
        AsyncSqliteSaver as AsyncSqliteSaver,
        HanaSaver as HanaSaver,
        PostgresSaver as PostgresSaver,
        SqliteSaver as SqliteSaver,
        SQLSaver as SQLSaver,
        SweepPreview as SweepPreview,
        ThreadInfo as ThreadInfo,
        ThreadSweep as ThreadSweep,
        TimedInMemorySaver as TimedInMemorySaver,
    )
    from langgraph_checkpoint_agent_memory.crypto import (
        Encryption as Encryption,
        KeyProvider as KeyProvider,
        MasterKeyProvider as MasterKeyProvider,
        generate_master_key as generate_master_key,
    )
    from langgraph_checkpoint_agent_memory.errors import (
        AgentMemoryError as AgentMemoryError,
        ClosedError as ClosedError,
        ConfigurationError as ConfigurationError,
        DamagedValueError as DamagedValueError,
        DatabaseNotFoundError as DatabaseNotFoundError,
        DatabaseUnavailableError as DatabaseUnavailableError,
        DecryptionError as DecryptionError,
        EncryptionError as EncryptionError,
        InvalidNamespaceValueError as InvalidNamespaceValueError,
        InvalidValueError as InvalidValueError,
        KeyMissingError as KeyMissingError,
        KeysBesideDataWarning as KeysBesideDataWarning,
        MissingExtraError as MissingExtraError,
        PlaintextRowError as PlaintextRowError,
        ReadOnlyDatabaseError as ReadOnlyDatabaseError,
        ThreadDeletedError as ThreadDeletedError,
    )
    from langgraph_checkpoint_agent_memory.factory import (
        create_checkpointer as create_checkpointer,
        create_store as create_store,
    )
    from langgraph_checkpoint_agent_memory.from_langgraph import (
        ImportProgress as ImportProgress,
        ImportReport as ImportReport,
        import_from_langgraph as import_from_langgraph,
    )
    from langgraph_checkpoint_agent_memory.memory import (
        AgentMemory as AgentMemory,
        ChatModelExtractor as ChatModelExtractor,
        ExtractionError as ExtractionError,
        Extractor as Extractor,
        RuleBasedExtractor as RuleBasedExtractor,
        Scope as Scope,
        ScopeError as ScopeError,
    )
    from langgraph_checkpoint_agent_memory.rerank import Reranking as Reranking
    from langgraph_checkpoint_agent_memory.settings import (
        ConfigField as ConfigField,
        ConfigValue as ConfigValue,
        ConfigValueError as ConfigValueError,
        agent_config as agent_config,
    )
    from langgraph_checkpoint_agent_memory.store import AgentMemoryStore as AgentMemoryStore
    from langgraph_checkpoint_agent_memory.store.feedback import Feedback as Feedback

#: Each public name -> the module that defines it, loaded on first access: an in-memory
#: checkpointer pays for none of SQLAlchemy, numpy, the drivers, the cipher, OpenTelemetry...
_HOMES = {
    "checkpoint": """AsyncHanaSaver AsyncPostgresSaver AsyncSqliteSaver HanaSaver PostgresSaver
        SQLSaver SqliteSaver SweepPreview ThreadInfo ThreadSweep TimedInMemorySaver""",
    "crypto": "Encryption KeyProvider MasterKeyProvider generate_master_key",
    "errors": """AgentMemoryError ClosedError ConfigurationError DamagedValueError
        DatabaseNotFoundError DatabaseUnavailableError DecryptionError EncryptionError
        InvalidNamespaceValueError InvalidValueError KeyMissingError KeysBesideDataWarning
        MissingExtraError PlaintextRowError ReadOnlyDatabaseError ThreadDeletedError""",
    "factory": "create_checkpointer create_store",
    "from_langgraph": "ImportProgress ImportReport import_from_langgraph",
    "memory": """AgentMemory ChatModelExtractor ExtractionError Extractor RuleBasedExtractor
        Scope ScopeError""",
    "rerank": "Reranking",
    "settings": "ConfigField ConfigValue ConfigValueError agent_config",
    "store": "AgentMemoryStore",
    "store.feedback": "Feedback",
}
_LAZY = lazy.homes(__name__, _HOMES)
_load = lazy.loader(globals(), _LAZY)


def __getattr__(name: str) -> Any:
    if name == "__version__":  # the installed metadata, read when asked (50 ms of imports)
        from langgraph_checkpoint_agent_memory.telemetry import version

        value = globals()[name] = version()
        return value
    if name not in _LAZY and name.isidentifier() and find_spec(f"{__name__}.{name}"):
        return import_module(f"{__name__}.{name}")  # a submodule, as ``pkg.settings``
    return _load(name)  # or AttributeError


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY, "__version__"})


__all__ = [*_LAZY, "__version__"]
