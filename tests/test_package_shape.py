"""The package keeps its shape: small modules (each one job, readable in one sitting).

The other rules of the shape are checked where their tools run: layers by import-linter,
private access and complexity by ruff (SLF001, C901 at 10), types by mypy --strict, the
docstrings' examples by tests/test_docstring_examples.py.
"""

from __future__ import annotations

from pathlib import Path

import langgraph_checkpoint_agent_memory as package

ROOT = Path(package.__file__).parent
#: Lines a module may have at most.
MAX_LINES = 700


def module_sizes(root: Path) -> dict[str, int]:
    return {
        str(path.relative_to(root)): len(path.read_text().splitlines())
        for path in sorted(root.rglob("*.py"))
    }


def test_no_module_is_over_the_bound() -> None:
    sizes = module_sizes(ROOT)
    assert len(sizes) > 50  # the walk found the package
    assert {name: n for name, n in sizes.items() if n > MAX_LINES} == {}


def test_the_bound_is_measured_in_lines(tmp_path: Path) -> None:
    (tmp_path / "big.py").write_text("x = 1\n" * (MAX_LINES + 1))
    (tmp_path / "small.py").write_text("x = 1\n" * MAX_LINES)
    assert module_sizes(tmp_path) == {"big.py": MAX_LINES + 1, "small.py": MAX_LINES}
