"""The encryption setting: what ``encryption=`` accepts (``None``: the environment decides,
``False``, ``True``, a master key, a :class:`~.cipher.KeyProvider`, an :class:`Encryption`),
and the environment's defaults (see the user guide's "Turn it on")."""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from langgraph_checkpoint_agent_memory.crypto.cipher import KeyProvider, MasterKeyProvider
from langgraph_checkpoint_agent_memory.crypto.keyring import (
    KEYSTORE_URL_ENV,
    Keyring,
    KeyStore,
    memory_keystore,
    open_database,
)
from langgraph_checkpoint_agent_memory.db.database import Database
from langgraph_checkpoint_agent_memory.errors import ConfigurationError

MASTER_KEY_ENV = "AGENT_MEMORY_MASTER_KEY"
#: Comma-separated dotted paths of store values kept as keyed hashes for equality filters.
FILTERABLE_ENV = "AGENT_MEMORY_FILTERABLE_FIELDS"
#: The Agent Server's own encryption key (16, 24 or 32 characters), honoured by its factories.
LANGGRAPH_AES_KEY_ENV = "LANGGRAPH_AES_KEY"


@dataclass(frozen=True)
class Encryption:
    """Encryption at rest with a data key per scope (see the user guide's "Encryption and
    erasure").

    Args:
        master_keys: Base64 master keys, newest first (the first wraps new data keys, all
            unwrap). Give these or ``provider``.
        provider: A :class:`~.cipher.KeyProvider` (a KMS, a credential store) instead of
            master keys.
        keystore_url: A database of its own for the data keys; ``None``: a table of the
            data's database.
        allow_plaintext: Read rows written without encryption (they are encrypted when next
            written, and by ``agent-memory encrypt``). Off: such a row is refused.
        recheck_seconds: How long a process uses a cached key before asking the key store
            again (an erase in another process takes effect within it). An erase destroys a
            key only while its shard key holds no row (read again just before destroying),
            but a process writing to the erased scope within this time, or between that
            read and the destruction, seals with the destroyed key, and what it wrote is
            unreadable (:class:`KeyMissingError`): erase a scope once nothing writes to it.
        filterable_fields: Dotted paths into store values (``"owner"``, ``"address.city"``)
            whose values the store also keeps as keyed hashes, so that ``$eq`` and ``$in``
            filters on them are narrowed in the database instead of by decrypting every
            item read. Reveals which items of a shard key share a value of such a field.

    Example:
        ```python
        # not run: needs a PostgreSQL server for the key store
        from langgraph_checkpoint_agent_memory import Encryption, create_checkpointer

        encryption = Encryption(master_keys=[os.environ["MY_MASTER_KEY"]],
                                keystore_url="postgresql://keys-db/keys")
        checkpointer = create_checkpointer(url="sqlite:///chk.db", encryption=encryption)
        ```
    """

    master_keys: Sequence[str | bytes] = ()
    provider: KeyProvider | None = None
    keystore_url: str | None = None
    allow_plaintext: bool = False
    recheck_seconds: float = 60.0
    filterable_fields: Sequence[str] = ()

    def __post_init__(self) -> None:
        if isinstance(self.master_keys, (str, bytes)):
            object.__setattr__(self, "master_keys", (self.master_keys,))
        if bool(self.master_keys) == (self.provider is not None):
            raise ConfigurationError(
                "Encryption needs master_keys or a provider (exactly one of them)"
            )
        if self.recheck_seconds < 0:
            raise ConfigurationError("Encryption.recheck_seconds must be >= 0")
        object.__setattr__(self, "filterable_fields", checked_fields(self.filterable_fields))

    def key_provider(self) -> KeyProvider:
        """The provider that wraps data keys."""
        return self.provider if self.provider is not None else MasterKeyProvider(self.master_keys)

    def open_keyring(self, database: Database[Any] | None) -> Keyring:
        """A keyring over this setting's key store: ``keystore_url``'s database, else
        ``database`` (the data's), else a private in-memory one.

        Args:
            database: The data's database, or ``None`` for data kept in memory.
        """
        if self.keystore_url:
            keystore = KeyStore(open_database(self.keystore_url), owned=True)
        else:
            keystore = memory_keystore() if database is None else KeyStore(database, owned=False)
        return Keyring(
            keystore,
            self.key_provider(),
            allow_plaintext=self.allow_plaintext,
            recheck_seconds=self.recheck_seconds,
        )


