"""Agent memory: facts and episodes, consolidation, decay and recall (see ``agent``)."""

from langgraph_checkpoint_agent_memory.memory.agent import AgentMemory
from langgraph_checkpoint_agent_memory.memory.consolidate import JobResult, Report
from langgraph_checkpoint_agent_memory.memory.decay import DecayPolicy
from langgraph_checkpoint_agent_memory.memory.extract import (
    CallableExtractor,
    ChatModelExtractor,
    ExtractionError,
    ExtractionRequest,
    Extractor,
    RuleBasedExtractor,
    episode_summaries,
    parse_extraction,
)
from langgraph_checkpoint_agent_memory.memory.model import (
    Episode,
    EpisodeEntry,
    EpisodeSummary,
    Extraction,
    Fact,
    FactCandidate,
    Scope,
    ScopeError,
    lexical_text,
)
from langgraph_checkpoint_agent_memory.memory.nodes import CONTEXT_MESSAGE_ID
from langgraph_checkpoint_agent_memory.memory.recall import Recalled, RecallOptions
from langgraph_checkpoint_agent_memory.memory.settings import (
    MemorySettings,
    RecallWeights,
    RecordOptions,
)
from langgraph_checkpoint_agent_memory.memory.tools import MemoryTools
from langgraph_checkpoint_agent_memory.memory.worker import MemoryWorker

__all__ = [
    "CONTEXT_MESSAGE_ID",
    "AgentMemory",
    "CallableExtractor",
    "ChatModelExtractor",
    "DecayPolicy",
    "Episode",
    "EpisodeEntry",
    "EpisodeSummary",
    "Extraction",
    "ExtractionError",
    "ExtractionRequest",
    "Extractor",
    "Fact",
    "FactCandidate",
    "JobResult",
    "MemorySettings",
    "MemoryTools",
    "MemoryWorker",
    "RecallOptions",
    "RecallWeights",
    "Recalled",
    "RecordOptions",
    "Report",
    "RuleBasedExtractor",
    "Scope",
    "ScopeError",
    "episode_summaries",
    "lexical_text",
    "parse_extraction",
]
