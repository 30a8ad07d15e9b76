"""Agent memory: facts and episodes, consolidation, decay and recall (see ``agent``).

Each name loads its module on first access (as the package's own names do), so what needs
only the model, the settings or the reading of stored facts (the command line's read
commands) does not load LangChain's runnables, tools and tracers, which the façade does.
"""

from typing import TYPE_CHECKING

from langgraph_checkpoint_agent_memory import lazy

if TYPE_CHECKING:
    from langgraph_checkpoint_agent_memory.memory.agent import AgentMemory as AgentMemory
    from langgraph_checkpoint_agent_memory.memory.candidates import (
        EpisodeEntry as EpisodeEntry,
        EpisodeSummary as EpisodeSummary,
        Extraction as Extraction,
        FactCandidate as FactCandidate,
    )
    from langgraph_checkpoint_agent_memory.memory.consolidate import (
        JobResult as JobResult,
        Report as Report,
    )
    from langgraph_checkpoint_agent_memory.memory.decay import DecayPolicy as DecayPolicy
    from langgraph_checkpoint_agent_memory.memory.extract import (
        CallableExtractor as CallableExtractor,
        ChatModelExtractor as ChatModelExtractor,
        ExtractionError as ExtractionError,
        ExtractionRequest as ExtractionRequest,
        Extractor as Extractor,
        RuleBasedExtractor as RuleBasedExtractor,
        episode_summaries as episode_summaries,
        parse_extraction as parse_extraction,
    )
    from langgraph_checkpoint_agent_memory.memory.model import (
        Episode as Episode,
        Fact as Fact,
        Scope as Scope,
        ScopeError as ScopeError,
        lexical_text as lexical_text,
    )
    from langgraph_checkpoint_agent_memory.memory.nodes import (
        CONTEXT_MESSAGE_ID as CONTEXT_MESSAGE_ID,
    )
    from langgraph_checkpoint_agent_memory.memory.recall import (
        Recalled as Recalled,
        RecallOptions as RecallOptions,
    )
    from langgraph_checkpoint_agent_memory.memory.settings import (
        MemorySettings as MemorySettings,
        RecallWeights as RecallWeights,
        RecordOptions as RecordOptions,
    )
    from langgraph_checkpoint_agent_memory.memory.tools import MemoryTools as MemoryTools
    from langgraph_checkpoint_agent_memory.memory.worker import MemoryWorker as MemoryWorker

#: Each public name -> the module (of this package) that defines it.
_LAZY = lazy.homes(
    __name__,
    {
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
    },
)
__getattr__ = lazy.loader(globals(), _LAZY)


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = sorted(_LAZY)
