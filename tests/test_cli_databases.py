"""Which databases the ``agent-memory`` commands may create, write to and delete.

The demo writes only to a database it created and marked as its own (by default
``./agent-memory-demo.db``, never ``AGENT_MEMORY_URL``), refuses any other in one line with
status 2, and ``--reset`` deletes only its own file. Every other command but ``migrate``
opens an existing database only: on a SQLite path that does not exist it says so, with
status 2, and creates nothing.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from langgraph_checkpoint_agent_memory import SqliteSaver, create_checkpointer, create_store
from langgraph_checkpoint_agent_memory.cli import main
from langgraph_checkpoint_agent_memory.errors import ConfigurationError
from tests.helpers import row_counts

ROOT = Path(__file__).resolve().parent.parent
DEMO_FILE = "agent-memory-demo.db"


def cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> Any:
    """The command as a user runs it, in ``cwd``, with ``env`` added to this environment
    (``AGENT_MEMORY_URL`` removed unless ``env`` sets it)."""
    environ = {k: v for k, v in os.environ.items() if k != "AGENT_MEMORY_URL"}
    environ["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, "-m", "langgraph_checkpoint_agent_memory.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=180,
        env={**environ, **(env or {})},
    )


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def app_database(path: Path) -> str:
    """An app's SQLite database made by this package, holding memory of the demo's user
    ``alice`` (which the demo would erase) and an item of the app's."""
    from langgraph_checkpoint_agent_memory import AgentMemory

    url = f"sqlite:///{path}"
    store = create_store(url)
    store.put(("app",), "settings", {"theme": "dark"})
    AgentMemory(store).record({"user_id": "alice"}, [{"role": "user", "content": "I am real"}])
    store.close()
    return url


def one_line_error(done: Any, command: str, code: int) -> None:
    assert done.returncode == code, (done.returncode, done.stderr)
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith(f"agent-memory {command}: error:"), done.stderr


# -- the demo ------------------------------------------------------------------------------


def test_the_demo_uses_its_own_file_not_agent_memory_url(tmp_path: Path) -> None:
    app = tmp_path / "app.db"
    env = {"AGENT_MEMORY_URL": app_database(app), "AGENT_MEMORY_HOME": str(tmp_path / "home")}
    before = digest(app)
    for _ in range(2):  # `make demo` twice in a row: --reset deletes the demo's own file
        done = cli("demo", "--reset", cwd=tmp_path, env=env)
        assert done.returncode == 0, done.stderr
        assert f"sqlite:///{DEMO_FILE}" in done.stdout
        assert "AGENT_MEMORY_URL is left alone" in done.stdout
    assert digest(app) == before  # the app's database was not touched
    assert not (tmp_path / "home").exists()  # nor was the embedded default created
    scopes = cli("scopes", "--json", "--url", f"sqlite:///{DEMO_FILE}", cwd=tmp_path)
    assert scopes.returncode == 0 and '"user=alice"' in scopes.stdout


@pytest.mark.parametrize("reset", [False, True], ids=["run", "reset"])
@pytest.mark.parametrize("kind", ["app database", "plain sqlite", "not a database"])
def test_the_demo_refuses_a_database_it_did_not_create(
    tmp_path: Path, kind: str, reset: bool
) -> None:
    path = tmp_path / "target.db"
    if kind == "app database":
        app_database(path)
    elif kind == "plain sqlite":  # another program's SQLite file, not in WAL mode
        import sqlite3

        with sqlite3.connect(path) as conn:
            conn.execute("CREATE TABLE notes (body TEXT)")
            conn.execute("INSERT INTO notes VALUES ('keep me')")
        conn.close()
    else:  # a copy of /etc/passwd, say
        path.write_text("root:x:0:0:root:/root:/bin/bash\n" * 40)
    before = digest(path)
    args = ["demo", "--url", f"sqlite:///{path}"] + (["--reset"] if reset else [])
    done = cli(*args, cwd=tmp_path)
    one_line_error(done, "demo", 2)
    assert "not a database the demo created" in done.stderr
    assert path.exists() and digest(path) == before  # nothing written, nothing deleted
    assert not (tmp_path / DEMO_FILE).exists()


