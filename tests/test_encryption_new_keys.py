"""A new thread's data key travels with its first write (issue 27, the cost of point 6).

Where the key store is the saver's own database, the key's insert goes in the transaction
(and round trip) of the first write sealed with it. These tests check what must hold with
that: a saver that loses the race to another's key writes again under the winner's key (one
key per thread, every write readable by a saver that has no key in memory); savers racing
on one new thread at once, sync and async; a fresh start after a delete; and the first put
sends as many batches as without encryption.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest

from langgraph_checkpoint_agent_memory import DecryptionError, SQLSaver, generate_master_key
from langgraph_checkpoint_agent_memory.crypto.cipher import key_id_of, thread_owner
from langgraph_checkpoint_agent_memory.db import keys as sqlk
from tests.helpers import config_for, make_checkpoint
from tests.test_encryption_checkpoints import count_batches, placeholder, run_sql


@pytest.fixture
def master() -> str:
    return generate_master_key()


def key_ids_of(saver: SQLSaver, thread: str) -> list[str]:
    """The ids of the keys the key table holds for ``thread``."""
    owner = placeholder(saver, "o")
    rows = run_sql(
        saver, f"SELECT key_id FROM am_keys WHERE owner = {owner}", {"o": thread_owner(thread)}
    )
    return [str(r[0]) for r in rows]


def sealed_under(saver: SQLSaver, thread: str) -> set[str]:
    """The key ids the thread's stored checkpoints and writes are sealed under."""
    t = placeholder(saver, "t")
    bodies = run_sql(
        saver, f"SELECT checkpoint FROM am_checkpoints WHERE thread_id = {t}", {"t": thread}
    )
    writes = run_sql(
        saver, f"SELECT blob FROM am_checkpoint_writes WHERE thread_id = {t}", {"t": thread}
    )
    return {key_id_of(bytes(r[0])) for r in [*bodies, *writes]}


def values_of(saver: SQLSaver, thread: str) -> list[Any]:
    """Every checkpoint's ``x`` and every pending write, read back."""
    out = []
    for t in saver.list(config_for(thread)):
        out.append(t.checkpoint["channel_values"].get("x"))
        out += [w[2] for w in t.pending_writes or []]
    return sorted(out)


def test_a_saver_losing_to_another_key_writes_again_under_it(
    make_saver: Callable[..., SQLSaver], master: str
) -> None:
    winner, loser = make_saver(encryption=master), make_saver(encryption=master)
    winner.setup()
    winner.put(config_for("t"), make_checkpoint({"x": "first"}), {}, {"x": 1})
    assert loser.keyring is not None and loser.keyring.cached(thread_owner("t")) is None
    # no parent: the loser makes a key and sends its insert with the write, which loses
    saved = loser.put(config_for("t"), make_checkpoint({"x": "second"}, step=1), {}, {"x": 1})
    loser.put_writes(saved, [("x", "written")], "task")
    [key_id] = key_ids_of(winner, "t")
    assert sealed_under(winner, "t") == {key_id}
    reader = make_saver(encryption=master)  # no key in memory: each value by its key id
    assert values_of(reader, "t") == ["first", "second", "written"]


def test_async_a_saver_losing_to_another_key_writes_again_under_it(
    make_saver: Callable[..., SQLSaver], master: str
) -> None:
    winner, loser = make_saver(encryption=master), make_saver(encryption=master)

    async def scenario() -> None:
        await winner.asetup()
        await winner.aput(config_for("t"), make_checkpoint({"x": "first"}), {}, {"x": 1})
        second = make_checkpoint({"x": "second"}, step=1)
        saved = await loser.aput(config_for("t"), second, {}, {"x": 1})
        await loser.aput_writes(saved, [("x", "written")], "task")
        for saver in (winner, loser):  # their pools' tasks end with this loop
            await saver.aclose()

    asyncio.run(scenario())
    reader = make_saver(encryption=master)
    [key_id] = key_ids_of(reader, "t")
    assert sealed_under(reader, "t") == {key_id}
    assert values_of(reader, "t") == ["first", "second", "written"]


def test_savers_starting_one_thread_at_once_share_one_key(
    make_saver: Callable[..., SQLSaver], master: str
) -> None:
    savers = [make_saver(encryption=master) for _ in range(4)]
    for saver in savers:
        saver.setup()
    threads = [f"race-{i}" for i in range(5)]
    start = threading.Barrier(len(savers))

    def first_writes(i: int) -> None:
        start.wait()
        for thread in threads:
            checkpoint = make_checkpoint({"x": f"{thread}/{i}"}, step=i)
            saved = savers[i].put(config_for(thread), checkpoint, {}, {"x": 1})
            savers[i].put_writes(saved, [("x", f"w{i}")], "task")

    workers = [threading.Thread(target=first_writes, args=(i,)) for i in range(len(savers))]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    reader = make_saver(encryption=master)
    for thread in threads:
        [key_id] = key_ids_of(reader, thread)
        assert sealed_under(reader, thread) == {key_id}
        expected = sorted([f"{thread}/{i}" for i in range(4)] + [f"w{i}" for i in range(4)])
        assert values_of(reader, thread) == expected


