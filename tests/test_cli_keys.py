"""``agent-memory new-key``, ``encrypt`` and ``rotate-key``, and the Agent Server factories'
encryption from ``LANGGRAPH_AES_KEY``, on a SQLite file (the commands share one code path
with every backend: the saver's and the store's own methods)."""

from __future__ import annotations

import asyncio
import base64
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from langgraph_checkpoint_agent_memory import (
    DecryptionError,
    PlaintextRowError,
    SqliteSaver,
    create_store,
    generate_master_key,
)
from langgraph_checkpoint_agent_memory.cli import main
from langgraph_checkpoint_agent_memory.crypto import config
from tests.helpers import config_for, make_checkpoint

SECRET = "zanzibarsecret"


def write_some(url: str, path: Path, **options: Any) -> None:
    """A checkpoint and a store item holding :data:`SECRET`."""
    saver = SqliteSaver(path, **options)
    saver.put(
        config_for("t1"), make_checkpoint({"note": f"{SECRET} " * 40}), {"step": 1}, {"note": "1"}
    )
    saver.close()
    store = create_store(url, **options)
    store.put(("users", "alice"), "n1", {"text": f"she said {SECRET}"})
    store.close()


def read_back(url: str, path: Path, **options: Any) -> tuple[Any, Any]:
    saver = SqliteSaver(path, **options)
    store = create_store(url, **options)
    try:
        saved = saver.get_tuple(config_for("t1"))
        item = store.get(("users", "alice"), "n1")
    finally:
        saver.close()
        store.close()
    return saved, item


def raw(path: Path) -> bytes:
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.execute("VACUUM")
    conn.close()
    return path.read_bytes()


def test_new_key_prints_a_master_key(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["new-key"]) == 0
    key = capsys.readouterr().out.strip()
    assert len(base64.b64decode(key)) == 32
    assert main(["new-key", "--json"]) == 0
    again = json.loads(capsys.readouterr().out)["master_key"]
    assert again != key and len(base64.b64decode(again)) == 32


def test_encrypt_seals_what_was_written_in_plaintext_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "app.db"
    url = f"sqlite:///{path}"
    write_some(url, path, encryption=False)
    assert SECRET.encode() in raw(path)

    assert main(["encrypt", "--url", url]) == 2  # no master key (configuration): said, nothing done
    assert "AGENT_MEMORY_MASTER_KEY" in capsys.readouterr().err

    master = generate_master_key()
    monkeypatch.setenv("AGENT_MEMORY_MASTER_KEY", master)
    with pytest.raises(PlaintextRowError):
        read_back(url, path)  # the environment turns encryption on: plaintext is refused
    assert main(["encrypt", "--url", url, "--json"]) == 0
    counts = json.loads(capsys.readouterr().out)
    assert counts["checkpoints"]["checkpoints"] == 1 and counts["store"]["items"] == 1
    assert SECRET.encode() not in raw(path)
    saved, item = read_back(url, path)
    assert saved is not None and saved.checkpoint["channel_values"]["note"].startswith(SECRET)
    assert item is not None and item.value == {"text": f"she said {SECRET}"}

    assert main(["encrypt", "--url", url, "--json"]) == 0  # idempotent
    again = json.loads(capsys.readouterr().out)
    assert again["checkpoints"]["checkpoints"] == 0 and again["store"]["items"] == 0


def test_rotate_key_rewraps_data_keys_and_the_data_stays_readable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "app.db"
    url = f"sqlite:///{path}"
    old, new = generate_master_key(), generate_master_key()
    monkeypatch.setenv("AGENT_MEMORY_MASTER_KEY", old)
    write_some(url, path)
    before = raw(path)

    monkeypatch.setenv("AGENT_MEMORY_MASTER_KEY", f"{new},{old}")
    assert read_back(url, path)[1] is not None  # both keys given: reads work meanwhile
    assert main(["rotate-key", "--url", url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rewrapped"] == 2  # the thread's, alice's
    assert main(["rotate-key", "--url", url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rewrapped"] == 0

    monkeypatch.setenv("AGENT_MEMORY_MASTER_KEY", new)
    saved, item = read_back(url, path)
    assert saved is not None and item is not None and item.value["text"].endswith(SECRET)
    monkeypatch.setenv("AGENT_MEMORY_MASTER_KEY", old)
    with pytest.raises(DecryptionError, match="not among the master keys"):
        read_back(url, path)
    # only the wrapped keys changed: the sealed data is as it was
    after = raw(path)
    assert abs(len(after) - len(before)) <= 4096


def test_the_agent_server_factories_encrypt_with_langgraph_aes_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from langgraph_checkpoint_agent_memory.server import checkpointer, store

    path = tmp_path / "server.db"
    monkeypatch.setenv("AGENT_MEMORY_URL", f"sqlite:///{path}")
    monkeypatch.setenv("LANGGRAPH_AES_KEY", "k" * 32)

    async def main_() -> None:
        async with checkpointer() as saver:
            assert saver.keyring is not None
            await saver.aput(
                config_for("t1"), make_checkpoint({"note": f"{SECRET} " * 40}), {}, {"note": "1"}
            )
        async with store() as items:
            assert items.keyring is not None
            await items.aput(("users", "alice"), "n1", {"text": SECRET})

    asyncio.run(main_())
    assert SECRET.encode() not in raw(path)
    derived = config.from_langgraph_aes_key({"LANGGRAPH_AES_KEY": "k" * 32})
    saved, item = read_back(f"sqlite:///{path}", path, encryption=derived)
    assert saved is not None and item is not None and item.value == {"text": SECRET}
    with pytest.raises(DecryptionError):  # another Agent Server key does not read it
        other = config.from_langgraph_aes_key({"LANGGRAPH_AES_KEY": "j" * 32})
        read_back(f"sqlite:///{path}", path, encryption=other)


@pytest.mark.parametrize(
    "command",
    [
        ["migrate"],
        ["scopes"],
        ["threads"],
        ["stats"],
        ["jobs"],
        ["sweep", "--dry-run"],
        ["facts", "user=alice"],
    ],
    ids=lambda c: c[0],
)
def test_every_command_refuses_a_wrong_or_missing_master_key(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: list[str],
) -> None:
    path = tmp_path / "app.db"
    url = f"sqlite:///{path}"
    monkeypatch.setenv("AGENT_MEMORY_MASTER_KEY", generate_master_key())
    write_some(url, path)
    assert main(["migrate", "--url", url]) == 0
    capsys.readouterr()

    # a valid key, but not the one the data keys were wrapped with: refused as setup() does
    monkeypatch.setenv("AGENT_MEMORY_MASTER_KEY", generate_master_key())
    assert main([*command, "--url", url]) == 2
    out, err = capsys.readouterr()
    assert not out
    assert err.startswith(f"agent-memory {command[0]}: error: the master key given cannot unwrap")
    assert len(err.splitlines()) == 1

    # no key at all: a configuration mistake too (status 2), said in one line
    monkeypatch.delenv("AGENT_MEMORY_MASTER_KEY")
    assert main([*command, "--url", url]) == 2
    err = capsys.readouterr().err
    assert "without its master key" in err and len(err.splitlines()) == 1
