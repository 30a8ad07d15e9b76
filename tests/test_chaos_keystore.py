"""Chaos on the encrypted path's erase and key rotation: the key store down during an
erase and during ``rotate-key``, and a process killed with SIGKILL between an erase's
deletes and the destruction of its data keys (and midway through a rotation).

An erase is all or nothing: the transaction that deletes the rows records the data keys it
owes in the erase ledger, in the data's database, and the keys are destroyed once the key
store can be reached (a retry, a later erase, the worker, ``agent-memory erase``), so a
backup taken before the erase can no longer be read for the erased scope; meanwhile
``agent-memory stats`` shows the debt. A rotation stopped midway loses nothing and finishes
when run again. On SQLite, each PostgreSQL server and Citus, sync and async.

Each kill is deterministic: the killed process sends itself SIGKILL from a hook at the
point under test (the store's key destruction, the provider's n-th wrap), never after a
delay.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from langgraph_checkpoint_agent_memory import (
    AgentMemory,
    DatabaseUnavailableError,
    Encryption,
    KeyMissingError,
    create_checkpointer,
    create_store,
    generate_master_key,
)
from tests.helpers import config_for, make_checkpoint, row_counts
from tests.pg import backend_params, backend_url, is_postgres
from tests.test_cli_memory import run
from tests.test_encryption_memory import copy_database
from tests.test_encryption_store import secret_words

ROOT = Path(__file__).resolve().parent.parent
ALICE, BOB = "user=alice", "user=bob"


def closed_port() -> int:
    """A local TCP port nothing listens on (bound, then released): connecting is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Keys:
    """One master key and two key stores: ``up``, a SQLite file of its own, and ``down``,
    a PostgreSQL key store on a port nothing listens on."""

    def __init__(self, tmp_path: Path) -> None:
        self.master = generate_master_key()
        self.url = f"sqlite:///{tmp_path / 'keys.db'}"
        self.up = Encryption(master_keys=[self.master], keystore_url=self.url)
        down = f"postgresql://app@127.0.0.1:{closed_port()}/keys?connect_timeout=1"
        self.down = Encryption(master_keys=[self.master], keystore_url=down)

    def environ(self, monkeypatch: pytest.MonkeyPatch, *, up: bool = True) -> None:
        """The environment of an operator's command, with the key store up or down."""
        monkeypatch.setenv("AGENT_MEMORY_MASTER_KEY", self.master)
        setting = self.up if up else self.down
        assert setting.keystore_url is not None
        monkeypatch.setenv("AGENT_MEMORY_KEYSTORE_URL", setting.keystore_url)


@pytest.fixture
def keys(tmp_path: Path) -> Keys:
    return Keys(tmp_path)


@pytest.fixture
def memories() -> Iterator[Callable[[str, Encryption], AgentMemory[Any]]]:
    opened: list[AgentMemory[Any]] = []

    def open_memory(url: str, encryption: Encryption) -> AgentMemory[Any]:
        memory = AgentMemory(create_store(url, encryption=encryption))
        opened.append(memory)
        return memory

    yield open_memory
    for memory in opened:
        memory.store.close()


def remember(memory: AgentMemory[Any], words: list[str]) -> None:
    """Facts of alice and of bob, each under the data key of their own shard key."""
    memory.record(ALICE, [{"role": "user", "content": f"I live in {words[0]}"}])
    memory.record(BOB, [{"role": "user", "content": f"I live in {words[1]}"}])
    assert memory.consolidate().completed == 2
    assert [f.value for f in memory.facts(ALICE)] == [words[0]]


def remembered(memory: AgentMemory[Any]) -> list[str]:
    """:func:`remember` with secret words, then the store closed; the words."""
    words = secret_words()
    remember(memory, words)
    memory.store.close()
    return words


def forgotten_in(backup: AgentMemory[Any], words: list[str]) -> None:
    """A backup taken before alice's erase no longer reads her, and reads bob as before."""
    with pytest.raises(KeyMissingError):
        backup.facts(ALICE)
    assert [f.value for f in backup.facts(BOB)] == [words[1]]


