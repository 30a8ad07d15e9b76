"""Long-term memory: a LangGraph ``BaseStore`` with hybrid search, filters, TTL and bulk
delete, on memory, SQLite, PostgreSQL or SAP HANA."""

from langgraph_checkpoint_agent_memory.store.store import AgentMemoryStore

__all__ = ["AgentMemoryStore"]
