"""The command's arguments are checked when parsed: a bad one exits with status 2 and one
line before anything is opened, and ``--url`` takes what the Agent Server's
``AGENT_MEMORY_URL`` takes (a URL, a plain path or a ``file:`` URL of a SQLite file)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from langgraph_checkpoint_agent_memory.cli import main
from langgraph_checkpoint_agent_memory.db.url import as_url


@pytest.mark.parametrize(
    "args",
    [
        ["worker", "--sweep-every", "-1"],
        ["worker", "--consolidate-every", "0"],
        ["worker", "--decay-every", "nan"],
        ["worker", "--sweep-every", "inf"],
        ["jobs", "--limit", "-5"],
        ["jobs", "--limit", "0"],
        ["threads", "--limit", "-1"],
        ["context", "user=alice", "where?", "--budget", "-1"],
        ["context", "user=alice", "where?", "--budget", "many"],
        ["scopes", "--url", ""],
        ["scopes", "--url", "   "],
        ["scopes", "--url", "mysql://nowhere/db"],
    ],
    ids=lambda args: " ".join(args) or "empty",
)
def test_bad_arguments_exit_2_with_one_line(
    args: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if "--url" not in args:
        args = [*args, "--url", f"sqlite:///{tmp_path / 'never.db'}"]
    try:
        code = main(args)
    except SystemExit as exc:  # argparse's way out of a usage error
        code = exc.code  # type: ignore[assignment]
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith(f"agent-memory {args[0]}: error: "), err
    assert not (tmp_path / "never.db").exists()  # nothing was opened


@pytest.mark.parametrize("form", ["path", "relative", "file-url", "sqlite-url"])
def test_url_takes_what_the_server_takes(
    form: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "m.db"
    value = {
        "path": str(path),
        "relative": "m.db",
        "file-url": path.as_uri(),
        "sqlite-url": f"sqlite:///{path}",
    }[form]
    assert main(["migrate", "--url", value]) == 0
    assert path.exists()
    capsys.readouterr()
    assert main(["scopes", "--url", value, "--json"]) == 0
    assert not json.loads(capsys.readouterr().out)  # an empty database: no scopes
    monkeypatch.setenv("AGENT_MEMORY_URL", value)  # the variable, by the same rule
    assert main(["scopes", "--json"]) == 0
    assert as_url(value).startswith("sqlite:///")


def test_budget_tokens_must_be_positive_for_memory_too() -> None:
    from langgraph_checkpoint_agent_memory import AgentMemory, ConfigurationError, create_store

    with create_store(None) as store, pytest.raises(ConfigurationError, match="budget_tokens"):
        AgentMemory(store, budget_tokens=-5)
