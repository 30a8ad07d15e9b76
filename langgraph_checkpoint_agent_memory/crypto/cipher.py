"""Sealing and opening with one data key, and wrapping data keys with a master key, with
no I/O (the design: docs/internals/encryption-design.md).

A sealed value is ``marker (1) | key id (8) | check (4) | nonce (12) | ciphertext | tag (16)``:
AES-256-GCM under the data key's value subkey, the header and the row's identity
(:func:`aad`) authenticated as associated data. The check, a CRC-32 of marker and key id,
makes a damaged header read as :class:`DecryptionError`, never as a missing key.

The term subkey's derivation is frozen: the lexical index holds term hashes made with it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import zlib
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from langgraph_checkpoint_agent_memory.compression import pack, unpack, unpack_zlib
from langgraph_checkpoint_agent_memory.errors import (
    ConfigurationError,
    DamagedValueError,
    DecryptionError,
    EncryptionError,
    PlaintextRowError,
    require,
)

#: First byte of a sealed value (format 2): plaintext as given, zlib-compressed first (as
#: written before :mod:`..compression`), or compressed by :mod:`..compression` first.
PLAIN, COMPRESSED, PACKED = 0xA7, 0xA8, 0xA9
KEY_ID_BYTES, CHECK_BYTES, NONCE_BYTES = 8, 4, 12
HEADER_BYTES = 1 + KEY_ID_BYTES + CHECK_BYTES
#: What sealing adds to a value (before compression): header, nonce and a 16-byte tag.
OVERHEAD = HEADER_BYTES + NONCE_BYTES + 16
FORMATS = (PLAIN, COMPRESSED, PACKED)
#: The header's marker and key id, which its check covers.
CHECKED_BYTES = 1 + KEY_ID_BYTES
#: The prefix of a sealed value kept in a text column (base64 follows).
TEXT_PREFIX = "!"
VALUE_LABEL = b"agent-memory values v2"


def aesgcm(key: bytes) -> Any:
    aead = require(
        "cryptography.hazmat.primitives.ciphers.aead",
        "encryption",
        "encryption needs the 'cryptography' package",
    )
    return aead.AESGCM(key)


def subkey(secret: bytes, label: bytes) -> bytes:
    """HKDF-SHA256's expand step only: ``secret`` is 32 random bytes already."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDFExpand

    return HKDFExpand(algorithm=hashes.SHA256(), length=32, info=label).derive(secret)


def new_key() -> bytes:
    return os.urandom(32)


def new_key_id() -> str:
    return os.urandom(KEY_ID_BYTES).hex()


def is_sealed(value: bytes | bytearray | memoryview) -> bool:
    """Whether ``value`` looks like a sealed value (its marker and length). LangGraph's serde
    never starts a value so, but raw ``bytes`` can: there a row's type must say it is sealed."""
    return bool(value) and value[0] in FORMATS and len(value) >= OVERHEAD


def looks_damaged(value: bytes | bytearray | memoryview) -> bool:
    """Whether ``value``, which :func:`is_sealed` turned down, is rather a sealed value that
    was cut short, or whose marker was altered (its key id's check still holds)."""
    if value and value[0] in FORMATS:
        return True
    head = bytes(value[:HEADER_BYTES])
    check = int.from_bytes(head[CHECKED_BYTES:], "big")
    return len(head) == HEADER_BYTES and any(
        zlib.crc32(bytes((m,)) + head[1:CHECKED_BYTES]) == check for m in FORMATS
    )


def check_header(sealed: bytes | bytearray | memoryview) -> None:
    """Raise :class:`DecryptionError` unless ``sealed`` has a whole sealed value's header."""
    if not is_sealed(sealed) or zlib.crc32(sealed[:CHECKED_BYTES]) != int.from_bytes(
        sealed[CHECKED_BYTES:HEADER_BYTES], "big"
    ):
        raise DecryptionError(
            f"a sealed value ({len(sealed)} bytes) is damaged: cut short, or its header altered"
        )


def key_id_of(sealed: bytes | bytearray | memoryview) -> str:
    """The id of the key ``sealed`` was sealed with (see :func:`check_header`)."""
    check_header(sealed)
    return bytes(sealed[1 : 1 + KEY_ID_BYTES]).hex()


