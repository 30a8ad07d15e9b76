"""Short-term memory: LangGraph checkpointers with an idle-time TTL."""

from langgraph_checkpoint_agent_memory.checkpoint.timed import TimedInMemorySaver

__all__ = ["TimedInMemorySaver"]
