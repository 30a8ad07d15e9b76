"""The package stands on its dependencies' public APIs: no ctypes, no private modules or
names of psycopg, psycopg_pool or sqlite3 (a driver's internals change without notice)."""

from __future__ import annotations

import ast
from pathlib import Path

import langgraph_checkpoint_agent_memory as package

ROOT = Path(package.__file__).parent
#: Modules the package must not import, and prefixes of names it must not reach into.
FORBIDDEN_MODULES = ("ctypes", "_sqlite3", "psycopg.generators")
WATCHED = ("psycopg", "psycopg_pool", "sqlite3")


def _violations(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            private = parts[0] in WATCHED and any(p.startswith("_") for p in parts[1:])
            if private or any(name == m or name.startswith(m + ".") for m in FORBIDDEN_MODULES):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {name}")
    return found


def test_no_private_or_low_level_driver_imports() -> None:
    violations = [v for path in sorted(ROOT.rglob("*.py")) for v in _violations(path)]
    assert violations == []


def test_the_check_finds_what_it_forbids(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import ctypes\nfrom psycopg.generators import execute\nfrom psycopg import _queries\n"
        "import psycopg\nfrom psycopg.conninfo import make_conninfo\n"
    )
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        assert [v.split(": ")[1] for v in _violations(sample)] == [
            "ctypes",
            "psycopg.generators",
            "psycopg.generators.execute",
            "psycopg._queries",
        ]
    finally:
        ROOT = saved
