"""What the ``agent-memory`` command loads, shows and prints: its help and its read commands
load no more than they need, long commands show their progress on a terminal only, and a
table never cuts a date. (How fast it starts is measured in benchmarks/suites/cli.py.)"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from rich.console import Console

from langgraph_checkpoint_agent_memory.demo import run_demo

ROOT = Path(__file__).resolve().parent.parent
COMMAND = [sys.executable, "-m", "langgraph_checkpoint_agent_memory.cli"]
#: What a command that needs none of them must not load: the demo, the façade of agent
#: memory (LangChain's runnables, tools and tracers), LangGraph's store, the cipher.
FACADE = (
    "langgraph_checkpoint_agent_memory.demo",
    "langgraph_checkpoint_agent_memory.memory.agent",
    "langgraph_checkpoint_agent_memory.store.store",
    "langgraph.store.base",
    "langchain_core.runnables",
    "langchain_core.tracers",
    "cryptography",
)

#: What a read command on a SQLite file does not use at all: LangChain and LangGraph (the
#: stored rows are read by the package's own plans), the vectors' numpy, the settings'
#: pydantic, the other backends' drivers, the codec's zstandard.
UNREAD = (
    "langchain_core",
    "langgraph",
    "numpy",
    "pydantic",
    "psycopg",
    "psycopg_pool",
    "hdbcli",
    "zstandard",
)


def environment(**more: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TERM": "xterm"}
    env.pop("AGENT_MEMORY_MASTER_KEY", None)  # the tests' own settings only
    return {**env, **more}


def loaded(*args: str) -> set[str]:
    """The modules in ``sys.modules`` after the command ``args`` ran in a fresh interpreter."""
    script = textwrap.dedent(
        f"""
        import contextlib, io, json, sys
        from langgraph_checkpoint_agent_memory.cli import main
        with contextlib.redirect_stdout(io.StringIO()):
            try:
                status = main({list(args)!r})
            except SystemExit as exc:
                status = exc.code
        assert status == 0, status
        print(json.dumps(sorted(sys.modules)))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=environment(),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout))


