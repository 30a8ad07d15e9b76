"""``python -m langgraph_checkpoint_agent_memory.cli``: the ``agent-memory`` command."""

from langgraph_checkpoint_agent_memory.cli import run

run()
