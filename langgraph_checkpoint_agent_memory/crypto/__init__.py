"""Encryption at rest: envelope encryption with a data key per scope (:mod:`.cipher` seals,
:mod:`.keyring` keeps the keys, :mod:`.config` reads the ``encryption=`` setting)."""

from langgraph_checkpoint_agent_memory.crypto.cipher import (
    SCOPE_CONFIG_KEY,
    DataKey,
    KeyProvider,
    MasterKeyProvider,
    aad,
    generate_master_key,
    store_owner,
    thread_owner,
)
from langgraph_checkpoint_agent_memory.crypto.config import (
    Encryption,
    EncryptionLike,
    from_environment,
    from_langgraph_aes_key,
    resolve,
)
from langgraph_checkpoint_agent_memory.crypto.keyring import Keyring

__all__ = [
    "SCOPE_CONFIG_KEY",
    "DataKey",
    "Encryption",
    "EncryptionLike",
    "KeyProvider",
    "Keyring",
    "MasterKeyProvider",
    "aad",
    "from_environment",
    "from_langgraph_aes_key",
    "generate_master_key",
    "resolve",
    "store_owner",
    "thread_owner",
]