def is_sealed_text(value: str) -> bool:
    return value.startswith(TEXT_PREFIX)


def text_bytes(value: str) -> bytes:
    try:
        return base64.b64decode(value[len(TEXT_PREFIX) :], validate=True)
    except ValueError:
        raise DecryptionError("a sealed text value is not valid base64 (altered?)") from None


def plaintext_refused(what: str) -> PlaintextRowError:
    return PlaintextRowError(
        f"{what} is not encrypted, and encryption is on: encrypt existing rows with "
        "`agent-memory encrypt` (or open with Encryption(..., allow_plaintext=True) while "
        "migrating)"
    )


class DataKey:
    """One owner's data key, unwrapped: seals, opens and hashes terms.

    Args:
        key_id: The key's id (16 hex digits), written into every value it seals.
        owner: Whose key it is (a store shard key such as ``"store:memory.user=alice"``, or
            ``"thread:<id>"``).
        secret: The 32 key bytes (only its subkeys seal and hash, see the module).

    Example:
        >>> from langgraph_checkpoint_agent_memory.crypto.cipher import new_key, new_key_id
        >>> key = DataKey(new_key_id(), "thread:t1", new_key())
        >>> sealed = key.seal(b"hello", aad("row", "1"))
        >>> key.open(sealed, aad("row", "1"))
        b'hello'
    """

    __slots__ = ("_aead", "_invalid", "_key_id", "_terms", "key_id", "owner")

    def __init__(self, key_id: str, owner: str, secret: bytes) -> None:
        if len(secret) != 32:
            raise EncryptionError(f"a data key has 32 bytes, not {len(secret)}")
        self.key_id, self.owner = key_id, owner
        from cryptography.exceptions import InvalidTag

        self._invalid = InvalidTag
        self._aead = aesgcm(subkey(secret, VALUE_LABEL))
        self._key_id = bytes.fromhex(key_id)
        # the term subkey's label is frozen (see the module)
        self._terms = hmac.new(secret, b"agent-memory terms v1", hashlib.sha256).digest()

    def seal(self, plaintext: bytes, aad: bytes, *, compress: bool = True) -> bytes:
        """``plaintext`` encrypted and authenticated together with ``aad`` (the row's identity).

        Args:
            plaintext: What to protect.
            aad: Associated data (:func:`aad`): the same bytes must be given to :meth:`open`.
            compress: Compress first where that makes it smaller (``False`` for values
                compressed already, such as the checkpoint saver's).
        """
        marker = PLAIN
        packed = pack(plaintext) if compress else None
        if packed is not None:
            plaintext, marker = packed, PACKED
        head = bytes((marker,)) + self._key_id
        header = head + zlib.crc32(head).to_bytes(CHECK_BYTES, "big")
        nonce = os.urandom(NONCE_BYTES)
        return header + nonce + self._aead.encrypt(nonce, plaintext, header + aad)  # type: ignore[no-any-return]

    def open(self, sealed: bytes | bytearray | memoryview, aad: bytes) -> bytes:
        """The plaintext of ``sealed``.

        Args:
            sealed: A value :meth:`seal` returned for the same ``aad``.
            aad: The row's identity, as given to :meth:`seal`.

        Raises:
            DecryptionError: ``sealed`` was damaged or altered, or sealed for another row or
                key.
        """
        data = bytes(sealed)
        check_header(data)
        header = data[:HEADER_BYTES]
        nonce = data[HEADER_BYTES : HEADER_BYTES + NONCE_BYTES]
        try:
            plain: bytes = self._aead.decrypt(
                nonce, data[HEADER_BYTES + NONCE_BYTES :], header + aad
            )
        except self._invalid:
            raise DecryptionError(
                f"a value sealed with data key {self.key_id} of {self.owner!r} does not "
                "authenticate: it was altered or belongs to another row"
            ) from None
        try:
            if data[0] == PACKED:
                return unpack(plain, "a sealed value")
            return unpack_zlib(plain, "a sealed value") if data[0] == COMPRESSED else plain
        except DamagedValueError as exc:  # it authenticated: sealed so by a key holder
            raise DecryptionError(str(exc)) from None

    def seal_text(self, plaintext: bytes, aad: bytes) -> str:
        """:meth:`seal` for a text column: ``"!"`` and base64."""
        return TEXT_PREFIX + base64.b64encode(self.seal(plaintext, aad)).decode("ascii")

    def open_text(self, sealed: str, aad: bytes) -> bytes:
        """:meth:`open` of a value :meth:`seal_text` returned."""
        return self.open(text_bytes(sealed), aad)

    def term(self, term: str) -> str:
        """The keyed hash stored in place of ``term`` in the lexical index (12 characters).

        Example:
            >>> from langgraph_checkpoint_agent_memory.crypto.cipher import new_key, new_key_id
            >>> key = DataKey(new_key_id(), "store:docs", new_key())
            >>> key.term("lyon") == key.term("lyon") != key.term("paris")
            True
        """
        digest = hmac.new(self._terms, term.encode("utf-8"), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest[:9]).decode("ascii")


