"""Every ```python block of the README and the user guide runs as written. A block whose
first line says ``# requires: postgresql`` runs with AGENT_MEMORY_URL set to a fresh
PostgreSQL database."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def blocks() -> list[tuple[str, str]]:
    found = []
    for doc in ("README.md", "user-guide.md"):
        for i, code in enumerate(BLOCK.findall((ROOT / doc).read_text())):
            found.append((f"{doc}#{i + 1}", code))
    return found


@pytest.mark.parametrize(("where", "code"), blocks(), ids=[w for w, _ in blocks()])
def test_example_runs(
    where: str, code: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("AGENT_MEMORY_URL", None)
    if code.startswith("# requires: postgresql"):
        env["AGENT_MEMORY_URL"] = request.getfixturevalue("pg_url")
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert result.returncode == 0, f"{where} failed:\n{result.stderr}"
