"""The ``agent-memory`` commands of encryption at rest: ``new-key``, ``rotate-key``,
``encrypt`` and ``move-keys``. They read the encryption setting as the application does, so
an operator runs them with the application's environment."""

from __future__ import annotations

import argparse
from contextlib import closing
from typing import TYPE_CHECKING, Any

from langgraph_checkpoint_agent_memory.cli import common
from langgraph_checkpoint_agent_memory.cli.common import CommandError, url_option
from langgraph_checkpoint_agent_memory.cli.progress import progress
from langgraph_checkpoint_agent_memory.errors import ConfigurationError
from langgraph_checkpoint_agent_memory.factory import MASTER_KEY_ENV, resolve_encryption

if TYPE_CHECKING:
    from langgraph_checkpoint_agent_memory.crypto.config import Encryption
    from langgraph_checkpoint_agent_memory.crypto.keyring import KeyStore


def _required_encryption() -> Encryption:
    found = resolve_encryption(None)
    if found is None:  # configuration: status 2, as every setting that cannot be used
        raise ConfigurationError(
            f"encryption is not configured: set {MASTER_KEY_ENV} (base64 master keys, newest "
            "first; `agent-memory new-key` makes one)"
        )
    return found


def _cmd_new_key(args: argparse.Namespace) -> int:
    from langgraph_checkpoint_agent_memory.crypto.cipher import generate_master_key

    key = generate_master_key()
    common.emit(args, {"master_key": key}, lambda out: print(key))
    return 0


def _cmd_rotate_key(args: argparse.Namespace) -> int:
    from langgraph_checkpoint_agent_memory.crypto.keyring import Keyring, KeyStore, open_database

    found = resolve_encryption(None)
    if found is not None and found.keystore_url:
        url = found.keystore_url
    else:  # the key store is a table of the data's database: it must exist and hold one
        url = common.resolve_url(args.url)
        if "keys" not in common.installed(url):
            raise CommandError(f"{url} holds no key store (nothing was ever encrypted there)")
    encryption = _required_encryption()
    keystore = KeyStore(open_database(url), owned=True, auto_setup=False)
    with closing(Keyring(keystore, encryption.key_provider())) as keyring:
        with progress(args, "re-wrapping data keys", "keys") as report:
            rewrapped = keyring.rotate(on_progress=report)
        where = keyring.keystore.describe()
    said = (
        f"re-wrapped {rewrapped} data key(s) under the first master key of {MASTER_KEY_ENV}; "
        "the data was not rewritten. Once every process runs with the new key alone, the old "
        "one can go."
    )
    common.emit(args, {"rewrapped": rewrapped, "keystore": where}, lambda out: out.print(said))
    return 0


def _cmd_encrypt(args: argparse.Namespace) -> int:
    import dataclasses

    from langgraph_checkpoint_agent_memory.factory import create_checkpointer, create_store

    url = common.resolve_url(args.url)
    installed = common.installed(url)  # a database that does not exist is said first
    encryption = dataclasses.replace(_required_encryption(), allow_plaintext=True)
    counts: dict[str, Any] = {}
    if "checkpoint" in installed:
        saver: Any = create_checkpointer(url=url, encryption=encryption, **common.existing(url))
        with saver, progress(args, "encrypting threads", "threads") as report:
            counts["checkpoints"] = saver.encrypt_plaintext(on_progress=report)
    if "store" in installed:
        with create_store(url, encryption=encryption, **common.existing(url)) as store:
            memory: Any = None
            if "memory" in installed:
                from langgraph_checkpoint_agent_memory.memory import AgentMemory

                # first: memory's pending migrations (re-indexing facts) run on plaintext
                # rows, with the store's setup, before the store seals them
                memory = AgentMemory(store)
            with progress(args, "encrypting store items", "items") as report:
                counts["store"] = store.encrypt_plaintext(on_progress=report)
            if memory is not None:
                counts["memory"] = memory.encrypt_plaintext()
    if not counts:
        raise CommandError(f"{url} holds no checkpoints, store or memory of this package")

    def render(out: Any) -> None:
        for part, numbers in counts.items():
            said = ", ".join(f"{n} {what}" for what, n in numbers.items())
            out.print(f"{part}: encrypted {said}")

    common.emit(args, counts, render)
    return 0


#: Data keys moved per transaction by ``move-keys``.
MOVE_BATCH = 500


def _same_database(source: KeyStore, target: KeyStore) -> bool:
    """Whether they are one database, by a probe key (moving keys within one deletes them all)."""
    import secrets
    import time

    from langgraph_checkpoint_agent_memory.crypto.cipher import new_key_id
    from langgraph_checkpoint_agent_memory.db import keys as sqlk

    probe = f"probe:move-keys:{secrets.token_hex(16)}"
    row = sqlk.KeyRow(new_key_id(), probe, b"\0", time.time())
    target.run(sqlk.create_plan(target.dialect, row))
    try:
        return source.run(sqlk.by_owner_plan(source.dialect, probe)) is not None
    finally:
        target.run(sqlk.destroy_plan(target.dialect, [probe]))


def _cmd_move_keys(args: argparse.Namespace) -> int:
    from langgraph_checkpoint_agent_memory.crypto.keyring import KeyStore, open_database
    from langgraph_checkpoint_agent_memory.db import keys as sqlk
    from langgraph_checkpoint_agent_memory.db import url as urls

    url = common.resolve_url(args.url)
    if "keys" not in common.installed(url):
        raise CommandError(f"{urls.mask_url(url)} holds no data keys (nothing to move)")
    moved = 0
    with (
        closing(KeyStore(open_database(url), owned=True, auto_setup=False)) as source,
        closing(KeyStore(open_database(args.to), owned=True)) as target,  # table on first use
    ):
        if _same_database(source, target):
            raise ConfigurationError("--to names the data's own database: give the key store's own")
        while page := source.run(sqlk.page_plan(source.dialect, "", MOVE_BATCH)):
            stored = target.run(sqlk.copy_plan(target.dialect, page))
            for row, kept in zip(page, stored, strict=True):
                if kept.key_id != row.key_id:
                    raise CommandError(
                        f"the key store at {target.describe()} holds another data key of "
                        f"{row.owner} ({kept.key_id}, not {row.key_id}): was it used by an "
                        f"application already? {moved} key(s) moved, the rest left in place"
                    )
            # copied and committed there: only now deleted here
            source.run(sqlk.destroy_plan(source.dialect, [r.owner for r in page]))
            moved += len(page)
        where = target.describe()
    said = (
        f"moved {moved} data key(s) to {where}; set AGENT_MEMORY_KEYSTORE_URL to it in every "
        "process. Backups of the data taken before still hold the keys."
    )
    common.emit(args, {"moved": moved, "keystore": where}, lambda out: out.print(said))
    return 0


def add_commands(command: Any) -> None:
    command("new-key", "print a new random master key (base64)", _cmd_new_key)
    command(
        "rotate-key",
        f"re-wrap every data key under the first master key of {MASTER_KEY_ENV} "
        "(give the new key first, then the old)",
        _cmd_rotate_key,
    )
    command(
        "encrypt", "encrypt rows written before encryption was turned on (idempotent)", _cmd_encrypt
    )
    move = command(
        "move-keys",
        "move the data keys from the data's database to a key store of its own (stop the "
        "writers first; then set AGENT_MEMORY_KEYSTORE_URL)",
        _cmd_move_keys,
    )
    move.add_argument(
        "--to", required=True, type=url_option("--to"), help="the key store's database URL"
    )
