"""The agent-memory command, run as a user would run it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

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
        "from langgraph_checkpoint_agent_memory.db.postgres import PostgresDatabase\n"
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


def test_a_module_that_raises_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "broken_settings.py").write_text("raise RuntimeError('the module is broken')\n")
    done = run("config", "--module", "broken_settings", env={"PYTHONPATH": str(tmp_path)})
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith("agent-memory config: error: --module broken_settings ")
    assert "RuntimeError: the module is broken" in done.stderr


def test_ctrl_c_is_one_line_with_status_130(tmp_path: Path) -> None:
    """Ctrl-C while a command runs (here: while it imports a module that waits)."""
    import signal

    (tmp_path / "waiting_settings.py").write_text(
        "import sys, time\nprint('importing', flush=True)\ntime.sleep(600)\n"
    )
    args = ["config", "--module", "waiting_settings"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "langgraph_checkpoint_agent_memory.cli", *args],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "importing\n"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert err == "agent-memory config: interrupted\n"


@pytest.mark.parametrize("where", ["home under a file", "file in the way"])
def test_migrate_where_no_folder_can_be_made_is_one_line(tmp_path: Path, where: str) -> None:
    """A HOME that does not exist and cannot be created (the default database lives under
    it), or a --url whose folder would have to replace a file: one line, nothing created."""
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where a folder would have to be")
    env = {k: "" for k in ("AGENT_MEMORY_URL", "AGENT_MEMORY_HOME", "XDG_DATA_HOME")}
    if where == "home under a file":
        done = run("migrate", env={**env, "HOME": str(blocker / "home")})
    else:
        done = run("migrate", "--url", str(blocker / "memory.db"), env=env)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith("agent-memory migrate: error: cannot create the folder ")
    assert str(blocker) in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blocker"]


def test_migrate_refused_by_a_setting_creates_no_folder(tmp_path: Path) -> None:
    done = run(
        "migrate",
        "--url",
        f"sqlite:///{tmp_path / 'new' / 'memory.db'}",
        env={"AGENT_MEMORY_MASTER_KEY": "not a key"},
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert list(tmp_path.iterdir()) == []


def test_no_home_folder_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """No HOME and no account for the user (a container run as an arbitrary uid): the
    commands that need the default database say how to give one; the others work."""
    import pwd

    from langgraph_checkpoint_agent_memory.cli import main

    def no_account(uid: int) -> Any:
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    for name in ("HOME", "AGENT_MEMORY_HOME", "XDG_DATA_HOME", "AGENT_MEMORY_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(pwd, "getpwuid", no_account)
    for command in (["scopes"], ["migrate"], ["threads", "--json"]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "AGENT_MEMORY_HOME" in err, err
    url = f"sqlite:///{tmp_path / 'm.db'}"
    assert main(["migrate", "--url", url, "--json"]) == 0
    assert main(["scopes", "--url", url, "--json"]) == 0
