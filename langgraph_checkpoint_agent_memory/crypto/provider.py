"""Who holds the master key: the protocol a key provider follows, and the built-in one.

A data key is stored only *wrapped* (encrypted) by a provider. The built-in
:class:`MasterKeyProvider` wraps with AES-256-GCM under a master key given as configuration
(``AGENT_MEMORY_MASTER_KEY``). A KMS, SAP's credential store or an HSM plugs in as any object
with the three methods of :class:`KeyProvider`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from langgraph_checkpoint_agent_memory.crypto.cipher import NONCE_BYTES, aesgcm
from langgraph_checkpoint_agent_memory.errors import ConfigurationError, DecryptionError


@runtime_checkable
class KeyProvider(Protocol):
    """Wraps, unwraps and destroys data keys.

    ``owner`` names whose key it is (``"store:<shard key>"``, ``"thread:<id>"``); a provider
    should bind the wrapped form to it (as associated data, or as the name it files the key
    under), so a wrapped key copied to another owner's row does not unwrap.

    Example:
        ```python
        class KmsProvider:
            def wrap(self, key: bytes, owner: str) -> bytes:
                return kms.encrypt(KeyId=ARN, Plaintext=key,
                                   EncryptionContext={"owner": owner})["CiphertextBlob"]

            def unwrap(self, wrapped: bytes, owner: str) -> bytes:
                return kms.decrypt(CiphertextBlob=wrapped,
                                   EncryptionContext={"owner": owner})["Plaintext"]

            def destroy(self, wrapped: bytes, owner: str) -> None:
                pass  # deleting the wrapped key from the key store destroys it
        ```
    """

    def wrap(self, key: bytes, owner: str) -> bytes:
        """``key`` (32 bytes) in a form only this provider can turn back into it."""
        ...

    def unwrap(self, wrapped: bytes, owner: str) -> bytes:
        """The key that :meth:`wrap` turned into ``wrapped``."""
        ...

    def destroy(self, wrapped: bytes, owner: str) -> None:
        """Forget the key (called when its owner is erased, before the key store deletes
        the wrapped form); a provider that keeps nothing of its own does nothing."""
        ...


def parse_master_key(value: str | bytes, *, name: str = "master key") -> bytes:
    """A 256-bit key from its base64 text (or the 32 raw bytes).

    Example:
        >>> import base64
        >>> len(parse_master_key(base64.b64encode(bytes(32)).decode()))
        32
    """
    if isinstance(value, bytes) and len(value) == 32:
        return value
    text = value.decode("ascii", "replace") if isinstance(value, bytes) else value
    try:
        raw = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != 32:
        raise ConfigurationError(
            f"{name} must be 32 random bytes in base64 (44 characters), e.g. from "
            "`agent-memory new-key`; the value given is not"
        )
    return raw


def generate_master_key() -> str:
    """A new random master key, in base64 (what ``AGENT_MEMORY_MASTER_KEY`` holds).

    Example:
        >>> len(generate_master_key())
        44
    """
    return base64.b64encode(os.urandom(32)).decode("ascii")


def master_key_id(key: bytes) -> str:
    """A short public name of a master key (8 hex digits of a hash of it)."""
    return hashlib.sha256(b"agent-memory master key id" + key).hexdigest()[:8]


class MasterKeyProvider:
    """Wraps data keys with AES-256-GCM under a master key held in configuration.

    Args:
        keys: The master keys, newest first: the first wraps, every one unwraps (so during a
            rotation processes give the new key and the old one, see ``agent-memory
            rotate-key``). Each is base64 text or 32 raw bytes.

    Example:
        >>> provider = MasterKeyProvider([generate_master_key()])
        >>> wrapped = provider.wrap(bytes(32), "thread:t1")
        >>> provider.unwrap(wrapped, "thread:t1") == bytes(32)
        True
    """

    def __init__(self, keys: Sequence[str | bytes]) -> None:
        if isinstance(keys, (str, bytes)) or not keys:
            raise ConfigurationError("MasterKeyProvider needs a list of one or more master keys")
        raw = [parse_master_key(k) for k in keys]
        self._ciphers = {master_key_id(k): aesgcm(k) for k in raw}
        self.current = master_key_id(raw[0])

    def wrap(self, key: bytes, owner: str) -> bytes:
        """``key`` sealed under the newest master key, bound to ``owner``."""
        nonce = os.urandom(NONCE_BYTES)
        head = bytes.fromhex(self.current)
        sealed: bytes = self._ciphers[self.current].encrypt(nonce, key, head + owner.encode())
        return head + nonce + sealed

    def unwrap(self, wrapped: bytes, owner: str) -> bytes:
        """The data key in ``wrapped``, under whichever master key wrapped it."""
        head, nonce, sealed = wrapped[:4], wrapped[4 : 4 + NONCE_BYTES], wrapped[4 + NONCE_BYTES :]
        cipher = self._ciphers.get(head.hex())
        if cipher is None:
            raise DecryptionError(
                f"the data key of {owner!r} is wrapped by master key {head.hex()}, which is not "
                f"among the master keys given ({', '.join(self._ciphers)}): give it too (the new "
                "key first) until `agent-memory rotate-key` has re-wrapped every data key"
            )
        from cryptography.exceptions import InvalidTag

        try:
            key: bytes = cipher.decrypt(nonce, sealed, head + owner.encode())
        except InvalidTag:
            raise DecryptionError(
                f"the wrapped data key of {owner!r} does not authenticate under master key "
                f"{head.hex()}: altered, or moved from another owner's row"
            ) from None
        return key

    def destroy(self, wrapped: bytes, owner: str) -> None:
        """Nothing to do: the key store's row was the only copy."""

    def is_current(self, wrapped: bytes) -> bool:
        """Whether ``wrapped`` is wrapped by the newest master key (rotation skips it)."""
        return wrapped[:4].hex() == self.current
