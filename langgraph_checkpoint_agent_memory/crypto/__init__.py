"""Encryption at rest: envelope encryption with a data key per scope.

* :mod:`.cipher`: sealing and opening with one data key (AES-256-GCM), keyed term hashes,
  and what wraps data keys (a master key, or a KMS through the protocol).
* :mod:`.keyring`: keys by owner and by id, cached; create, destroy, rotate; and where
  wrapped data keys live (a table, in the data's database or its own).
* :mod:`.config`: the ``encryption=`` setting and the environment's defaults.
"""

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
