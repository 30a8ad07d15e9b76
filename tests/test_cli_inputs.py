"""The command's arguments are checked when parsed: a bad one exits with status 2 and one
line before anything is opened, and ``--url`` takes what the Agent Server's
``AGENT_MEMORY_URL`` takes (a URL, a plain path or a ``file:`` URL of a SQLite file)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from langgraph_checkpoint_agent_memory.cli import main
from langgraph_checkpoint_agent_memory.db.url import as_url

#: The largest count the commands take: a 4-byte INTEGER's largest value.
MOST = 2**31 - 1


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
        ["threads", "--limit", "10000000000000000000000"],
        ["jobs", "--limit", str(2**31)],
        ["sweep", "--keep-last", str(10**23)],
        ["sweep", "--keep-last", "0"],
        ["sweep", "--dry-run", "--keep-last", "0"],
        ["worker", "--keep-last", "-1"],
        ["migrate", "--shard-depth", str(10**20)],
        ["migrate", "--shard-depth", "0"],
        ["scopes", "--frobnicate"],
        ["sweep", "--dry-run", "--frobnicate"],
    ],
    ids=lambda args: " ".join(args) or "empty",
)
def test_bad_arguments_exit_2_with_one_line(
    args: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flag = [a for a in args if a.startswith("--")][-1]  # the argument the error names
    if "--url" not in args:
        args = [*args, "--url", f"sqlite:///{tmp_path / 'never.db'}"]
    try:
        code = main(args)
    except SystemExit as exc:  # argparse's way out of a usage error
        code = exc.code  # type: ignore[assignment]
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith(f"agent-memory {args[0]}: error: "), err
    assert flag in err
    assert not (tmp_path / "never.db").exists()  # nothing was opened


@pytest.mark.parametrize(("command", "flag"), [("move-keys", "--to"), ("import", "--from")])
def test_a_bad_url_is_named_by_its_own_option(
    command: str, flag: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'never.db'}"
    with pytest.raises(SystemExit) as exited:
        main([command, flag, "sqlte:///k.db", "--url", url])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.count("\n") == 1
    assert err.startswith(f"agent-memory {command}: error: argument {flag}: "), err
    assert f"(from {flag})" in err and "--url" not in err
    assert not (tmp_path / "never.db").exists()


@pytest.mark.parametrize(
    "args",
    [
        ["threads", "--limit", str(MOST)],
        ["jobs", "--limit", str(MOST)],
        ["sweep", "--strategy", "keep_latest", "--keep-last", str(MOST)],
        ["sweep", "--dry-run", "--strategy", "keep_latest", "--keep-last", str(MOST)],
    ],
    ids=" ".join,
)
def test_the_largest_counts_are_held_by_the_database(
    args: list[str], database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The bounds of the counts are ones every backend holds: the largest is taken."""
    assert main(["migrate", "--url", database_url, "--shard-depth", str(MOST)]) == 0
    capsys.readouterr()
    assert main([*args, "--url", database_url, "--json"]) == 0, capsys.readouterr().err
    assert main(["migrate", "--url", database_url, "--shard-depth", str(MOST)]) == 0


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


def test_a_tilde_in_a_sqlite_url_is_the_home_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from langgraph_checkpoint_agent_memory import ConfigurationError, create_checkpointer

    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    assert main(["migrate", "--url", "sqlite:///~/memory/m.db"]) == 0
    assert (home / "memory" / "m.db").exists()
    saver: Any = create_checkpointer(url="sqlite:///~/memory/m.db")  # the same file
    with saver:
        assert list(saver.list(None)) == []
    assert main(["scopes", "--url", "sqlite:///~/memory/m.db", "--json"]) == 0
    assert list(work.iterdir()) == []  # no folder named "~"
    capsys.readouterr()
    with pytest.raises(ConfigurationError, match="~no-such-user-here"):
        create_checkpointer(url="sqlite:///~no-such-user-here/m.db")
    with pytest.raises(SystemExit):
        main(["migrate", "--url", "sqlite:///~no-such-user-here/m.db"])
    assert capsys.readouterr().err.count("\n") == 1
    assert list(work.iterdir()) == []