def owed(url: str) -> int:
    """The data keys the erase ledger of the database at ``url`` owes (read with the
    driver: the package refuses an encrypted database opened without its key)."""
    return row_counts(url)["am_memory_erasures"]


def backup_of(request: pytest.FixtureRequest, backend: str, url: str) -> str:
    """A copy of the data's database as it is now (its connections closed first)."""
    pg = request.getfixturevalue("pg_servers") if is_postgres(backend) else None
    copy = copy_database(backend, url, pg)
    if pg is not None:
        request.addfinalizer(lambda: pg.get(backend).drop(copy))
    return copy


def erase_fails(memory: AgentMemory[Any], api: str) -> None:
    """An erase of alice with the key store down: the rows go, the key is owed."""
    with pytest.raises(DatabaseUnavailableError, match="the erase ledger keeps it owed"):
        if api == "sync":
            memory.erase(ALICE)
        else:
            asyncio.run(memory.aerase(ALICE))
    assert memory.facts(ALICE) == [] and ALICE not in memory.known_scopes()


# -- the key store down during an erase ----------------------------------------------------

#: Who settles the debt once the key store is back, and the API of the erase that failed.
SETTLERS = ["retry", "async retry", "later erase", "worker", "async worker", "command"]


def crossed(backends: list[Any], settlers: list[str]) -> list[Any]:
    """Each backend parameter (its marks kept) with each settler."""
    out = []
    for b in backends:
        value, marks = (b, ()) if isinstance(b, str) else (b.values[0], b.marks)
        out += [pytest.param(value, s, marks=marks, id=f"{value}-{s}") for s in settlers]
    return out


@pytest.mark.parametrize(
    ("data", "settler"),
    [
        *crossed(backend_params("sqlite", "postgres"), SETTLERS),
        *crossed(backend_params("citus"), ["retry", "async worker"]),
    ],
)
def test_an_erase_with_the_key_store_down_owes_the_key_until_it_is_back(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    keys: Keys,
    memories: Callable[[str, Encryption], AgentMemory[Any]],
    data: str,
    settler: str,
) -> None:
    url = backend_url(request, data, tmp_path / "data.db")
    assert url is not None
    words = remembered(memories(url, keys.up))
    citus = data.endswith("citus")  # a template copy holds no worker's shards
    backup = None if citus else backup_of(request, data, url)

    api = "async" if settler.startswith("async") else "sync"
    down = memories(url, keys.down)
    erase_fails(down, api)
    erase_fails(down, api)  # a retry while it is still down: still owed, once
    assert owed(url) == 1
    keys.environ(monkeypatch, up=False)
    code, stats, _ = run(capsys, "stats", "--url", url, "--json")
    assert code == 0 and stats["erasures"] == {"owed_keys": 1}
    assert stats["keys"]["beside_data"] is False
    if backup is not None:  # the key lives: the backup still tells alice's secret
        assert [f.value for f in memories(backup, keys.up).facts(ALICE)] == [words[0]]

    up = memories(url, keys.up)
    if settler == "retry":
        assert up.erase(ALICE) == {"scopes": 0, "threads": 0, "keys": 1}
    elif settler == "async retry":
        assert asyncio.run(up.aerase(ALICE)) == {"scopes": 0, "threads": 0, "keys": 1}
    elif settler == "later erase":
        assert up.erase("user=carol")["keys"] == 1
    elif settler == "worker":
        assert up.worker().run_once().keys_destroyed == 1
    elif settler == "async worker":
        assert asyncio.run(up.worker().arun_once()).keys_destroyed == 1
    else:
        keys.environ(monkeypatch)
        code, out, err = run(capsys, "erase", ALICE, "--yes", "--url", url)
        assert code == 0, err
        assert "settled 1 owed key(s)" in " ".join(out.split()) and "Erased" not in out
    assert owed(url) == 0
    assert up.erase(ALICE)["keys"] == 0  # settled once
    assert [f.value for f in up.facts(BOB)] == [words[1]]
    if backup is not None:
        forgotten_in(memories(backup, keys.up), words)


