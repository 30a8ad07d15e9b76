"""Agent memory: facts and episodes, consolidation, decay and recall (see ``agent``).

Each name loads its module on first access (as the package's own names do), so what needs
only the model, the settings or the reading of stored facts (the command line's read
commands) does not load LangChain's runnables, tools and tracers, which the façade does.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from langgraph_checkpoint_agent_memory.memory.agent import AgentMemory as AgentMemory
    from langgraph_checkpoint_agent_memory.memory.candidates import (
        EpisodeEntry as EpisodeEntry,
    )
    from langgraph_checkpoint_agent_memory.memory.candidates import (
        EpisodeSummary as EpisodeSummary,
    )
    from langgraph_checkpoint_agent_memory.memory.candidates import (
        Extraction as Extraction,
    )
    from langgraph_checkpoint_agent_memory.memory.candidates import (
        FactCandidate as FactCandidate,
    )
    from langgraph_checkpoint_agent_memory.memory.consolidate import (
        JobResult as JobResult,
    )
    from langgraph_checkpoint_agent_memory.memory.consolidate import (
        Report as Report,
    )
    from langgraph_checkpoint_agent_memory.memory.decay import DecayPolicy as DecayPolicy
    from langgraph_checkpoint_agent_memory.memory.extract import (
        CallableExtractor as CallableExtractor,
    )
    from langgraph_checkpoint_agent_memory.memory.extract import (
        ChatModelExtractor as ChatModelExtractor,
    )
    from langgraph_checkpoint_agent_memory.memory.extract import (
        ExtractionError as ExtractionError,
    )
    from langgraph_checkpoint_agent_memory.memory.extract import (
        ExtractionRequest as ExtractionRequest,
    )
    from langgraph_checkpoint_agent_memory.memory.extract import (
        Extractor as Extractor,
    )
    from langgraph_checkpoint_agent_memory.memory.extract import (
        RuleBasedExtractor as RuleBasedExtractor,
    )
    from langgraph_checkpoint_agent_memory.memory.extract import (
        episode_summaries as episode_summaries,
    )
    from langgraph_checkpoint_agent_memory.memory.extract import (
        parse_extraction as parse_extraction,
    )
    from langgraph_checkpoint_agent_memory.memory.model import (
        Episode as Episode,
    )
    from langgraph_checkpoint_agent_memory.memory.model import (
        Fact as Fact,
    )
    from langgraph_checkpoint_agent_memory.memory.model import (
        Scope as Scope,
    )
    from langgraph_checkpoint_agent_memory.memory.model import (
        ScopeError as ScopeError,
    )
    from langgraph_checkpoint_agent_memory.memory.model import (
        lexical_text as lexical_text,
    )
    from langgraph_checkpoint_agent_memory.memory.nodes import (
        CONTEXT_MESSAGE_ID as CONTEXT_MESSAGE_ID,
    )
    from langgraph_checkpoint_agent_memory.memory.recall import (
        Recalled as Recalled,
    )
    from langgraph_checkpoint_agent_memory.memory.recall import (
        RecallOptions as RecallOptions,
    )
    from langgraph_checkpoint_agent_memory.memory.settings import (
        MemorySettings as MemorySettings,
    )
    from langgraph_checkpoint_agent_memory.memory.settings import (
        RecallWeights as RecallWeights,
    )
    from langgraph_checkpoint_agent_memory.memory.settings import (
        RecordOptions as RecordOptions,
    )
    from langgraph_checkpoint_agent_memory.memory.tools import MemoryTools as MemoryTools
    from langgraph_checkpoint_agent_memory.memory.worker import MemoryWorker as MemoryWorker

#: Each public name -> the module (of this package) that defines it.
_HOMES = {
    "agent": "AgentMemory",
    "candidates": "EpisodeEntry EpisodeSummary Extraction FactCandidate",
    "consolidate": "JobResult Report",
    "decay": "DecayPolicy",
    "extract": """CallableExtractor ChatModelExtractor ExtractionError ExtractionRequest
        Extractor RuleBasedExtractor episode_summaries parse_extraction""",
    "model": "Episode Fact Scope ScopeError lexical_text",
    "nodes": "CONTEXT_MESSAGE_ID",
    "recall": "Recalled RecallOptions",
    "settings": "MemorySettings RecallWeights RecordOptions",
    "tools": "MemoryTools",
    "worker": "MemoryWorker",
}
_LAZY = {name: f"{__name__}.{module}" for module, names in _HOMES.items() for name in names.split()}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = sorted(_LAZY)
