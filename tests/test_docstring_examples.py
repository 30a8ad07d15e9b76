"""Every example in the package's docstrings runs as written.

Two forms, both run here:

* ``>>>`` examples, by :mod:`doctest`, whose output must match;
* fenced ```` ```python ```` blocks, executed; they may ``await`` (the block then runs in
  an event loop), for the async methods.

Each runs in the namespace of its module (as :mod:`doctest` gives it), in a fresh directory,
with the objects a reader of the docs has at hand already made (:func:`make_world`): a
``saver`` (also ``checkpointer``) with thread ``"user-42"``, whose latest checkpoint is
``saved``, and thread ``"user-17"``, expired; a ``store``, an ``AgentMemory`` called
``memory`` with a fact, a graph ``builder`` (also ``graph``), a fake chat ``model``, and
``config``. An example that cannot run here (it needs a
PostgreSQL server, a real LLM, ...) is a fenced block whose first line is
``# not run: <reason>``; ``+SKIP`` is not used.
"""

from __future__ import annotations

import ast
import asyncio
import doctest
import importlib
import inspect
import pkgutil
import re
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import CodeType, ModuleType
from typing import Any

import pytest

import langgraph_checkpoint_agent_memory as package

FENCE = re.compile(r"^[ \t]*```python\n(.*?)^[ \t]*```", re.S | re.M)
NOT_RUN = re.compile(r"# not run: \S")


@dataclass(frozen=True)
class Example:
    """One example: where it is, and its code (fenced) or its doctest."""

    where: str
    module: str
    code: str | None = None
    test: doctest.DocTest | None = None
    error: str | None = None


def modules() -> list[ModuleType]:
    names = [package.__name__] + [
        m.name
        for m in pkgutil.walk_packages(package.__path__, package.__name__ + ".")
        if not m.name.endswith("__main__")
    ]
    return [importlib.import_module(n) for n in sorted(names)]


def docstrings(module: ModuleType) -> Iterator[tuple[str, str]]:
    """``(qualified name, docstring)`` of the module, its classes and functions."""
    tree = ast.parse(inspect.getsource(module))

    def walk(node: ast.AST, prefix: str) -> Iterator[tuple[str, str]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                doc = ast.get_docstring(child, clean=True)
                if doc:
                    yield name, doc
                yield from walk(child, name + ".")

    doc = ast.get_docstring(tree, clean=True)
    if doc:
        yield "<module>", doc
    yield from walk(tree, "")


def examples() -> list[Any]:
    found: list[Any] = []
    finder = doctest.DocTestFinder(exclude_empty=True)
    for module in modules():
        short = module.__name__.removeprefix(package.__name__ + ".")
        try:
            tests = finder.find(module)
        except ValueError as exc:  # a docstring doctest cannot parse
            found.append(pytest.param(Example(short, module.__name__, error=str(exc)), id=short))
            tests = []
        for test in tests:
            if test.examples and test.name.startswith(module.__name__):
                where = f"{short}:{test.name.removeprefix(module.__name__ + '.')}"
                found.append(pytest.param(Example(where, module.__name__, test=test), id=where))
        for name, doc in docstrings(module):
            for i, block in enumerate(FENCE.findall(doc), 1):
                where = f"{short}:{name}#{i}"
                ex = Example(where, module.__name__, code=textwrap.dedent(block))
                found.append(pytest.param(ex, id=where))
    return found


EXAMPLES = examples()


def test_the_package_has_examples_of_both_forms() -> None:
    kinds = {("doctest" if p.values[0].test else "fenced") for p in EXAMPLES}
    assert kinds == {"doctest", "fenced"}
    assert len(EXAMPLES) > 60


def test_no_example_is_skipped_by_a_directive() -> None:
    """``+SKIP`` hides an example without a reason; a non-runnable example says why."""
    skipped = [
        p.values[0].where
        for p in EXAMPLES
        if p.values[0].test and any(doctest.SKIP in e.options for e in p.values[0].test.examples)
    ]
    assert skipped == []


class Clock:
    """Seconds that move only when told (a sweep here never depends on how long a test ran)."""

    def __init__(self, start: float) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


def make_world(tmp_path: Path, module: str) -> dict[str, Any]:
    """What a reader of the docs has at hand: in :mod:`.checkpoint.timed` a
    ``TimedInMemorySaver``, elsewhere a SQLite saver; each with thread ``"user-17"`` idle for
    two hours (past its one-hour TTL) and thread ``"user-42"`` that ran a graph twice."""
    from langchain_core.language_models.fake_chat_models import FakeListChatModel
    from langchain_core.messages import HumanMessage
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.graph import START, MessagesState, StateGraph

    from langgraph_checkpoint_agent_memory import (
        AgentMemory,
        RuleBasedExtractor,
        SqliteSaver,
        TimedInMemorySaver,
        create_store,
    )

    clock = Clock(1_800_000_000.0)
    saver: Any
    if module.endswith(".timed"):
        saver = TimedInMemorySaver(3600, sweep_interval_seconds=1e9, clock=clock)
    else:
        path = tmp_path / "checkpoints.db"
        saver = SqliteSaver(str(path), ttl_seconds=3600, sweep_interval_seconds=1e9, clock=clock)
    saver.put({"configurable": {"thread_id": "user-17"}}, empty_checkpoint(), {"step": -1}, {})
    clock.now += 7200
    store = create_store(f"sqlite:///{tmp_path / 'store.db'}")
    memory = AgentMemory(store, extractor=RuleBasedExtractor(), checkpointer=saver)
    memory.record("user=alice", [{"role": "user", "content": "I live in Berlin"}])
    memory.consolidate()
    model = FakeListChatModel(responses=["Noted."] * 100)

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_edge(START, "agent")
    config: RunnableConfig = {"configurable": {"thread_id": "user-42", "user_id": "alice"}}
    inputs = MessagesState(messages=[HumanMessage(content="hi")])
    app = builder.compile(checkpointer=saver)
    app.invoke(inputs, config)
    app.invoke(inputs, config)
    return {
        "saver": saver,
        "checkpointer": saver,
        "saved": app.get_state(config).config,
        "config": config,
        "store": store,
        "memory": memory,
        "builder": builder,
        "graph": builder,
        "model": model,
        "chat_model": model,
        "inputs": inputs,
    }


def run_fenced(code: str, where: str, globs: dict[str, Any]) -> None:
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    compiled: CodeType = compile(code, where, "exec", flags=flags)
    if compiled.co_flags & inspect.CO_COROUTINE:
        asyncio.run(eval(compiled, globs))
    else:
        exec(compiled, globs)


@pytest.mark.parametrize("example", EXAMPLES)
def test_example_runs(example: Example, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert example.error is None, example.error
    monkeypatch.chdir(tmp_path)
    world = make_world(tmp_path, example.module)
    try:
        run_example(example, {**vars(importlib.import_module(example.module)), **world})
    finally:
        world["saver"].close()
        world["store"].close()


def run_example(example: Example, globs: dict[str, Any]) -> None:
    if example.code is not None:
        if example.code.startswith("# not run:"):
            assert NOT_RUN.match(example.code), f"{example.where}: say why it does not run"
            pytest.skip(example.code.splitlines()[0])
        run_fenced(example.code, example.where, globs)
        return
    assert example.test is not None
    test = example.test
    test.globs = globs
    out: list[str] = []
    runner = doctest.DocTestRunner(
        optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False
    )
    result = runner.run(test, out=out.append)
    assert result.failed == 0, "".join(out)
