"""``agent-memory threads`` and ``agent-memory sweep --dry-run`` on SQLite and PostgreSQL:
what they report is what the savers hold and what the sweep then does, and as reads they
create and change nothing."""

from __future__ import annotations

import json
import random
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from langgraph_checkpoint_agent_memory import create_store
from langgraph_checkpoint_agent_memory.checkpoint.backends import PostgresSaver, SqliteSaver
from langgraph_checkpoint_agent_memory.cli import main
from tests.helpers import FakeClock
from tests.test_retention import chat_graph, talk


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, Any, str]:
    try:
        code = main(list(args))
    except SystemExit as exc:  # an argument refused while parsing: argparse exits
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return code, json.loads(out) if "--json" in args and code == 0 else out, err


def saver_for(url: str, **options: Any) -> Any:
    cls = SqliteSaver if url.startswith("sqlite") else PostgresSaver
    return cls(url, **options)


def populate(url: str) -> dict[str, Any]:
    """Two threads that expired an hour ago (in real time: the CLI's clock), one live one,
    and a store item that expired too; returns the threads as the saver lists them."""
    past = FakeClock(start=time.time() - 3600)
    saver = saver_for(url, ttl_seconds=60, clock=past, activity_precision=0)
    talk(chat_graph(saver), {"configurable": {"thread_id": "old-1"}}, 4)
    talk(chat_graph(saver), {"configurable": {"thread_id": "old-2"}}, 2)
    live = {"configurable": {"thread_id": "live", "ttl_seconds": 7200}}
    # text that does not compress, so the live thread holds the most bytes
    chat_graph(saver).invoke(
        {"messages": [HumanMessage(random.Random(7).randbytes(2500).hex())]}, live
    )
    infos = {i.thread_id: i for i in saver.threads()}
    saver.close()
    store = create_store(url, clock=past)
    store.put(("cache",), "stale", {"text": "expired an hour ago"}, ttl=1)
    store.put(("cache",), "fresh", {"text": "kept"})
    store.close()
    return infos