def test_a_shard_written_again_before_its_key_is_destroyed_keeps_it_until_erased_again(
    tmp_path: Path, keys: Keys, memories: Callable[[str, Encryption], AgentMemory[Any]]
) -> None:
    """Destroying the key of a shard key written again since its erase would make the new
    rows unreadable: it stays owed until a later erase empties the shard key."""
    url = f"sqlite:///{tmp_path / 'data.db'}"
    words = secret_words()
    remember(memories(url, keys.up), words)
    erase_fails(memories(url, keys.down), "sync")
    up = memories(url, keys.up)
    up.record(ALICE, [{"role": "user", "content": f"I live in {words[2]}"}])
    assert up.settle_erasures() == 0 and owed(url) == 1
    assert up.episodes(ALICE)  # readable: its key was kept
    assert up.erase(ALICE)["keys"] == 1
    assert owed(url) == 0


def test_a_process_with_another_key_store_settles_nothing(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    keys: Keys,
    memories: Callable[[str, Encryption], AgentMemory[Any]],
) -> None:
    """A process started without the key store's URL looks the keys up beside the data,
    where none is: it must not strike the debts it could not pay."""
    url = f"sqlite:///{tmp_path / 'data.db'}"
    words = remembered(memories(url, keys.up))
    backup = copy_database("sqlite", url, None)
    erase_fails(memories(url, keys.down), "sync")
    wrong = memories(url, Encryption(master_keys=[keys.master]))
    assert wrong.settle_erasures() == 0
    assert asyncio.run(wrong.asettle_erasures()) == 0
    assert wrong.worker().run_once().keys_destroyed == 0
    monkeypatch.setenv("AGENT_MEMORY_MASTER_KEY", keys.master)
    monkeypatch.delenv("AGENT_MEMORY_KEYSTORE_URL", raising=False)
    code, _, err = run(capsys, "erase", ALICE, "--yes", "--url", url)
    assert code == 1 and "unknown scope" in err
    assert owed(url) == 1  # still owed, to the key store that holds it

    assert memories(url, keys.up).settle_erasures() == 1
    assert owed(url) == 0
    forgotten_in(memories(backup, keys.up), words)


def test_a_write_between_reading_the_debt_and_destroying_the_key_keeps_the_key(
    tmp_path: Path, keys: Keys, memories: Callable[[str, Encryption], AgentMemory[Any]]
) -> None:
    """The steps of a settle run one by one, with alice writing again after the debt was
    read: her new rows keep their key, which stays owed."""
    from langgraph_checkpoint_agent_memory.memory.context import Call, RunPlan
    from langgraph_checkpoint_agent_memory.memory.erasing import _settling

    url = f"sqlite:///{tmp_path / 'data.db'}"
    words = secret_words()
    remember(memories(url, keys.up), words)
    erase_fails(memories(url, keys.down), "sync")
    up = memories(url, keys.up)
    steps = _settling(up.context)
    step = next(steps)
    assert isinstance(step, RunPlan)
    step = steps.send(up.context.run(step.plan))  # the debt is read
    assert isinstance(step, Call)  # the key store is asked
    up.record(ALICE, [{"role": "user", "content": f"I live in {words[2]}"}])
    with pytest.raises(StopIteration) as done:
        while True:
            if isinstance(step, RunPlan):
                step = steps.send(up.context.run(step.plan))
            else:
                assert isinstance(step, Call)
                step = steps.send(step.sync())
    assert done.value.value == 0  # nothing left to destroy
    assert owed(url) == 1 and up.episodes(ALICE)  # readable: its key was kept


