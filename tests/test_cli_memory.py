"""The ``agent-memory`` commands, on SQLite and PostgreSQL, through their entry point."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from langgraph_checkpoint_agent_memory.cli import main

ROOT = Path(__file__).resolve().parent.parent


def cli(
    *args: str, env: dict[str, str] | None = None, cwd: Path = ROOT
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "langgraph_checkpoint_agent_memory.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
    )


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, Any, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    try:
        data = json.loads(out) if "--json" in args else out
    except json.JSONDecodeError:
        data = out
    return code, data, err


def test_demo_runs_on_its_own_file(tmp_path: Path) -> None:
    env = {"AGENT_MEMORY_HOME": str(tmp_path / "home")}
    first = cli("demo", "--reset", env=env, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    out = first.stdout
    assert "No model configured" in out
    assert (tmp_path / "agent-memory-demo.db").exists()
    assert not (tmp_path / "home").exists()  # the embedded default is an app's, not the demo's
    for expected in (
        "added",
        "The user lives in Berlin",
        "confirmed",
        "superseded",
        "Berlin -> Munich",
        "history of 'city'",
        "deleted",
        "alice-1 │ 2026",
        "evicted",
        "What a new session would receive",
    ):
        assert expected in out, expected
    # the decay table's title counts the facts it lists as deleted, and the episodes apart
    decayed = re.search(r"deleted (\d+) fact\(s\), (\d+) episode\(s\)", out)
    assert decayed, out
    assert int(decayed[1]) == len(re.findall(r"│ deleted +│", out)) == 1
    context = out.split("What a new session would receive")[1]
    assert "lives in Munich" in context and "pretzels" not in context
    again = cli("demo", env=env, cwd=tmp_path)  # a second run starts the demo user afresh
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("superseded") == out.count("superseded")


def test_operator_commands(
    database_url: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from rich.console import Console

    from langgraph_checkpoint_agent_memory.demo import run_demo

    url = database_url
    run_demo(url, console=Console(file=open(os.devnull, "w")))  # noqa: SIM115

    code, scopes, _ = run(capsys, "scopes", "--url", url, "--json")
    assert code == 0 and scopes["user=alice"]["facts"] == 3
    assert scopes["user=alice"]["history"] == 1
    code, text, _ = run(capsys, "scopes", "--url", url)
    assert "user=alice" in text

    code, facts, _ = run(capsys, "facts", "user=alice", "--url", url, "--json")
    assert code == 0
    assert {f["attribute"]: f["value"] for f in facts} == {
        "name": "Alice",
        "city": "Munich",
        "employer": "ACME",
    }
    code, every, _ = run(capsys, "facts", "user=alice", "--all", "--url", url, "--json")
    assert [f["value"] for f in every if f["attribute"] == "city"] == ["Berlin", "Munich"]
    code, text, _ = run(capsys, "facts", "user=alice", "--all", "--url", url)
    assert "Berlin" in text and "Munich" in text

    code, episodes, _ = run(capsys, "episodes", "user=alice", "--url", url, "--json")
    assert code == 0 and all(e["status"] == "done" for e in episodes) and episodes

    code, context, _ = run(
        capsys, "context", "user=alice", "where do I live", "--url", url, "--json"
    )
    assert code == 0 and "Munich" in context["context"] and context["tokens"] > 0

    code, data, _ = run(capsys, "consolidate", "--url", url, "--json")
    assert code == 0 and data["jobs"] == 0
    code, data, _ = run(capsys, "decay", "--url", url, "--json")
    assert code == 0 and data["deleted"] == 0
    code, data, _ = run(capsys, "sweep", "--url", url, "--json")
    assert code == 0 and data == {"store_items": 0, "threads": []}
    code, data, _ = run(capsys, "jobs", "--all", "--url", url, "--json")
    assert code == 0 and {j["status"] for j in data["jobs"]} == {"completed"}
    code, data, _ = run(capsys, "migrate", "--url", url, "--json")
    # the app made its tables on first use; the key store's (of encryption) comes with migrate
    assert code == 0 and data["applied"] == {
        "checkpoint": [],
        "store": [],
        "memory": [],
        "keys": [1],
    }
    assert data["latest"] == {"checkpoint": 1, "store": 2, "memory": 1, "keys": 1}
    code, data, _ = run(capsys, "worker", "--once", "--url", url, "--json")
    assert code == 0 and data["rounds"] == 1 and data["errors"] == []

    code, data, _ = run(capsys, "erase", "user=alice", "--yes", "--url", url, "--json")
    assert code == 0 and data["removed"]["am_store_items"] >= 5
    assert data["removed"]["threads"] == 2  # both conversation threads of the scope
    code, _, err = run(capsys, "facts", "user=alice", "--url", url)
    assert code == 1 and "unknown scope user=alice" in err


def test_consolidate_reports_failures_and_jobs_retry(
    database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from langgraph_checkpoint_agent_memory import AgentMemory, create_store
    from langgraph_checkpoint_agent_memory.memory import CallableExtractor

    store = create_store(database_url)
    memory = AgentMemory(store, extractor=CallableExtractor(lambda p: "nope"), max_attempts=1)
    memory.record({"user_id": "bob"}, [{"role": "user", "content": "I live in Rome"}])
    assert memory.consolidate().failed == 1
    code, data, _ = run(capsys, "jobs", "--url", database_url, "--json")
    assert code == 0 and [j["status"] for j in data["jobs"]] == ["parked"]
    assert "no JSON object" in data["jobs"][0]["error"]
    code, data, _ = run(capsys, "jobs", "--retry", "--url", database_url, "--json")
    assert data["retried"] == 1
    code, data, _ = run(capsys, "consolidate", "--url", database_url, "--json")
    assert code == 0 and data["completed"] == 1 and data["added"] == 1  # rule-based
    store.close()


def test_errors_are_clear_and_non_zero(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    code, _, err = run(capsys, "facts", "alice", "--url", url)
    assert code == 2 and "user=alice,agent=support" in err
    with pytest.raises(SystemExit) as refused:  # when parsed, as any bad argument
        main(["scopes", "--url", "mysql://nowhere/db"])
    assert refused.value.code == 2 and "mysql" in capsys.readouterr().err
    code, _, err = run(capsys, "episodes", "user=zed", "--url", url)
    assert code == 2 and "does not exist" in err  # and none was created
    assert run(capsys, "migrate", "--url", url)[0] == 0
    code, _, err = run(capsys, "episodes", "user=zed", "--url", url)
    assert code == 1 and "unknown scope" in err
    done = cli("erase", "user=zed", "--url", url)
    assert done.returncode == 1 and "unknown scope" in done.stderr


def test_unreachable_server_masks_the_password(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("psycopg")
    url = "postgresql://agent:s3cret@127.0.0.1:1/memory?connect_timeout=1"
    done = cli("scopes", "--url", url)
    assert done.returncode == 1
    assert "s3cret" not in done.stderr and "127.0.0.1" in done.stderr


def test_erase_asks_for_confirmation_when_piped(tmp_path: Path) -> None:
    from langgraph_checkpoint_agent_memory import AgentMemory, create_store

    url = f"sqlite:///{tmp_path / 'x.db'}"
    store = create_store(url)
    AgentMemory(store).record({"user_id": "al"}, [{"role": "user", "content": "hi"}])
    store.close()
    done = cli("erase", "user=al", "--url", url)
    assert done.returncode == 2 and "--yes" in done.stderr  # a usage mistake
    done = cli("scopes", "--url", url, "--json")
    assert json.loads(done.stdout)["user=al"]["episodes"] == 1  # nothing was erased


@pytest.mark.parametrize("typed", ["n", None], ids=["no", "end-of-input"])
def test_erase_on_a_terminal_takes_ctrl_d_as_no(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    typed: str | None,
) -> None:
    from langgraph_checkpoint_agent_memory import AgentMemory, create_store

    url = f"sqlite:///{tmp_path / 'x.db'}"
    store = create_store(url)
    AgentMemory(store).record({"user_id": "al"}, [{"role": "user", "content": "hi"}])
    store.close()

    def answer(prompt: str) -> str:
        if typed is None:
            raise EOFError  # Ctrl-D at the prompt
        return typed

    monkeypatch.setattr(sys.stdin, "isatty", lambda: True, raising=False)
    monkeypatch.setattr("builtins.input", answer)
    code, out, err = run(capsys, "erase", "user=al", "--url", url)
    assert code == 1 and "Nothing erased." in out and not err
    code, data, _ = run(capsys, "scopes", "--url", url, "--json")
    assert data["user=al"]["episodes"] == 1  # nothing was erased


def test_worker_runs_until_stopped(database_url: str) -> None:
    import signal
    import time

    from langgraph_checkpoint_agent_memory import AgentMemory, create_store

    store = create_store(database_url)
    memory = AgentMemory(store)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "langgraph_checkpoint_agent_memory.cli",
            "worker",
            "--url",
            database_url,
            "--consolidate-every",
            "0.2",
            "--json",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        memory.record({"user_id": "w"}, [{"role": "user", "content": "I live in Oslo"}])
        deadline = time.monotonic() + 60
        while not memory.facts({"user_id": "w"}) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [f.value for f in memory.facts({"user_id": "w"})] == ["Oslo"]
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    stats = json.loads(out)
    assert stats["consolidated"] == 1 and stats["rounds"] >= 1
    store.close()


def test_model_without_langchain_is_a_clear_error(tmp_path: Path) -> None:
    import importlib.util

    if importlib.util.find_spec("langchain") is not None:
        pytest.skip("langchain is installed here; the error path needs it absent")
    done = cli("demo", "--model", "openai:gpt-4o-mini", cwd=tmp_path)
    assert done.returncode == 2
    assert "init_chat_model" in done.stderr and "pip install" in done.stderr


READ_ONLY = [("scopes",), ("facts", "user=alice"), ("episodes", "user=alice"), ("jobs",)]


@pytest.mark.parametrize("command", READ_ONLY)
def test_read_only_commands_create_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: tuple[str, ...]
) -> None:
    url = f"sqlite:///{tmp_path / 'absent' / 'memory.db'}"
    code, _, err = run(capsys, *command, "--url", url)
    assert code == 2
    assert err.count("\n") == 1 and "does not exist" in err and "migrate" in err
    assert not (tmp_path / "absent").exists()


def test_read_only_commands_leave_a_database_without_memory_alone(
    pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import psycopg

    code, _, err = run(capsys, "scopes", "--url", pg_url)
    assert code == 1 and "no agent memory database" in err
    with psycopg.connect(pg_url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'"
        ).fetchone()
    assert row is not None
    assert row[0] == 0


@pytest.mark.parametrize("command", [("scopes",), ("consolidate",)])
@pytest.mark.parametrize("where", ["not sqlite", "no folder"])
def test_a_path_that_is_no_database_is_one_line(
    tmp_path: Path, command: tuple[str, ...], where: str
) -> None:
    if where == "not sqlite":
        path = tmp_path / "notes.db"
        path.write_text("this is a text file, not a database\n" * 100)
    else:
        blocker = tmp_path / "blocker"
        blocker.write_text("a file where a folder would have to be")
        path = blocker / "memory.db"
    done = cli(*command, "--url", f"sqlite:///{path}")
    assert done.returncode == (1 if where == "not sqlite" else 2)  # 2: it does not exist
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith(f"agent-memory {command[0]}: error:")


def test_ctrl_c_while_waiting_on_the_database_is_one_line(pg_url: str) -> None:
    """Ctrl-C while a command waits for a lock another session holds: one line, status
    130, and its server session gone (the wait was cancelled, the connection closed)."""
    import signal
    import time

    import psycopg

    assert main(["migrate", "--url", pg_url, "--json"]) == 0
    name = pg_url.rsplit("/", 1)[1]
    waiting = (
        "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND wait_event_type = 'Lock'"
    )
    with psycopg.connect(pg_url) as holder, psycopg.connect(pg_url, autocommit=True) as watch:
        holder.execute("LOCK TABLE am_migrations IN ACCESS EXCLUSIVE MODE")
        args = ["scopes", "--url", pg_url]
        proc = subprocess.Popen(
            [sys.executable, "-m", "langgraph_checkpoint_agent_memory.cli", *args],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 60
            while not watch.execute(waiting, [name]).fetchone()[0]:  # type: ignore[index]
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr
                time.sleep(0.05)
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=60)
        finally:
            proc.kill()
        assert (proc.returncode, err) == (130, "agent-memory scopes: interrupted\n")
        # the cancelled wait ends on the server too (without a cancel it would last as long
        # as the lock is held)
        while watch.execute(waiting, [name]).fetchone()[0]:  # type: ignore[index]
            assert time.monotonic() < deadline
            time.sleep(0.05)
