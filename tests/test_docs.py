"""Every ```python block of the README, the user guide and the pages of docs/ runs as
written, twice in a row in the same folder (and database), as a reader trying it runs it
again. A block whose first line
says ``# requires: postgresql`` runs with AGENT_MEMORY_URL set to a fresh PostgreSQL
database; ``# requires: pgbouncer`` with it set to a fresh database through PgBouncer in
transaction mode (the URL carries ``?prepare_threshold=none``); ``# requires: citus`` with it
set to a fresh database on the Citus cluster's coordinator."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.pg import bouncer_params, citus_params, pg_database, pg_params

ROOT = Path(__file__).resolve().parent.parent


def documents() -> list[str]:
    """The README, the user guide and every page of docs/ (its links to the guide and the
    benchmarks' README are skipped: those are read where they are)."""
    pages = sorted(p for p in (ROOT / "docs").rglob("*.md") if not p.is_symlink())
    return ["README.md", "user-guide.md", *(str(p.relative_to(ROOT)) for p in pages)]


#: A python block, at the margin or indented under a list item (its indent is removed).
BLOCK = re.compile(r"^( *)```python\n(.*?)^\1```", re.S | re.M)


def blocks() -> list[tuple[str, str]]:
    found = []
    for doc in documents():
        for i, (indent, code) in enumerate(BLOCK.findall((ROOT / doc).read_text())):
            found.append((f"{doc}#{i + 1}", textwrap.dedent(code) if indent else code))
    return found


def examples() -> list[Any]:
    """Each block once, or once per PostgreSQL server when it requires one."""
    found = []
    for where, code in blocks():
        if code.startswith("# requires: pgbouncer"):
            servers = bouncer_params()
        elif code.startswith("# requires: citus"):
            servers = citus_params()
        elif code.startswith("# requires: postgresql"):
            servers = pg_params()
        else:
            found.append(pytest.param(where, code, None, id=where))
            continue
        for server in servers:
            sid = server.values[0]
            found.append(pytest.param(where, code, sid, id=f"{where}-{sid}", marks=server.marks))
    return found


@pytest.mark.parametrize(("where", "code", "server"), examples())
def test_example_runs(
    where: str, code: str, server: str | None, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("AGENT_MEMORY_URL", None)
    if server is not None:
        env["AGENT_MEMORY_URL"] = pg_database(request, server)
    for run in ("first", "second"):
        result = subprocess.run(
            [sys.executable, "-c", code],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        assert result.returncode == 0, f"{where} failed on its {run} run:\n{result.stderr}"


CONSOLE = re.compile(r"^```console\n(.*?)^```", re.S | re.M)


def commands() -> list[tuple[str, list[str]]]:
    found = []
    for doc in documents():
        for i, block in enumerate(CONSOLE.findall((ROOT / doc).read_text())):
            lines = [
                ln[2:]
                for ln in block.splitlines()
                if ln.startswith(("$ agent-memory", "$ export "))
            ]
            if any(ln.startswith("agent-memory") for ln in lines):
                found.append((f"{doc}#console{i + 1}", lines))
    return found


@pytest.mark.parametrize(("where", "lines"), commands(), ids=[w for w, _ in commands()])
def test_commands_run(where: str, lines: list[str], tmp_path: Path) -> None:
    """Each ``$ agent-memory ...`` line of a console block, in order, on a fresh default,
    in a fresh folder; a ``$ export NAME=value`` line sets the variable for the lines after."""
    import shlex

    env = {**os.environ, "PYTHONPATH": str(ROOT), "AGENT_MEMORY_HOME": str(tmp_path)}
    env.pop("AGENT_MEMORY_URL", None)
    for line in lines:
        args = shlex.split(line.split("  #")[0])[1:]
        if line.startswith("export "):
            name, _, value = args[0].partition("=")
            env[name] = value
            continue
        result = subprocess.run(
            [sys.executable, "-m", "langgraph_checkpoint_agent_memory.cli", *args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        assert result.returncode == 0, f"{where}: {line} failed:\n{result.stderr}"


def test_help_shows_the_graph_nodes_with_their_docs() -> None:
    """``help(AgentMemory)`` lists ``inject_node`` and ``record_node`` with their own
    docstrings, not as attributes set in ``__init__`` that help cannot see."""
    import pydoc

    from langgraph_checkpoint_agent_memory import AgentMemory

    # pydoc.plaintext is public (help() renders with it) but missing from typeshed's stub
    text = pydoc.render_doc(AgentMemory, renderer=pydoc.plaintext)  # type: ignore[attr-defined]
    for name in ("inject_node", "record_node"):
        doc = getattr(AgentMemory, name).__doc__
        assert doc, f"{name} has no docstring"
        first_line = doc.strip().splitlines()[0]
        assert re.search(rf"^[ |]*{name}\n[ |]*{re.escape(first_line)}", text, re.M), name


def test_reference_documents_every_public_name(tmp_path: Path) -> None:
    """The documentation site builds in strict mode (no broken link, anchor or docstring),
    and its API reference has an entry for every name the package root exports."""
    import langgraph_checkpoint_agent_memory as package

    site = tmp_path / "site"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 0, result.stderr
    anchors = {
        anchor
        for page in (site / "reference").rglob("*.html")
        for anchor in re.findall(rf'id="({package.__name__}\.[\w.]+)"', page.read_text())
    }
    missing = [
        name
        for name in package.__all__
        if name != "__version__" and not any(a.endswith(f".{name}") for a in anchors)
    ]
    assert not missing, f"not in the API reference: {missing}"