def test_threads_command_lists_what_the_saver_holds(
    database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    infos = populate(database_url)
    code, data, _ = run(capsys, "threads", "--url", database_url, "--json")
    assert code == 0
    assert [d.pop("status") for d in data] == ["live", "expired", "expired"]  # as of now
    expected = [infos[t].as_dict() for t in ("live", "old-1", "old-2")]  # most bytes first
    assert data == [{k: v for k, v in e.items() if k != "status"} for e in expected]
    code, data, _ = run(
        capsys, "threads", "--url", database_url, "--json", "--sort", "checkpoints", "--limit", "1"
    )
    assert [d["thread_id"] for d in data] == ["old-1"]
    code, text, _ = run(capsys, "threads", "--url", database_url, "--sort", "expires_at")
    assert code == 0 and text.index("old-1") < text.index("live")
    assert "expired" in text and "3 thread(s)" in text


def test_sweep_dry_run_predicts_the_sweep(
    database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    populate(database_url)
    _, before, _ = run(capsys, "threads", "--url", database_url, "--json")
    sizes = {t["thread_id"]: t for t in before}

    code, plan, _ = run(capsys, "sweep", "--dry-run", "--url", database_url, "--json")
    assert code == 0 and plan["dry_run"] is True and plan["strategy"] == "delete"
    assert plan["threads"] == ["old-1", "old-2"] and plan["store_items"] == 1
    assert plan["checkpoint_bytes_freed"] == sizes["old-1"]["bytes"] + sizes["old-2"]["bytes"]
    assert plan["store_bytes_freed"] > 0
    assert plan["bytes_freed"] == plan["checkpoint_bytes_freed"] + plan["store_bytes_freed"]
    assert run(capsys, "threads", "--url", database_url, "--json")[1] == before  # unchanged

    code, pruning, _ = run(
        capsys,
        *("sweep", "--dry-run", "--strategy", "keep_latest", "--keep-last", "2"),
        *("--url", database_url, "--json"),
    )
    details = {t["thread_id"]: t for t in pruning["thread_details"]}
    assert {t["action"] for t in details.values()} == {"prune"}
    assert details["old-1"]["checkpoints_removed"] == sizes["old-1"]["checkpoints"] - 2
    code, text, _ = run(
        capsys, "sweep", "--dry-run", "--strategy", "keep_latest", "--url", database_url
    )
    assert "prune 2 expired thread(s) to their last 1 checkpoint(s) (" in text
    assert "Nothing was changed" in text

    code, done, _ = run(
        capsys,
        *("sweep", "--strategy", "keep_latest", "--keep-last", "2"),
        *("--url", database_url, "--json"),
    )
    assert code == 0 and sorted(done["threads"]) == ["old-1", "old-2"] and done["store_items"] == 1
    _, after, _ = run(capsys, "threads", "--url", database_url, "--json")
    left = {t["thread_id"]: t for t in after}
    for name, predicted in details.items():
        assert left[name]["checkpoints"] == 2
        assert left[name]["bytes"] == sizes[name]["bytes"] - predicted["bytes_freed"]
    assert left["live"] == sizes["live"]
    _, nothing, _ = run(capsys, "sweep", "--dry-run", "--url", database_url, "--json")
    assert (nothing["threads"], nothing["store_items"], nothing["bytes_freed"]) == ([], 0, 0)


@pytest.mark.parametrize("strategy", ["delete", "keep_latest"])
def test_the_worker_sweeps_with_the_apps_strategy(
    database_url: str, capsys: pytest.CaptureFixture[str], strategy: str
) -> None:
    """`agent-memory worker --strategy keep_latest` prunes expired threads as an app that
    keeps them does; without it, the worker deletes them."""
    infos = populate(database_url)
    code, stats, _ = run(
        capsys,
        *("worker", "--once", "--strategy", strategy),
        *(("--keep-last", "2") if strategy == "keep_latest" else ()),
        *("--url", database_url, "--json"),
    )
    assert code == 0 and stats["swept"] == 3  # two threads and the stale item
    _, after, _ = run(capsys, "threads", "--url", database_url, "--json")
    left = {t["thread_id"]: t["checkpoints"] for t in after}
    if strategy == "delete":
        assert left == {"live": infos["live"].checkpoints}
    else:
        assert left == {"old-1": 2, "old-2": 2, "live": infos["live"].checkpoints}


@pytest.mark.parametrize("command", [("threads",), ("sweep", "--dry-run")])
def test_the_new_read_commands_create_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: tuple[str, ...]
) -> None:
    url = f"sqlite:///{tmp_path / 'absent' / 'memory.db'}"
    code, _, err = run(capsys, *command, "--url", url)
    assert code == 2 and err.count("\n") == 1 and "does not exist" in err
    assert not (tmp_path / "absent").exists()


@pytest.mark.parametrize("command", [("threads",), ("sweep", "--dry-run")])
def test_the_new_read_commands_leave_an_empty_postgresql_alone(
    pg_url: str, capsys: pytest.CaptureFixture[str], command: tuple[str, ...]
) -> None:
    import psycopg

    code, _, err = run(capsys, *command, "--url", pg_url)
    assert code == 1 and "no agent memory database" in err
    with psycopg.connect(pg_url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'"
        ).fetchone()
    assert row is not None
    assert row[0] == 0


def test_a_database_of_a_store_only_has_no_threads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Nor agent memory: ``threads``, ``sweep --dry-run`` and ``stats`` say so, and the
    reads create no table."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = create_store(url)
    store.put(("a",), "k", {"v": 1})
    store.close()
    assert run(capsys, "threads", "--url", url, "--json")[:2] == (0, [])
    code, plan, _ = run(capsys, "sweep", "--dry-run", "--url", url, "--json")
    assert code == 0 and plan["threads"] == [] and plan["store_items"] == 0
    code, stats, _ = run(capsys, "stats", "--url", url, "--json")
    assert code == 0 and stats["threads"] is None and stats["backlog"] is None
    assert "checkpoint" not in stats["size"]["components"] and stats["size"]["components"]["store"]
    assert "no checkpointer tables" in run(capsys, "stats", "--url", url)[1]
    conn = sqlite3.connect(tmp_path / "store.db")
    tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master")}
    conn.close()
    assert "am_checkpoints" not in tables  # the reads created no checkpoint table


def test_bad_retention_arguments_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    populate(url)
    code, _, err = run(capsys, "sweep", "--dry-run", "--keep-last", "0", "--url", url)
    assert code == 2 and "--keep-last" in err
    code, _, err = run(capsys, "threads", "--limit", "-1", "--url", url)
    assert code == 2 and "limit" in err


@pytest.mark.parametrize(
    "command", [["sweep"], ["sweep", "--dry-run"], ["worker", "--once"]], ids=" ".join
)
def test_keep_last_without_keep_latest_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    """`--keep-last` with the `delete` strategy would delete the expired threads whole."""
    url = f"sqlite:///{tmp_path / 'm.db'}"
    populate(url)
    _, before, _ = run(capsys, "threads", "--url", url, "--json")
    for strategy in ((), ("--strategy", "delete")):
        code, out, err = run(capsys, *command, *strategy, "--keep-last", "2", "--url", url)
        assert code == 2 and not out
        said = "--keep-last applies only with --strategy keep_latest"
        assert err == f"agent-memory {command[0]}: error: {said}\n"
    _, after, _ = run(capsys, "threads", "--url", url, "--json")
    assert after == before  # nothing was swept
