"""The package keeps its shape: only what users run is shipped, it imports light, and
modules are split by meaning, never to stay under a line count (each importable on its own).

The other rules of the shape are checked where their tools run: layers by import-linter,
private access and complexity by ruff (SLF001, C901 at 10), types by mypy --strict, the
docstrings' examples by tests/test_docstring_examples.py.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import langgraph_checkpoint_agent_memory as package

ROOT = Path(package.__file__).parent
#: What an application that keeps its conversations in memory must not pay for at import:
#: SQL, vectors, the drivers, the cipher, telemetry, the CLI's tables, the stemmers (text.py),
#: zstd (compression.py).
HEAVY = (
    "sqlalchemy",
    "numpy",
    "psycopg",
    "psycopg_pool",
    "cryptography",
    "opentelemetry",
    "rich",
    "snowballstemmer",
    "Stemmer",
    "zstandard",
)
#: A one-node graph run twice on a thread, so the saver writes and reads checkpoints.
TINY_GRAPH = """
from typing import TypedDict
from langgraph.graph import END, START, StateGraph

class State(TypedDict):
    n: int

builder = StateGraph(State)
builder.add_node("step", lambda state: {"n": state["n"] + 1})
builder.add_edge(START, "step")
builder.add_edge("step", END)
graph = builder.compile(checkpointer=saver)
config = {"configurable": {"thread_id": "t1"}}
assert graph.invoke({"n": 1}, config) == {"n": 2}
assert graph.get_state(config).values == {"n": 2}
"""

#: The same graph on LangGraph's own saver: what LangGraph loads by itself.
LANGGRAPH_OWN = """
from langgraph.checkpoint.memory import InMemorySaver
saver = InMemorySaver()
"""


def test_no_test_server_is_shipped() -> None:
    """The throwaway PostgreSQL, Citus and PgBouncer live in tests/servers.py, not in the
    wheel: no module of the package starts a server."""
    modules = sorted(path.relative_to(ROOT).as_posix() for path in ROOT.rglob("*.py"))
    assert len(modules) > 30  # the walk found the package
    assert [m for m in modules if Path(m).stem.startswith("testing")] == []
    starts_servers = [m for m in modules if "pg_ctl" in (ROOT / m).read_text()]
    assert starts_servers == []


def loaded_after(setup: str) -> list[str]:
    """The heavy modules in ``sys.modules`` after running ``setup`` and a tiny graph on its
    ``saver`` in a fresh interpreter."""
    code = textwrap.dedent(setup) + TINY_GRAPH + f"import sys\nprint([m for m in {HEAVY!r} "
    code += "if m in sys.modules])"
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT.parent,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT.parent)},
    )
    return list(eval(done.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize(
    "setup",
    [
        """
        from langgraph_checkpoint_agent_memory import create_checkpointer
        saver = create_checkpointer()
        """,
        """
        from langgraph_checkpoint_agent_memory import TimedInMemorySaver
        saver = TimedInMemorySaver(ttl_seconds=60)
        """,
    ],
    ids=["create_checkpointer", "TimedInMemorySaver"],
)
def test_a_checkpointer_in_memory_imports_nothing_heavy(setup: str) -> None:
    """Nothing heavy beyond what LangGraph's own graph loads (httpx's command line, which
    LangSmith imports, brings ``rich``)."""
    langgraph_own = loaded_after(LANGGRAPH_OWN)
    assert sorted(set(loaded_after(setup)) - set(langgraph_own)) == []


def test_the_check_sees_a_heavy_import() -> None:
    assert "numpy" in loaded_after("import numpy\n" + LANGGRAPH_OWN)


def test_every_public_name_loads_on_first_use() -> None:
    """The package's names load lazily, yet each resolves and ``dir()`` lists it."""
    listed = dir(package)
    for name in package.__all__:
        assert name in listed
        assert getattr(package, name) is not None
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        getattr(package, "Nothing")  # noqa: B009 - the lookup is what is tested


def test_type_checkers_see_every_public_name() -> None:
    """The names imported for type checkers (``X as X`` under ``TYPE_CHECKING``) are the names
    the package loads lazily, each from the module the lazy map names."""
    tree = ast.parse((ROOT / "__init__.py").read_text())
    block = next(n for n in tree.body if isinstance(n, ast.If))
    seen = {
        str(alias.asname): str(node.module)
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    assert seen == package._LAZY
    assert sorted(package.__all__) == sorted([*seen, "__version__"])


def test_every_module_imports() -> None:
    """A module moved or merged leaves no import of its old path behind."""
    walk = pkgutil.walk_packages(package.__path__, f"{package.__name__}.")
    names = [m.name for m in walk if not m.name.endswith(".__main__")]  # that one runs the CLI
    assert len(names) > 30  # the walk found the package
    for name in names:
        importlib.import_module(name)