def thread_owner(thread_id: str) -> str:
    """The key owner of a checkpoint thread that names no scope of its own.

    Example:
        >>> thread_owner("t1")
        'thread:t1'
    """
    return f"thread:{thread_id}"


def store_owner(shard: str) -> str:
    """The key owner of a store shard key (a user's memory under the default rule), which
    a thread's checkpoints share when its config names it (``encryption_scope``).

    Example:
        >>> store_owner("memory.user=alice")
        'store:memory.user=alice'
    """
    return f"store:{shard}"


#: The ``config["configurable"]`` key naming the store shard key whose data key a thread's
#: checkpoints use (so erasing that scope destroys them too, backups included).
SCOPE_CONFIG_KEY = "encryption_scope"


def aad(*parts: str | int | None) -> bytes:
    """Associated data naming a row: its identifying parts, each as its length (4 bytes,
    big-endian) and its UTF-8 bytes, so distinct identities never share an encoding.

    Example:
        >>> aad("blob", "t1")
        b'\\x00\\x00\\x00\\x04blob\\x00\\x00\\x00\\x02t1'
        >>> aad("a\\x00b", "c") != aad("a", "b\\x00c")
        True
    """
    out = bytearray()
    for part in parts:
        data = ("" if part is None else str(part)).encode("utf-8")
        out += len(data).to_bytes(4, "big") + data
    return bytes(out)


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

    def unwrap(self, wrapped: bytes, owner: str) -> bytes:
        """The key that :meth:`wrap` turned into ``wrapped``."""

    def destroy(self, wrapped: bytes, owner: str) -> None:
        """Forget the key (called when its owner is erased, before the key store deletes
        the wrapped form); a provider that keeps nothing of its own does nothing."""


def parse_master_key(value: str | bytes) -> bytes:
    """A 256-bit key from its base64 text (or the 32 raw bytes)."""
    if isinstance(value, bytes) and len(value) == 32:
        return value
    try:
        raw = base64.b64decode(value.strip(), validate=True)
    except ValueError:  # binascii.Error is one
        raw = b""
    if len(raw) != 32:
        raise ConfigurationError(
            "master key must be 32 random bytes in base64 (44 characters), e.g. from "
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
        self._ciphers = {
            hashlib.sha256(b"agent-memory master key id" + k).hexdigest()[:8]: aesgcm(k)
            for k in map(parse_master_key, keys)
        }
        self.current = next(iter(self._ciphers))  # the first key's id

    def wrap(self, key: bytes, owner: str) -> bytes:
        """``key`` sealed under the newest master key, bound to ``owner``."""
        nonce = os.urandom(NONCE_BYTES)
        head = bytes.fromhex(self.current)
        sealed: bytes = self._ciphers[self.current].encrypt(nonce, key, head + owner.encode())
        return head + nonce + sealed

    def unwrap(self, wrapped: bytes, owner: str) -> bytes:
        """The data key in ``wrapped``, under whichever master key wrapped it."""
        head, nonce, sealed = wrapped[:4], wrapped[4 : 4 + NONCE_BYTES], wrapped[4 + NONCE_BYTES :]
        if (cipher := self._ciphers.get(head.hex())) is None:
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
