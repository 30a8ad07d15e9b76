"""The agent-memory command, run as a user would run it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import langgraph_checkpoint_agent_memory as pkg


def run(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "langgraph_checkpoint_agent_memory.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=cwd,
        timeout=60,
    )


def test_help_and_version() -> None:
    helped = run("--help")
    assert helped.returncode == 0 and "config" in helped.stdout
    version = run("--version")
    assert version.returncode == 0 and version.stdout.strip() == f"agent-memory {pkg.__version__}"


def test_config_json_lists_fields_of_imported_modules(tmp_path: Path) -> None:
    (tmp_path / "myagent_settings.py").write_text(
        "from langgraph_checkpoint_agent_memory import agent_config\n"
        "@agent_config('config.checkpointer.ttl_seconds', 'Thread TTL', 'Idle seconds')\n"
        "def ttl() -> int:\n    return 3600\n"
    )
    result = run(
        "config",
        "--json",
        "--module",
        "myagent_settings",
        env={"PYTHONPATH": str(tmp_path), "CONFIG__CHECKPOINTER__TTL_SECONDS": "42"},
    )
    assert result.returncode == 0, result.stderr
    [field] = json.loads(result.stdout)
    assert (field["key"], field["value"], field["source"], field["default"]) == (
        "config.checkpointer.ttl_seconds",
        42,
        "env",
        3600,
    )
    text = run("config", "--module", "myagent_settings", env={"PYTHONPATH": str(tmp_path)})
    assert "config.checkpointer.ttl_seconds" in text.stdout and "3600" in text.stdout


def test_config_reports_bad_values_with_exit_status(tmp_path: Path) -> None:
    (tmp_path / "bad_settings.py").write_text(
        "from langgraph_checkpoint_agent_memory import agent_config\n"
        "@agent_config('config.x', 'X', 'X')\ndef x() -> int:\n    return 1\n"
    )
    result = run(
        "config", "--module", "bad_settings", env={"PYTHONPATH": str(tmp_path), "CONFIG__X": "many"}
    )
    assert result.returncode == 2
    assert "config.x" in result.stderr and "CONFIG__X" in result.stderr
    missing = run("config", "--module", "no_such_module_here")
    assert missing.returncode == 2 and "no_such_module_here" in missing.stderr


def test_an_unreachable_postgresql_is_one_line() -> None:
    pytest.importorskip("psycopg_pool")
    script = (
        "import sys\n"
        "from langgraph_checkpoint_agent_memory.db.postgres_connection import PostgresDatabase\n"
        "opened = PostgresDatabase.__init__\n"
        "def quick(self, source, **options):  # a refusal in 1 s, not the default 10\n"
        "    opened(self, source, **{**options, 'connect_timeout': 1.0})\n"
        "PostgresDatabase.__init__ = quick\n"
        "from langgraph_checkpoint_agent_memory.cli import main\n"
        "sys.exit(main(['scopes', '--url', 'postgresql://agent:pw@127.0.0.1:9/memory']))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1, done.stderr
    # a refused port is a definite refusal: said at once, in the server's words, password masked
    assert done.stderr.startswith("agent-memory scopes: error: PostgreSQL at "), done.stderr
    assert "refused the connection" in done.stderr
    assert "pw" not in done.stderr