def test_async_savers_starting_one_thread_at_once_share_one_key(
    make_saver: Callable[..., SQLSaver], master: str
) -> None:
    savers = [make_saver(encryption=master) for _ in range(4)]
    threads = [f"race-{i}" for i in range(5)]

    async def first_writes(i: int) -> None:
        for thread in threads:
            checkpoint = make_checkpoint({"x": f"{thread}/{i}"}, step=i)
            saved = await savers[i].aput(config_for(thread), checkpoint, {}, {"x": 1})
            await savers[i].aput_writes(saved, [("x", f"w{i}")], "task")

    async def scenario() -> None:
        await savers[0].asetup()
        # the same saver twice too: tasks of one loop missing one key
        await asyncio.gather(*(first_writes(i) for i in range(len(savers))), first_writes(0))
        for saver in savers:  # their pools' tasks end with this loop
            await saver.aclose()

    asyncio.run(scenario())
    reader = make_saver(encryption=master)
    for thread in threads:
        [key_id] = key_ids_of(reader, thread)
        assert sealed_under(reader, thread) == {key_id}
        expected = [f"{thread}/{i}" for i in range(4)] + [f"w{i}" for i in range(4)]
        expected += [f"{thread}/0", "w0"]
        assert values_of(reader, thread) == sorted(expected)


def test_a_thread_started_afresh_after_a_delete_gets_a_stored_key(
    make_saver: Callable[..., SQLSaver], master: str
) -> None:
    saver = make_saver(encryption=master)
    saver.put(config_for("t"), make_checkpoint({"x": "old"}), {}, {"x": 1})
    [old] = key_ids_of(saver, "t")
    saver.delete_thread("t")  # destroys the key; a fresh start meets the thread's tombstone
    saver.put(config_for("t"), make_checkpoint({"x": "new"}, step=1), {}, {"x": 1})
    [new] = key_ids_of(saver, "t")
    assert new != old and sealed_under(saver, "t") == {new}
    assert values_of(make_saver(encryption=master), "t") == ["new"]


def test_the_first_put_sends_as_many_batches_as_without_encryption(
    make_saver: Callable[..., SQLSaver], master: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the key store holds a key: while it holds none, a keyring checks again before
    each key it makes (one read), so that a process given another master key is refused
    as soon as the first key is stored."""
    counts = []
    # without encryption first: once encrypted, the database refuses a saver without the key
    for setting in (False, master):
        saver = make_saver(encryption=setting)
        saver.setup()
        if setting:
            saver.put(config_for("first"), make_checkpoint({"x": "y"}), {}, {"x": 1})
            saver = make_saver(encryption=setting)
            saver.setup()
        counted = count_batches(saver, monkeypatch)
        saver.put(config_for("new"), make_checkpoint({"x": "y" * 300}), {}, {"x": 1})
        counts.append(counted[0])
    assert counts[0] == counts[1] > 0
    assert sqlk.carries(saver.dialect)


def test_a_master_key_checked_on_an_empty_key_store_is_checked_again(
    make_saver: Callable[..., SQLSaver], master: str
) -> None:
    """Two processes given different master keys start on an empty key store: once the
    first has stored a key, the second wraps none with its own."""
    other = generate_master_key()
    stale = make_saver(encryption=other)
    stale.setup()  # checked while the key store held no key
    first = make_saver(encryption=master)
    first.put(config_for("a"), make_checkpoint({"x": "y"}), {}, {"x": 1})
    with pytest.raises(DecryptionError, match="cannot unwrap"):
        stale.put(config_for("b"), make_checkpoint({"x": "y"}), {}, {"x": 1})
    assert stale.keyring is not None and stale.keyring.find(thread_owner("b")) is None


def test_a_key_store_of_its_own_keeps_the_key_transaction(
    make_saver: Callable[..., SQLSaver], master: str, tmp_path: Any
) -> None:
    from langgraph_checkpoint_agent_memory import Encryption

    setting = Encryption(master_keys=[master], keystore_url=f"sqlite:///{tmp_path / 'keys.db'}")
    saver = make_saver(encryption=setting)
    saver.put(config_for("t"), make_checkpoint({"x": "y"}), {}, {"x": 1})
    assert saver.keyring is not None and saver.keyring.keystore.db is not saver.db
    assert saver.keyring.find(thread_owner("t")) is not None
    assert values_of(make_saver(encryption=setting), "t") == ["y"]
