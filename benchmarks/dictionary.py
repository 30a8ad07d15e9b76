"""How the checkpoint values' zstd dictionary was made (``python -m benchmarks.dictionary``).

The package compresses every stored checkpoint value with zstd and one dictionary of its own
(``langgraph_checkpoint_agent_memory/values.zdict``), trained once on what LangGraph's serde
writes for typical graphs: checkpoint bodies (channel versions, versions seen), message
lists and their appends, the inputs of ``__start__``, pending writes, tool calls. The text in
the messages is this repository's own documentation, so the dictionary holds the structure
and common English, no one's data. The file is frozen: values written with it must open for
ever, so a new dictionary would come as a second one, beside it, never in its place.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import END, START, MessagesState, StateGraph

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "langgraph_checkpoint_agent_memory" / "values.zdict"
#: Where a run writes: never the shipped file, which values written with it need for ever.
TARGET = Path(tempfile.gettempdir()) / "values.zdict.new"
SIZE = 8192
DICT_ID = 1


class Recording(JsonPlusSerializer):
    """LangGraph's serde, keeping every value it dumps."""

    def __init__(self) -> None:
        super().__init__()
        self.samples: list[bytes] = []

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        kind, data = super().dumps_typed(obj)
        self.samples.append(data)
        return kind, data


def sentences() -> Iterator[str]:
    """Sentences of the repository's own prose, in order, without code."""
    text = "\n".join(p.read_text() for p in (ROOT / "user-guide.md", ROOT / "README.md"))
    prose = re.sub(r"```.*?```", " ", text, flags=re.S)
    for part in re.split(r"(?<=[.!?])\s+", re.sub(r"[`*#|]", " ", prose)):
        words = part.split()
        if 4 <= len(words) <= 60:
            yield " ".join(words)


def graphs(saver: Any, texts: list[str]) -> None:
    """A dialogue, a 3-node chat and a tool-calling agent, each a thread of the saver."""
    answers = iter(texts[1::2])
    one = StateGraph(MessagesState)
    one.add_node("reply", lambda s: {"messages": [AIMessage(next(answers))]})
    one.add_edge(START, "reply")
    one.add_edge("reply", END)
    dialogue = one.compile(checkpointer=saver)
    for question in texts[0:200:2]:
        config = {"configurable": {"thread_id": "d"}}
        dialogue.invoke({"messages": [HumanMessage(question)]}, config)

    calls = iter(range(10**6))

    def agent(state: MessagesState) -> dict[str, Any]:
        n = next(calls)
        last = state["messages"][-1]
        if isinstance(last, HumanMessage):
            call = {"name": "search", "args": {"query": last.content[:40]}, "id": f"call_{n:08x}"}
            ai = AIMessage(
                "",
                tool_calls=[call],
                response_metadata={"model_name": "gpt-4o-mini", "finish_reason": "tool_calls"},
                usage_metadata=_usage(100 + n, 20),
            )
            return {"messages": [ai]}
        return {
            "messages": [
                AIMessage(
                    texts[n % len(texts)],
                    response_metadata={"model_name": "gpt-4o-mini", "finish_reason": "stop"},
                    usage_metadata=_usage(200 + n, 40),
                )
            ]
        }

    def tools(state: MessagesState) -> dict[str, Any]:
        last = state["messages"][-1]
        call = last.tool_calls[0]  # type: ignore[attr-defined]
        found = texts[(len(state["messages"]) * 7) % len(texts)]
        return {"messages": [ToolMessage(found, tool_call_id=call["id"], name=call["name"])]}

    def route(state: MessagesState) -> str:
        last = state["messages"][-1]
        return "tools" if getattr(last, "tool_calls", None) else END

    two = StateGraph(MessagesState)
    two.add_node("agent", agent)
    two.add_node("tools", tools)
    two.add_edge(START, "agent")
    two.add_conditional_edges("agent", route, ["tools", END])
    two.add_edge("tools", "agent")
    tooled = two.compile(checkpointer=saver)
    for question in texts[200:300]:
        tooled.invoke({"messages": [HumanMessage(question)]}, {"configurable": {"thread_id": "t"}})


def _usage(inputs: int, outputs: int) -> Any:
    return {"input_tokens": inputs, "output_tokens": outputs, "total_tokens": inputs + outputs}


def main() -> None:
    import zstandard

    from langgraph_checkpoint_agent_memory import SqliteSaver

    serde = Recording()
    texts = list(sentences())
    with tempfile.TemporaryDirectory() as tmp:
        saver = SqliteSaver(Path(tmp) / "corpus.db", serde=serde)
        saver.setup()
        graphs(saver, texts)
        saver.close()
    trained = zstandard.train_dictionary(SIZE, serde.samples, dict_id=DICT_ID, level=3)
    TARGET.write_bytes(trained.as_bytes())
    print(f"{len(serde.samples)} samples, {len(texts)} sentences: {TARGET} ({SIZE} bytes)")


if __name__ == "__main__":
    main()
