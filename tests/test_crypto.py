"""The encryption core: sealed values, master keys, the keyring and its key store, and the
``encryption=`` setting, on SQLite and PostgreSQL key stores."""

from __future__ import annotations

import asyncio
import base64
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from langgraph_checkpoint_agent_memory import (
    ConfigurationError,
    DecryptionError,
    Encryption,
    KeyMissingError,
    MasterKeyProvider,
    agent_config,
    generate_master_key,
)
from langgraph_checkpoint_agent_memory.crypto import cipher, config
from langgraph_checkpoint_agent_memory.crypto.cipher import DataKey, aad, new_key, new_key_id
from langgraph_checkpoint_agent_memory.crypto.keyring import Keyring, KeyStore, open_database
from langgraph_checkpoint_agent_memory.factory import resolve_encryption

KEY = DataKey(new_key_id(), "store:docs", new_key())


@settings(max_examples=60, deadline=None)
@given(plaintext=st.binary(max_size=3000), row=st.text(max_size=40))
def test_a_sealed_value_opens_with_its_row_identity_only(plaintext: bytes, row: str) -> None:
    sealed = KEY.seal(plaintext, aad("item", row))
    assert cipher.is_sealed(sealed) and cipher.key_id_of(sealed) == KEY.key_id
    assert KEY.open(sealed, aad("item", row)) == plaintext
    with pytest.raises(DecryptionError):
        KEY.open(sealed, aad("item", row + "x"))
    text = KEY.seal_text(plaintext, aad("meta", row))
    assert cipher.is_sealed_text(text) and KEY.open_text(text, aad("meta", row)) == plaintext


def test_sealing_is_randomized_compresses_what_shrinks_and_detects_tampering() -> None:
    words = b"the user lives in Lyon and likes green tea; " * 40
    a, b = KEY.seal(words, b"r"), KEY.seal(words, b"r")
    assert a != b  # a fresh nonce each time
    assert len(a) < len(words) // 4  # compressed before sealing
    random_bytes = os.urandom(640)  # incompressible
    assert len(KEY.seal(random_bytes, b"r")) == len(random_bytes) + cipher.OVERHEAD
    tampered = bytearray(a)
    tampered[-1] ^= 1
    with pytest.raises(DecryptionError):
        KEY.open(bytes(tampered), b"r")
    other = DataKey(KEY.key_id, "store:docs", new_key())  # same id, another secret
    with pytest.raises(DecryptionError):
        other.open(a, b"r")


def test_plaintext_serializations_are_never_taken_for_sealed_values() -> None:
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    serde = JsonPlusSerializer()
    for value in ["abcde", "abcdef", {"a": 1}, [1, 2, 3], -27, "x" * 100, ["\xa5" * 50]]:
        assert not cipher.is_sealed(serde.dumps_typed(value)[1])
    # raw bytes are stored as given, so they can look sealed: a row's type must tell
    assert serde.dumps_typed(b"\xa5" * 50) == ("bytes", b"\xa5" * 50)
    assert not cipher.is_sealed(b'{"a": 1}') and not cipher.is_sealed_text('{"a": 1}')


def test_term_hashes_are_stable_per_key_and_differ_between_keys() -> None:
    other = DataKey(new_key_id(), "store:other", new_key())
    assert KEY.term("lyon") == KEY.term("lyon")
    assert KEY.term("lyon") != other.term("lyon")
    assert len(KEY.term("lyon")) == 12 and "lyon" not in KEY.term("lyon")


def test_master_keys_are_checked_and_wrap_bound_to_their_owner() -> None:
    with pytest.raises(ConfigurationError, match="32 random bytes"):
        MasterKeyProvider(["c2hvcnQ="])
    with pytest.raises(ConfigurationError, match="list"):
        MasterKeyProvider(generate_master_key())
    provider = MasterKeyProvider([generate_master_key()])
    wrapped = provider.wrap(bytes(range(32)), "thread:a")
    assert provider.unwrap(wrapped, "thread:a") == bytes(range(32))
    with pytest.raises(DecryptionError, match="another owner"):
        provider.unwrap(wrapped, "thread:b")
    with pytest.raises(DecryptionError, match="not among the master keys"):
        MasterKeyProvider([generate_master_key()]).unwrap(wrapped, "thread:a")


@pytest.fixture
def keystore_url(backend: str, database_url: str) -> str:
    return database_url


def keyring(url: str, *keys: str, **options: Any) -> Keyring:
    return Keyring(
        KeyStore(open_database(url), owned=True), MasterKeyProvider(list(keys)), **options
    )


def test_keys_are_made_once_per_owner_found_by_id_and_destroyed(keystore_url: str) -> None:
    master = generate_master_key()
    first, second = keyring(keystore_url, master), keyring(keystore_url, master)
    try:
        alice = first.key("store:memory.user=alice")
        assert second.key("store:memory.user=alice").key_id == alice.key_id
        assert second.find("store:memory.user=bob") is None
        sealed = alice.seal(b"lives in Lyon", b"row")
        assert second.by_id(alice.key_id).open(sealed, b"row") == b"lives in Lyon"
        assert first.destroy(["store:memory.user=alice", "thread:none"]) == [alice.key_id]
        third = keyring(keystore_url, master)
        with pytest.raises(KeyMissingError) as missing:
            third.by_id(alice.key_id)
        assert missing.value.key_id == alice.key_id and alice.key_id in str(missing.value)
        # a new key for the owner is a new id: old rows never open with it
        assert third.key("store:memory.user=alice").key_id != alice.key_id
        third.close()
    finally:
        first.close()
        second.close()