def checked_fields(fields: Iterable[str] | None) -> tuple[str, ...]:
    """``fields`` as dotted paths (``"owner"``, ``"address.city"``), sorted, each checked:
    labels not empty, without space around them or control characters."""
    names = [fields] if isinstance(fields, str) else list(fields or ())
    for name in names:
        if not isinstance(name, str) or not all(
            p and p == p.strip() and p.isprintable() for p in name.split(".")
        ):
            raise ConfigurationError(
                f"filterable fields are dotted paths like 'owner' or 'address.city', not {name!r}"
            )
    return tuple(sorted(set(names)))


EncryptionLike: TypeAlias = "Encryption | KeyProvider | str | bool | None"


def from_environment(environ: Mapping[str, str] | None = None) -> Encryption | None:
    """The environment's setting, or ``None`` when ``AGENT_MEMORY_MASTER_KEY`` is not set."""
    env = os.environ if environ is None else environ
    if not env.get(MASTER_KEY_ENV, "").strip():
        return None
    return _with_env(env, master_keys=_names(env[MASTER_KEY_ENV]))


def _names(raw: str) -> tuple[str, ...]:
    return tuple(name.strip() for name in raw.split(",") if name.strip())


def _with_env(
    env: Mapping[str, str], *, master_keys: Sequence[str] = (), provider: KeyProvider | None = None
) -> Encryption:
    """The setting with the environment's key store and filterable fields."""
    return Encryption(
        master_keys,
        provider,
        keystore_url=env.get(KEYSTORE_URL_ENV) or None,
        filterable_fields=_names(env.get(FILTERABLE_ENV, "")),
    )


def resolve(setting: EncryptionLike, environ: Mapping[str, str] | None = None) -> Encryption | None:
    """The :class:`Encryption` an ``encryption=`` argument stands for (``None``: off).

    Example:
        >>> resolve(False) is None
        True
        >>> resolve(None, environ={}) is None
        True
    """
    env = os.environ if environ is None else environ
    if setting is False:
        return None
    if isinstance(setting, Encryption):
        return setting
    if setting is None or setting is True:
        found = from_environment(env)
        if found is None and setting is True:
            raise ConfigurationError(
                f"encryption=True needs a master key: set {MASTER_KEY_ENV} (base64 of 32 "
                "random bytes, e.g. from `agent-memory new-key`) or pass encryption=Encryption(...)"
            )
        return found
    if isinstance(setting, str):
        return _with_env(env, master_keys=(setting,))
    if isinstance(setting, KeyProvider):
        return _with_env(env, provider=setting)
    raise ConfigurationError(
        "encryption must be None, True, False, a base64 master key, a KeyProvider or an "
        f"Encryption, not {type(setting).__name__}"
    )


def from_langgraph_aes_key(environ: Mapping[str, str] | None = None) -> Encryption | None:
    """The setting of an Agent Server deployment: the package's own variables when set,
    else ``LANGGRAPH_AES_KEY`` (16, 24 or 32 characters, as the Agent Server takes it),
    from which a master key is derived (SHA-256 of it, so every length gives 256 bits)."""
    env = os.environ if environ is None else environ
    own = from_environment(env)
    if own is not None or not (aes := env.get(LANGGRAPH_AES_KEY_ENV, "").encode()):
        return own
    if len(aes) not in (16, 24, 32):
        raise ConfigurationError(
            f"{LANGGRAPH_AES_KEY_ENV} must be 16, 24 or 32 characters long (the Agent "
            f"Server's rule), not {len(aes)}"
        )
    derived = hashlib.sha256(b"agent-memory from LANGGRAPH_AES_KEY" + aes).digest()
    return _with_env(env, master_keys=(base64.b64encode(derived).decode("ascii"),))