@pytest.mark.parametrize("api", ["sync", "async"])
@pytest.mark.parametrize("data", backend_params("sqlite", "postgres"))
def test_an_erase_with_a_checkpointer_owes_the_threads_keys_with_the_scopes(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    keys: Keys,
    data: str,
    api: str,
) -> None:
    """The threads' checkpoints are erased, and their keys owed in the same ledger
    transaction as the memory's rows: the key store down, nothing is half done, and the
    next erase destroys both keys."""
    url = backend_url(request, data, tmp_path / "data.db")
    assert url is not None
    words = secret_words()
    opened: list[AgentMemory[Any]] = []

    def open_memory(at: str, setting: Encryption) -> AgentMemory[Any]:
        store = create_store(at, encryption=setting)
        saver = create_checkpointer(url=at, encryption=setting)
        opened.append(AgentMemory(store, checkpointer=saver))
        return opened[-1]

    def close(memory: AgentMemory[Any]) -> None:
        memory.checkpointer.close()
        memory.store.close()

    try:
        memory = open_memory(url, keys.up)
        for scope, thread, said in ((ALICE, "alice-1", words[0]), (BOB, "bob-1", words[1])):
            memory.checkpointer.put(config_for(thread), make_checkpoint({"s": said}), {}, {})
            memory.record(
                scope, [{"role": "user", "content": f"I live in {said}"}], thread_id=thread
            )
        assert memory.consolidate().completed == 2
        close(memory)
        backup = backup_of(request, data, url)

        down = open_memory(url, keys.down)
        erase_fails(down, api)
        assert down.checkpointer.get_tuple(config_for("alice-1")) is None
        assert owed(url) == 2  # alice's shard key and her thread

        up = open_memory(url, keys.up)
        counts = up.erase(ALICE) if api == "sync" else asyncio.run(up.aerase(ALICE))
        assert counts == {"scopes": 0, "threads": 0, "keys": 2}
        assert owed(url) == 0
        old = open_memory(backup, keys.up)
        with pytest.raises(KeyMissingError):
            old.checkpointer.get_tuple(config_for("alice-1"))
        forgotten_in(old, words)
        bob = old.checkpointer.get_tuple(config_for("bob-1"))
        assert bob is not None and bob.checkpoint["channel_values"]["s"] == words[1]
    finally:
        for memory in opened:
            close(memory)


# -- a process killed between the deletes and the keys' destruction ------------------------

#: Erases alice, and sends itself SIGKILL when the store is about to destroy her data key
#: (the deletes have committed by then).
KILLED_ERASER = """
import asyncio, os, signal, sys
from langgraph_checkpoint_agent_memory import AgentMemory, Encryption, create_store

url, master, keystore, api = sys.argv[1:]
store = create_store(url, encryption=Encryption(master_keys=[master], keystore_url=keystore))

def killed(shards):
    os.kill(os.getpid(), signal.SIGKILL)

async def akilled(shards):
    killed(shards)

store.destroy_keys, store.adestroy_keys = killed, akilled
memory = AgentMemory(store)
if api == "sync":
    memory.erase("user=alice")
else:
    asyncio.run(memory.aerase("user=alice"))
print("not killed", flush=True)
"""


