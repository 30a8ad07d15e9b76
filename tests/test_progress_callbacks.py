"""The long operations report their progress through ``on_progress(done, total)``, sync
and async alike: what the command line's bars show (tests/test_cli_output.py shows them)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from langgraph_checkpoint_agent_memory import (
    AgentMemory,
    Encryption,
    SqliteSaver,
    create_store,
    generate_master_key,
)
from langgraph_checkpoint_agent_memory.db.migrations import COMPONENTS, migrate
from tests.helpers import FakeClock

Seen = list[tuple[int, "int | None"]]
Report = Callable[[int, "int | None"], None]


def recorder() -> tuple[Seen, Report]:
    """What is reported, and the callback that records it."""
    seen: Seen = []

    def report(done: int, total: int | None) -> None:
        seen.append((done, total))

    return seen, report


@pytest.mark.parametrize("api", ["sync", "async"])
def test_store_sweep_reports_items_removed(tmp_path: Path, api: str) -> None:
    clock = FakeClock(start=1_800_000_000)
    store = create_store(f"sqlite:///{tmp_path / 's.db'}", ttl={"default_ttl": 1.0}, clock=clock)
    for i in range(3):
        store.put(("t",), f"k{i}", {"v": i})
    clock.advance(120)
    seen, report = recorder()
    if api == "sync":
        removed = store.sweep(on_progress=report)
    else:
        removed = asyncio.run(store.asweep(on_progress=report))
    store.close()
    assert removed == 3 and seen == [(3, None)]


@pytest.mark.parametrize("api", ["sync", "async"])
def test_encrypt_plaintext_reports_each_item_and_thread(tmp_path: Path, api: str) -> None:
    pytest.importorskip("cryptography")
    url = f"sqlite:///{tmp_path / 'e.db'}"
    with create_store(url, encryption=False) as plain:
        for i in range(3):
            plain.put(("u", "alice"), f"k{i}", {"text": f"item {i}"})
    saver = SqliteSaver(tmp_path / "c.db", encryption=False)
    for thread in ("t1", "t2"):
        saver.put(
            {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}, empty_checkpoint(), {}, {}
        )
    saver.close()
    setting = Encryption(master_keys=[generate_master_key()], allow_plaintext=True)
    items, report_items = recorder()
    threads, report_threads = recorder()
    with create_store(url, encryption=setting) as store:
        migrating = SqliteSaver(tmp_path / "c.db", encryption=setting)
        if api == "sync":
            store.encrypt_plaintext(on_progress=report_items)
            migrating.encrypt_plaintext(on_progress=report_threads)
        else:
            asyncio.run(store.aencrypt_plaintext(on_progress=report_items))
            asyncio.run(migrating.aencrypt_plaintext(on_progress=report_threads))
        migrating.close()
    assert items == [(1, None), (2, None), (3, None)]
    assert threads == [(1, None), (2, None)]


@pytest.mark.parametrize("api", ["sync", "async"])
def test_rotate_reports_keys_against_their_count(tmp_path: Path, api: str) -> None:
    pytest.importorskip("cryptography")
    old, new = generate_master_key(), generate_master_key()
    url = f"sqlite:///{tmp_path / 'k.db'}"
    with create_store(url, encryption=Encryption(master_keys=[old])) as store:
        for user in ("alice", "bob"):  # a data key per shard key
            store.put(("u", user), "k", {"text": "x"})
    seen, report = recorder()
    with create_store(url, encryption=Encryption(master_keys=[new, old])) as store:
        assert store.keyring is not None
        if api == "sync":
            rewrapped = store.keyring.rotate(on_progress=report)
        else:
            rewrapped = asyncio.run(store.keyring.arotate(on_progress=report))
    assert rewrapped == 2
    assert seen == [(0, 2), (2, 2)]


def test_migrate_reports_its_parts(tmp_path: Path) -> None:
    from langgraph_checkpoint_agent_memory.db.sqlite import SQLiteDatabase

    db = SQLiteDatabase(tmp_path / "m.db")
    seen, report = recorder()
    try:
        migrate(db, COMPONENTS, on_progress=report)
    finally:
        db.close()
    parts = 1 + sum(c.after is not None for c in COMPONENTS)
    assert seen == [(n, parts) for n in range(parts + 1)]


@pytest.mark.parametrize("api", ["sync", "async"])
def test_erase_reports_its_three_parts(tmp_path: Path, api: str) -> None:
    with create_store(f"sqlite:///{tmp_path / 'a.db'}") as store:
        memory = AgentMemory(store)
        memory.record({"user_id": "al"}, [{"role": "user", "content": "hi"}])
        seen, report = recorder()
        if api == "sync":
            counts = memory.erase("user=al", on_progress=report)
        else:
            counts = asyncio.run(memory.aerase("user=al", on_progress=report))
        assert memory.scopes() == {}
    assert counts["scopes"] == 1
    assert seen == [(0, 3), (1, 3), (2, 3), (3, 3)]