def test_concurrent_first_use_of_an_owner_keeps_one_key(keystore_url: str) -> None:
    master = generate_master_key()
    rings = [keyring(keystore_url, master) for _ in range(4)]
    rings[0].find("warm-up")  # the table exists before the race
    ids: list[str] = []
    barrier = threading.Barrier(len(rings))

    def take(ring: Keyring) -> None:
        barrier.wait()
        ids.append(ring.key("thread:raced").key_id)

    threads = [threading.Thread(target=take, args=(r,)) for r in rings]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(ids)) == 1 and len(ids) == 4
    for ring in rings:
        ring.close()


def test_rotation_rewraps_every_key_and_reads_work_before_during_and_after(
    keystore_url: str,
) -> None:
    old, new = generate_master_key(), generate_master_key()
    before = keyring(keystore_url, old)
    sealed = {o: before.key(o).seal(o.encode(), b"r") for o in ("thread:a", "thread:b", "store:c")}
    ids = {o: before.key(o).key_id for o in sealed}
    during = keyring(keystore_url, new, old)
    assert during.rotate() == 3
    assert during.rotate() == 0  # nothing left under the old key
    assert keyring(keystore_url, old, new).by_id(ids["thread:a"])  # either order unwraps
    after = keyring(keystore_url, new)
    for owner, value in sealed.items():
        assert after.by_id(ids[owner]).open(value, b"r") == owner.encode()
    with pytest.raises(DecryptionError, match="not among the master keys"):
        keyring(keystore_url, old).by_id(ids["store:c"])
    for ring in (before, during, after):
        ring.close()


def test_the_async_api_is_the_same_keyring(keystore_url: str) -> None:
    ring = keyring(keystore_url, generate_master_key())

    async def main() -> None:
        key = await ring.akey("thread:x")
        assert (await ring.aby_id(key.key_id)).owner == "thread:x"
        assert await ring.afind("thread:y") is None
        assert await ring.adestroy(["thread:x"]) == [key.key_id]
        assert await ring.arotate() == 0

    asyncio.run(main())
    ring.close()


def test_a_cached_key_is_looked_up_again_after_recheck_seconds(tmp_path: Path) -> None:
    now = [0.0]
    url = f"sqlite:///{tmp_path / 'keys.db'}"
    master = generate_master_key()
    mine = Keyring(
        KeyStore(open_database(url), owned=True),
        MasterKeyProvider([master]),
        recheck_seconds=60,
        clock=lambda: now[0],
    )
    other = keyring(url, master)
    first = mine.key("store:alice")
    other.destroy(["store:alice"])  # an erase in another process
    now[0] = 59.0
    assert mine.key("store:alice").key_id == first.key_id  # still cached
    now[0] = 61.0
    assert mine.key("store:alice").key_id != first.key_id  # asked again: a new key
    mine.close()
    other.close()


def test_the_setting_resolves_from_argument_config_and_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    master = generate_master_key()
    assert resolve_encryption() is None  # nothing set: off
    with pytest.raises(ConfigurationError, match="AGENT_MEMORY_MASTER_KEY"):
        resolve_encryption(True)
    monkeypatch.setenv("AGENT_MEMORY_MASTER_KEY", f"{master}, {generate_master_key()}")
    monkeypatch.setenv("AGENT_MEMORY_KEYSTORE_URL", f"sqlite:///{tmp_path / 'keys.db'}")
    found = resolve_encryption()
    assert found is not None and found.master_keys[0] == master and len(found.master_keys) == 2
    assert found.keystore_url == f"sqlite:///{tmp_path / 'keys.db'}"
    assert resolve_encryption(False) is None

    @agent_config("config.encryption.enabled", "Encryption", "Encrypt memory at rest")
    def _declared() -> bool:
        return False

    assert resolve_encryption() is None  # the operator turned it off
    with pytest.raises(ConfigurationError, match="master_keys or a provider"):
        Encryption()
    given = Encryption(master_keys=[master])
    assert resolve_encryption(given) is given
    assert config.resolve(master) == Encryption(
        master_keys=(master,), keystore_url=f"sqlite:///{tmp_path / 'keys.db'}"
    )
    with pytest.raises(ConfigurationError, match="must be None, True"):
        config.resolve(42)  # type: ignore[arg-type]


def test_the_agent_servers_key_is_honoured_when_the_packages_own_is_not_set() -> None:
    assert config.from_langgraph_aes_key({}) is None
    derived = config.from_langgraph_aes_key({"LANGGRAPH_AES_KEY": "k" * 32})
    assert derived is not None and len(base64.b64decode(derived.master_keys[0])) == 32
    again = config.from_langgraph_aes_key({"LANGGRAPH_AES_KEY": "k" * 32})
    assert again is not None and again.master_keys == derived.master_keys  # stable
    own = generate_master_key()
    chosen = config.from_langgraph_aes_key(
        {"LANGGRAPH_AES_KEY": "k" * 16, "AGENT_MEMORY_MASTER_KEY": own}
    )
    assert chosen is not None and chosen.master_keys == (own,)
    with pytest.raises(ConfigurationError, match="16, 24 or 32"):
        config.from_langgraph_aes_key({"LANGGRAPH_AES_KEY": "short"})