@pytest.mark.parametrize("api", ["sync", "async"])
@pytest.mark.parametrize("data", backend_params("sqlite", "postgres"))
def test_an_erase_killed_before_destroying_the_key_is_finished_by_the_next(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    keys: Keys,
    memories: Callable[[str, Encryption], AgentMemory[Any]],
    data: str,
    api: str,
) -> None:
    url = backend_url(request, data, tmp_path / "data.db")
    assert url is not None
    words = remembered(memories(url, keys.up))
    backup = backup_of(request, data, url)

    killed = subprocess.run(
        [sys.executable, "-c", KILLED_ERASER, url, keys.master, keys.url, api],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=300,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert "not killed" not in killed.stdout
    assert owed(url) == 1
    assert [f.value for f in memories(backup, keys.up).facts(ALICE)] == [words[0]]

    up = memories(url, keys.up)
    assert up.facts(ALICE) == []
    counts = up.erase(ALICE) if api == "sync" else asyncio.run(up.aerase(ALICE))
    assert counts == {"scopes": 0, "threads": 0, "keys": 1}
    assert owed(url) == 0
    forgotten_in(memories(backup, keys.up), words)


# -- keys beside the data: said by a warning and by stats ----------------------------------


def test_the_first_erase_warns_when_the_keys_live_beside_the_data(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    keys: Keys,
    memories: Callable[[str, Encryption], AgentMemory[Any]],
) -> None:
    from langgraph_checkpoint_agent_memory import KeysBesideDataWarning
    from langgraph_checkpoint_agent_memory.memory import erasing

    monkeypatch.setattr(erasing, "_warned", False)  # a fresh process
    apart = f"sqlite:///{tmp_path / 'apart.db'}"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        memories(apart, keys.up).erase(ALICE)  # a key store of its own: no warning
        AgentMemory(create_store(encryption=keys.master)).erase(ALICE)  # in memory: no backup

    beside = f"sqlite:///{tmp_path / 'beside.db'}"
    memory = memories(beside, Encryption(master_keys=[keys.master]))
    remember(memory, secret_words())
    with pytest.warns(KeysBesideDataWarning, match="a backup taken before the erase"):
        memory.erase(ALICE)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        memory.erase(BOB)  # once a process
        asyncio.run(memory.aerase(BOB))

    monkeypatch.setenv("AGENT_MEMORY_MASTER_KEY", keys.master)
    monkeypatch.delenv("AGENT_MEMORY_KEYSTORE_URL", raising=False)
    code, stats, _ = run(capsys, "stats", "--url", beside, "--json")
    assert code == 0 and stats["keys"] == {
        "keystore": "data database",
        "in_data_database": 0,  # alice's and bob's were destroyed
        "beside_data": False,
    }
    memory.record("user=carol", [{"role": "user", "content": "I live in Oslo"}])
    code, stats, _ = run(capsys, "stats", "--url", beside, "--json")
    assert stats["keys"]["in_data_database"] == 1 and stats["keys"]["beside_data"] is True
    assert stats["erasures"] == {"owed_keys": 0}
    code, text, _ = run(capsys, "stats", "--url", beside)
    assert "its backups hold them" in " ".join(text.split())


@pytest.mark.parametrize("api", ["sync", "async", "asyncio.run"])
def test_the_warning_points_at_the_line_that_erased(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    keys: Keys,
    memories: Callable[[str, Encryption], AgentMemory[Any]],
    api: str,
) -> None:
    from langgraph_checkpoint_agent_memory import KeysBesideDataWarning
    from langgraph_checkpoint_agent_memory.memory import erasing

    monkeypatch.setattr(erasing, "_warned", False)
    memory = memories(f"sqlite:///{tmp_path / 'beside.db'}", Encryption(master_keys=[keys.master]))
    remember(memory, secret_words())

    async def in_a_coroutine() -> None:
        await memory.aerase(ALICE)

    with pytest.warns(KeysBesideDataWarning) as caught:
        if api == "sync":
            memory.erase(ALICE)
        elif api == "async":
            asyncio.run(in_a_coroutine())
        else:
            asyncio.run(memory.aerase(ALICE))
    [warning] = caught.list
    assert warning.filename == __file__
    lines = Path(__file__).read_text().splitlines()
    assert "erase(ALICE)" in lines[warning.lineno - 1]


def test_move_keys_takes_the_keys_out_of_the_data_so_an_erase_reaches_later_backups(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    keys: Keys,
    memories: Callable[[str, Encryption], AgentMemory[Any]],
) -> None:
    url = f"sqlite:///{tmp_path / 'data.db'}"
    words = remembered(memories(url, Encryption(master_keys=[keys.master])))
    monkeypatch.setenv("AGENT_MEMORY_MASTER_KEY", keys.master)
    _, stats, _ = run(capsys, "stats", "--url", url, "--json")
    assert stats["keys"]["in_data_database"] == 2 and stats["keys"]["beside_data"] is True

    code, out, err = run(capsys, "move-keys", "--to", keys.url, "--url", url, "--json")
    assert code == 0, err
    assert out["moved"] == 2
    assert run(capsys, "move-keys", "--to", keys.url, "--url", url, "--json")[1]["moved"] == 0
    _, stats, _ = run(capsys, "stats", "--url", url, "--json")
    assert stats["keys"]["in_data_database"] == 0 and stats["keys"]["beside_data"] is False

    memory = memories(url, keys.up)  # every process now names the key store
    assert [f.value for f in memory.facts(ALICE)] == [words[0]]
    memory.store.close()
    backup = copy_database("sqlite", url, None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the keys are apart now: no warning
        assert memories(url, keys.up).erase(ALICE)["keys"] == 1
    forgotten_in(memories(backup, keys.up), words)


def another_spelling(url: str, spelling: str, tmp_path: Path, monkeypatch: Any) -> str:
    """Another way to write the database of ``url``."""
    path = url.removeprefix("sqlite:///")
    if spelling == "bare path":
        return path
    if spelling == "relative path":
        monkeypatch.chdir(tmp_path)
        return "./" + Path(path).name
    if spelling == "symbolic link":
        link = tmp_path / "link.db"
        link.symlink_to(path)
        return f"sqlite:///{link}"
    host = "localhost" if "127.0.0.1" in url else "127.0.0.1"
    other = url.replace("127.0.0.1", host).replace("@localhost", f"@{host}")
    sep = "&" if "?" in other else "?"
    return f"{other}{sep}application_name=another-spelling"


@pytest.mark.parametrize(
    ("data", "spelling"),
    [
        *[("sqlite", s) for s in ("bare path", "relative path", "symbolic link")],
        *crossed(backend_params("postgres"), ["another host"]),
    ],
)
def test_move_keys_refuses_the_data_database_however_it_is_spelled(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    keys: Keys,
    memories: Callable[[str, Encryption], AgentMemory[Any]],
    data: str,
    spelling: str,
) -> None:
    """Moving the keys to the database they are in would find each "already stored" there,
    then delete it: every value sealed with it lost."""
    url = backend_url(request, data, tmp_path / "data.db")
    assert url is not None
    words = remembered(memories(url, Encryption(master_keys=[keys.master])))
    monkeypatch.setenv("AGENT_MEMORY_MASTER_KEY", keys.master)
    to = another_spelling(url, spelling, tmp_path, monkeypatch)
    code, _, err = run(capsys, "move-keys", "--to", to, "--url", url)
    assert code == 2 and "--to names the data's own database" in err, err
    _, stats, _ = run(capsys, "stats", "--url", url, "--json")
    assert stats["keys"]["in_data_database"] == 2  # no probe left behind
    memory = memories(url, Encryption(master_keys=[keys.master]))
    assert [f.value for f in memory.facts(ALICE)] == [words[0]]
    assert [f.value for f in memory.facts(BOB)] == [words[1]]


def test_move_keys_leaves_a_key_the_key_store_holds_another_of(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    keys: Keys,
    memories: Callable[[str, Encryption], AgentMemory[Any]],
) -> None:
    url = f"sqlite:///{tmp_path / 'data.db'}"
    words = remembered(memories(url, Encryption(master_keys=[keys.master])))
    other = memories(f"sqlite:///{tmp_path / 'other.db'}", keys.up)  # a key of alice there
    other.record(ALICE, [{"role": "user", "content": "hello"}])
    other.store.close()
    monkeypatch.setenv("AGENT_MEMORY_MASTER_KEY", keys.master)
    code, _, err = run(capsys, "move-keys", "--to", keys.url, "--url", url)
    assert code == 1 and "holds another data key of store:memory.user=alice" in err
    # nothing lost: the data reads with its keys where they were
    memory = memories(url, Encryption(master_keys=[keys.master]))
    assert [f.value for f in memory.facts(ALICE)] == [words[0]]
    assert [f.value for f in memory.facts(BOB)] == [words[1]]


# -- the key store down during rotate-key, and a rotation killed midway ---------------------


def rotated_reads(url: str, keystore: str, master_keys: list[str], words: list[str]) -> None:
    """Alice's and bob's facts read with ``master_keys`` alone."""
    setting = Encryption(master_keys=master_keys, keystore_url=keystore)
    memory = AgentMemory(create_store(url, encryption=setting))
    try:
        assert [f.value for f in memory.facts(ALICE)] == [words[0]]
        assert [f.value for f in memory.facts(BOB)] == [words[1]]
    finally:
        memory.store.close()


@pytest.mark.parametrize("data", backend_params("sqlite", "postgres"))
def test_rotate_key_with_the_key_store_down_changes_nothing_and_runs_once_it_is_back(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    keys: Keys,
    memories: Callable[[str, Encryption], AgentMemory[Any]],
    data: str,
) -> None:
    url = backend_url(request, data, tmp_path / "data.db")
    assert url is not None
    words = remembered(memories(url, keys.up))
    new = generate_master_key()
    keys.environ(monkeypatch, up=False)
    monkeypatch.setenv("AGENT_MEMORY_MASTER_KEY", f"{new},{keys.master}")
    code, _, err = run(capsys, "rotate-key", "--url", url, "--json")
    assert code == 1 and err.startswith("agent-memory rotate-key: error: PostgreSQL at")
    assert "Traceback" not in err
    rotated_reads(url, keys.url, [keys.master], words)  # nothing was re-wrapped

    keys.environ(monkeypatch)
    monkeypatch.setenv("AGENT_MEMORY_MASTER_KEY", f"{new},{keys.master}")
    code, out, err = run(capsys, "rotate-key", "--url", url, "--json")
    assert code == 0 and out["rewrapped"] == 2, err
    rotated_reads(url, keys.url, [new], words)


#: Re-wraps the data keys one per transaction, and sends itself SIGKILL when it is about
#: to wrap the second (the first is re-wrapped and committed).
KILLED_ROTATOR = """
import os, signal, sys
from langgraph_checkpoint_agent_memory.crypto import keyring
from langgraph_checkpoint_agent_memory.crypto.keyring import KeyStore, open_database
from langgraph_checkpoint_agent_memory.crypto.cipher import MasterKeyProvider

url, new, old = sys.argv[1:]

class KilledAtTheSecondWrap(MasterKeyProvider):
    wraps = 0

    def wrap(self, key, owner):
        if KilledAtTheSecondWrap.wraps == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        KilledAtTheSecondWrap.wraps += 1
        return super().wrap(key, owner)

keyring.ROTATE_BATCH = 1
provider = KilledAtTheSecondWrap([new, old])
keyring.Keyring(KeyStore(open_database(url), owned=True), provider).rotate()
print("not killed", flush=True)
"""


def test_a_rotation_killed_midway_loses_nothing_and_finishes_when_run_again(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    keys: Keys,
    memories: Callable[[str, Encryption], AgentMemory[Any]],
) -> None:
    url = f"sqlite:///{tmp_path / 'data.db'}"
    words = remembered(memories(url, keys.up))
    new = generate_master_key()
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_ROTATOR, keys.url, new, keys.master],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=300,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    rotated_reads(url, keys.url, [new, keys.master], words)  # half re-wrapped: all readable

    keys.environ(monkeypatch)
    monkeypatch.setenv("AGENT_MEMORY_MASTER_KEY", f"{new},{keys.master}")
    code, out, err = run(capsys, "rotate-key", "--url", url, "--json")
    assert code == 0 and out["rewrapped"] == 1, err  # only what the killed run left
    rotated_reads(url, keys.url, [new], words)