def heavy(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(n for n in names if n in modules)


@pytest.fixture(scope="module")
def demo_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file with the demo's memory: alice's facts, one of them superseded."""
    path = tmp_path_factory.mktemp("demo") / "memory.db"
    run_demo(f"sqlite:///{path}", console=Console(file=open(os.devnull, "w")))  # noqa: SIM115
    return path


def test_help_loads_no_database_layer() -> None:
    modules = loaded("--help")
    assert heavy(modules, (*FACADE, "sqlalchemy", "numpy", "pydantic", "rich")) == []


@pytest.mark.parametrize(
    "args",
    [
        ("scopes",),
        ("facts", "user=alice"),
        ("facts", "user=alice", "--all"),
        ("episodes", "user=alice"),
    ],
)
def test_read_commands_load_neither_the_store_nor_the_facade(
    demo_db: Path, args: tuple[str, ...]
) -> None:
    modules = loaded(*args, "--url", str(demo_db))
    assert heavy(modules, (*FACADE, *UNREAD)) == []
    assert "sqlalchemy" in modules  # they do read the database


@pytest.mark.parametrize(
    ("args", "status"),
    [
        (("scopes", "--json"), 0),  # a quick read: the collector off
        (("stats", "--json"), 0),  # the collector on
        (("facts", "user=nobody"), 1),
        (("episodes", "user=alice", "--url", "/no/such/folder/memory.db"), 2),
    ],
)
def test_the_installed_program_exits_as_main_returns(
    demo_db: Path, args: tuple[str, ...], status: int
) -> None:
    """``agent-memory`` is :func:`run` (the script pyproject.toml installs): it exits with
    the status :func:`main` returns, its output complete when piped."""
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'agent-memory = "langgraph_checkpoint_agent_memory.cli:run"' in pyproject
    url = () if "--url" in args else ("--url", str(demo_db))
    argv = ["agent-memory", *args, *url]
    code = f"import sys\nsys.argv = {argv!r}\n"
    code += "from langgraph_checkpoint_agent_memory.cli import run\nrun()"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=environment(), timeout=120
    )
    assert done.returncode == status, done.stderr
    if "--json" in args:
        assert json.loads(done.stdout)  # all of it, flushed at the exit
    if status:
        assert done.stderr.count("\n") == 1 and "error" in done.stderr


def test_read_commands_show_what_agent_memory_returns(demo_db: Path) -> None:
    """The light read path returns what the façade returns, field for field."""
    from langgraph_checkpoint_agent_memory.cli.common import fact_dict
    from langgraph_checkpoint_agent_memory.factory import create_store
    from langgraph_checkpoint_agent_memory.memory import AgentMemory

    def command(*args: str) -> object:
        done = subprocess.run(
            [*COMMAND, *args, "--url", str(demo_db), "--json"],
            capture_output=True,
            text=True,
            env=environment(),
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    store = create_store(f"sqlite:///{demo_db}")
    try:
        memory = AgentMemory(store)
        scopes = memory.scopes()
        facts = [fact_dict(f) for f in memory.facts("user=alice")]
        history = [fact_dict(f) for f in memory.history("user=alice")]
        episodes = [e.key for e in memory.episodes("user=alice")]
    finally:
        store.close()
    assert command("scopes") == scopes
    assert command("facts", "user=alice") == json.loads(json.dumps(facts, default=str))
    assert command("facts", "user=alice", "--all") == json.loads(json.dumps(history, default=str))
    assert [e["key"] for e in command("episodes", "user=alice")] == episodes  # type: ignore[attr-defined]


def test_a_date_column_is_never_cut_at_80_columns(demo_db: Path) -> None:
    done = subprocess.run(
        [*COMMAND, "facts", "user=alice", "--all", "--url", str(demo_db)],
        capture_output=True,
        text=True,
        env=environment(COLUMNS="80"),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    table = done.stdout
    assert max(len(line) for line in table.splitlines()) <= 80
    data = subprocess.run(
        [*COMMAND, "facts", "user=alice", "--all", "--url", str(demo_db), "--json"],
        capture_output=True,
        text=True,
        env=environment(),
        timeout=120,
    )
    from langgraph_checkpoint_agent_memory.cli.output import day

    facts = json.loads(data.stdout)
    dates = {day(f["valid_from"]) for f in facts} | {
        day(f["valid_to"]) for f in facts if f["valid_to"]
    }
    assert any(f["valid_to"] for f in facts)  # the "until" column has a date
    for date in dates:
        assert date in table, (date, table)
    assert "…" not in "".join(line for line in table.splitlines() if "20" in line[:80])


# -- progress ---------------------------------------------------------------------------------


def on_terminal(*args: str, env: dict[str, str]) -> tuple[int, str, str]:
    """Run the command with stderr on a pseudo-terminal: its status, its stdout, and what
    the terminal received."""
    master, slave = os.openpty()
    proc = subprocess.Popen(
        [*COMMAND, *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=slave,
        env=env,
    )
    os.close(slave)
    shown = bytearray()
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the command closed its end
            break
        if not chunk:
            break
        shown += chunk
    os.close(master)
    assert proc.stdout is not None
    out = proc.stdout.read().decode()
    return proc.wait(timeout=120), out, shown.decode(errors="replace")


def piped(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*COMMAND, *args], capture_output=True, text=True, env=env, timeout=120)


@pytest.fixture
def keyed(tmp_path: Path) -> tuple[str, dict[str, str]]:
    """A SQLite file of plaintext memory (the demo's), and an environment with a master key."""
    pytest.importorskip("cryptography")
    from langgraph_checkpoint_agent_memory import generate_master_key

    path = tmp_path / "memory.db"
    run_demo(f"sqlite:///{path}", console=Console(file=open(os.devnull, "w")))  # noqa: SIM115
    return str(path), environment(AGENT_MEMORY_MASTER_KEY=generate_master_key())


#: Each long command, and what its progress says.
LONG = [
    (("encrypt",), "encrypting store items"),
    (("rotate-key",), "re-wrapping data keys"),
    (("sweep",), "removing expired"),
    (("migrate",), "migrating"),
    (("erase", "user=alice", "--yes"), "erasing user=alice"),
]


@pytest.mark.parametrize(("args", "says"), LONG, ids=[a[0] for a, _ in LONG])
def test_long_commands_show_progress_on_a_terminal_only(
    keyed: tuple[str, dict[str, str]], args: tuple[str, ...], says: str
) -> None:
    base, env = keyed
    if args[0] != "encrypt":  # the others run on the encrypted database
        first = piped("encrypt", "--url", base, env=env)
        assert first.returncode == 0, first.stderr
    # each run on a copy of its own (an erase leaves nothing to erase again)
    terminal, pipe, scripted = (shutil.copy(base, f"{base}.{n}") for n in range(3))
    status, out, shown = on_terminal(*args, "--url", terminal, env=env)
    assert status == 0, shown
    assert says in shown, shown
    assert says not in out  # progress never goes to stdout
    # piped: no progress on stderr (an erase's warning of keys beside the data is said);
    # with --json on a terminal: nothing shown, JSON on stdout
    again = piped(*args, "--url", pipe, env=env)
    assert again.returncode == 0, again.stderr
    assert says not in again.stderr and "\x1b[" not in again.stderr
    status, out, shown = on_terminal(*args, "--url", scripted, "--json", env=env)
    assert status == 0, shown
    assert says not in shown
    json.loads(out)


def test_import_shows_its_threads_and_items_on_a_terminal_only(tmp_path: Path) -> None:
    """``import`` (from a file LangGraph's SqliteSaver 3.0.2 wrote) shows a bar per part."""
    source = tmp_path / "langgraph.db"
    fixture = ROOT / "tests" / "fixtures" / "langgraph" / "sqlite-3.0.2.db.gz"
    source.write_bytes(gzip.decompress(fixture.read_bytes()))
    env = environment()
    status, out, shown = on_terminal(
        "import", "--from", str(source), "--url", str(tmp_path / "ours.db"), env=env
    )
    assert status == 0, shown
    assert "importing threads" in shown and "importing threads" not in out
    again = piped("import", "--from", str(source), "--url", str(tmp_path / "two.db"), env=env)
    assert again.returncode == 0, again.stderr
    assert again.stderr == ""
    status, out, shown = on_terminal(
        "import", "--from", str(source), "--url", str(tmp_path / "three.db"), "--json", env=env
    )
    assert status == 0 and "importing" not in shown, shown
    json.loads(out)
