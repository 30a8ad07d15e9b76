"""``python -m langgraph_checkpoint_agent_memory.cli``: the ``agent-memory`` command."""

import sys

from langgraph_checkpoint_agent_memory.cli import main

sys.exit(main())