def test_the_demo_marks_a_file_it_creates_and_runs_on_it_again(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'sub' / 'mine.db'}"
    first = cli("demo", "--url", url, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    again = cli("demo", "--url", url, cwd=tmp_path)  # marked: its own, so allowed
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("superseded") == first.stdout.count("superseded")
    reset = cli("demo", "--url", url, "--reset", cwd=tmp_path)
    assert reset.returncode == 0, reset.stderr


def test_an_empty_postgresql_database_becomes_the_demos(pg_url: str, tmp_path: Path) -> None:
    import psycopg

    secret = pg_url.replace("@", ":s3cret-pw@", 1)  # the test server trusts any password
    first = cli("demo", "--url", secret, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "s3cret-pw" not in first.stdout + first.stderr  # masked, as every command does
    assert "***" in first.stdout
    again = cli("demo", "--url", pg_url, "--reset", cwd=tmp_path)  # the demo's own: allowed
    assert again.returncode == 0, again.stderr
    with psycopg.connect(pg_url) as conn:
        [(mark,)] = conn.execute(
            "SELECT value FROM am_settings WHERE name = 'created_by'"
        ).fetchall()
    assert mark == "agent-memory demo"
    assert not (tmp_path / DEMO_FILE).exists()


@pytest.mark.parametrize("kind", ["app database", "other tables"])
def test_the_demo_refuses_a_postgresql_database_it_did_not_create(
    pg_url: str, tmp_path: Path, kind: str
) -> None:
    import psycopg

    from langgraph_checkpoint_agent_memory import AgentMemory

    if kind == "app database":
        store = create_store(pg_url)
        AgentMemory(store).record({"user_id": "alice"}, [{"role": "user", "content": "real"}])
        store.close()
    else:
        with psycopg.connect(pg_url) as conn:
            conn.execute("CREATE TABLE orders (id int PRIMARY KEY)")
            conn.execute("INSERT INTO orders VALUES (1)")

    before = row_counts(pg_url)
    for reset in ([], ["--reset"]):
        done = cli("demo", "--url", pg_url, *reset, cwd=tmp_path)
        one_line_error(done, "demo", 2)
        assert "not a database the demo created" in done.stderr
    assert row_counts(pg_url) == before


@pytest.mark.parametrize("existing", [False, True], ids=["new", "reset"])
def test_a_model_that_cannot_be_used_creates_and_deletes_nothing(
    tmp_path: Path, existing: bool
) -> None:
    if existing:
        assert cli("demo", cwd=tmp_path).returncode == 0
        before = digest(tmp_path / DEMO_FILE)
    done = cli("demo", "--model", "nosuch:model", *(["--reset"] if existing else []), cwd=tmp_path)
    one_line_error(done, "demo", 2)
    if existing:
        assert digest(tmp_path / DEMO_FILE) == before
    else:
        assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "where", [[], ["--url", "sqlite:///sub/dir/mine.db"]], ids=["default", "url"]
)
def test_a_setting_refused_leaves_no_demo_file(tmp_path: Path, where: list[str]) -> None:
    done = cli("demo", *where, cwd=tmp_path, env={"AGENT_MEMORY_MASTER_KEY": "not a key"})
    one_line_error(done, "demo", 2)
    assert list(tmp_path.iterdir()) == []


# -- commands on a database that does not exist --------------------------------------------

#: Every command that takes --url, but ``migrate`` and ``import`` (which create a database)
#: and ``demo`` (which creates its own); each with the arguments it needs.
COMMANDS = [
    ("consolidate",),
    ("decay",),
    ("sweep",),
    ("sweep", "--dry-run"),
    ("worker", "--once"),
    ("erase", "user=alice", "--yes"),
    ("jobs", "--retry"),
    ("scopes",),
    ("facts", "user=alice"),
    ("episodes", "user=alice"),
    ("context", "user=alice", "where"),
    ("jobs",),
    ("threads",),
    ("stats",),
    ("encrypt",),
    ("rotate-key",),
    ("move-keys", "--to", "sqlite:///never-made-keys.db"),  # refused before it is opened
]


def test_every_command_with_url_is_covered(capsys: pytest.CaptureFixture[str]) -> None:
    """The list above holds every command of ``agent-memory --help`` that takes ``--url``."""
    import re

    with pytest.raises(SystemExit):
        main(["--help"])
    names = re.findall(r"^    ([a-z][a-z-]*)", capsys.readouterr().out, re.M)
    with_url = set()
    for name in names:
        with pytest.raises(SystemExit):
            main([name, "--help"])
        if "--url" in capsys.readouterr().out:
            with_url.add(name)
    assert "consolidate" in names and "config" not in with_url
    assert with_url - {"migrate", "import", "demo"} == {c[0] for c in COMMANDS}


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_a_missing_sqlite_database_is_not_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: tuple[str, ...]
) -> None:
    url = f"sqlite:///{tmp_path / 'typo' / 'memory.db'}"
    code = main([*command, "--url", url])
    _, err = capsys.readouterr()
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith(f"agent-memory {command[0]}: error:"), err
    assert "does not exist" in err and f"`agent-memory migrate --url {url}`" in err
    assert not (tmp_path / "typo").exists()
    (tmp_path / "typo").mkdir()  # the folder exists, the file does not
    assert main([*command, "--url", url]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert list((tmp_path / "typo").iterdir()) == []


WRITES = [c for c in COMMANDS if c[0] in ("consolidate", "decay", "sweep", "worker", "erase")]


@pytest.mark.parametrize("command", WRITES, ids=" ".join)
def test_writing_commands_leave_a_database_of_another_program_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: tuple[str, ...]
) -> None:
    import sqlite3

    path = tmp_path / "other.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE notes (body TEXT)")
    conn.close()
    before = digest(path)
    code = main([*command, "--url", f"sqlite:///{path}"])
    _, err = capsys.readouterr()
    assert code == 1 and "no agent memory database" in err, err
    assert digest(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.db"]


def test_migrate_creates_the_database_the_others_then_use(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'new' / 'memory.db'}"
    assert main(["consolidate", "--url", url]) == 2
    assert main(["migrate", "--url", url]) == 0
    assert main(["consolidate", "--url", url, "--json"]) == 0
    assert '"completed": 0' in capsys.readouterr().out


# -- the option behind it ------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["rw", "ro"])
def test_sqlite_mode_opens_an_existing_file_only(tmp_path: Path, mode: Any) -> None:
    from langgraph_checkpoint_agent_memory import DatabaseNotFoundError

    path = tmp_path / "absent" / "memory.db"
    saver = SqliteSaver(path, mode=mode)
    with pytest.raises(DatabaseNotFoundError, match="does not exist"):
        saver.get_tuple({"configurable": {"thread_id": "t"}})
    saver.close()
    store = create_store(f"sqlite:///{path}", mode=mode)
    with pytest.raises(DatabaseNotFoundError):
        store.get(("a",), "k")
    store.close()
    assert not (tmp_path / "absent").exists()
    assert isinstance(DatabaseNotFoundError("x"), ConfigurationError)


def test_sqlite_mode_rw_writes_and_ro_reads_an_existing_file(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    seed = create_store(url)
    seed.setup()
    seed.close()
    store = create_store(url, mode="rw")
    store.put(("a",), "k", {"v": 1})
    store.close()
    reader = create_store(url, mode="ro", auto_setup=False)
    item = reader.get(("a",), "k")
    assert item is not None and item.value == {"v": 1}
    reader.close()


def test_mode_is_for_sqlite_files_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENT_MEMORY_URL", raising=False)
    with pytest.raises(ConfigurationError, match="SQLite file only"):
        create_store("postgresql://nobody@127.0.0.1:9/x", mode="rw")
    with pytest.raises(ConfigurationError, match="SQLite file only"):
        create_checkpointer(url="postgresql://nobody@127.0.0.1:9/x", mode="rw")
    with pytest.raises(ConfigurationError, match="SQLite file only"):
        create_store(mode="rw")
    with pytest.raises(ConfigurationError, match="mode must be"):
        SqliteSaver("x.db", mode="w")  # type: ignore[arg-type]


def test_writing_commands_leave_an_empty_postgresql_database_alone(
    pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import psycopg

    for command in WRITES:
        code = main([*command, "--url", pg_url])
        _, err = capsys.readouterr()
        assert code == 1 and "no agent memory database" in err, (command, err)
    with psycopg.connect(pg_url) as conn:
        [(tables,)] = conn.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'"
        ).fetchall()
    assert tables == 0  # nothing was set up
