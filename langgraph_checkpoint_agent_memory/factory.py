"""``create_checkpointer()`` and ``create_store()``: the one call a graph needs for each.

Each backend's modules load when it is chosen: an in-memory checkpointer imports none of
SQLAlchemy, numpy, the drivers, the cipher or OpenTelemetry.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import TYPE_CHECKING, Any

from langgraph_checkpoint_agent_memory import settings
from langgraph_checkpoint_agent_memory.db import url as urls
from langgraph_checkpoint_agent_memory.errors import ConfigurationError

if TYPE_CHECKING:
    from langgraph.checkpoint.base import BaseCheckpointSaver
    from langgraph.store.base import TTLConfig

    from langgraph_checkpoint_agent_memory.checkpoint.saver import SQLSaver
    from langgraph_checkpoint_agent_memory.crypto.config import Encryption, EncryptionLike
    from langgraph_checkpoint_agent_memory.db.database import Database
    from langgraph_checkpoint_agent_memory.store.store import AgentMemoryStore, IndexSettings

logger = logging.getLogger(__name__)

TTL_CONFIG_KEY = "config.checkpointer.ttl_seconds"
PREPARE_CONFIG_KEY = "config.postgres.prepare_threshold"
SHARD_DEPTH_CONFIG_KEY = "config.store.shard_depth"
FEEDBACK_CONFIG_KEY = "config.store.feedback"
#: Declared fields of encryption (the master key itself never comes from configuration).
ENCRYPTION_CONFIG_KEY = "config.encryption.enabled"
KEYSTORE_CONFIG_KEY = "config.encryption.keystore_url"
FILTERABLE_CONFIG_KEY = "config.encryption.filterable_fields"
#: crypto.config's MASTER_KEY_ENV, here so that "no encryption" loads no cipher (a test checks it).
MASTER_KEY_ENV = "AGENT_MEMORY_MASTER_KEY"

#: Options only a saver with expiry takes: ignored when TTL is off, so turning it off breaks no app.
_TTL_ONLY_OPTIONS = frozenset({"sweep_interval_seconds", "clock", "keep_last"})
_MEMORY_OPTIONS = frozenset({"serde"}) | _TTL_ONLY_OPTIONS

#: What was logged already (each backend, and the in-memory warning, once per process).
_announced: set[str] = set()


def _once(key: str, level: int, message: str, *args: Any) -> None:
    if key not in _announced:
        _announced.add(key)
        logger.log(level, message, *args)


def _warn_volatile_once(kind: str) -> None:
    _once(
        "volatile",
        logging.WARNING,
        "create_checkpointer(): using %s; conversation state lives in this process only and "
        "does not survive a restart (pass url= or set %s to persist it)",
        kind,
        urls.URL_ENV,
    )


def resolve_ttl(ttl_seconds: int | None) -> int | None:
    """The argument when given, else the declared config field, else off."""
    from langgraph_checkpoint_agent_memory.checkpoint.lifetime import validate_ttl

    if ttl_seconds is not None:
        return validate_ttl(ttl_seconds)
    declared = settings.get_field(TTL_CONFIG_KEY)
    return None if declared is None else validate_ttl(declared.value(), name=TTL_CONFIG_KEY)


def resolve_encryption(setting: EncryptionLike = None) -> Encryption | None:
    """The encryption to use: the argument when given, else the declared
    ``config.encryption.enabled`` field (``True``: the environment's master key, which must
    be set), else ``AGENT_MEMORY_MASTER_KEY``. Declared ``config.encryption.keystore_url``
    and ``config.encryption.filterable_fields`` (a list, or names separated by commas) fill
    what the argument and the environment leave out.

    Example:
        >>> resolve_encryption(False) is None
        True
    """
    if setting is None:
        setting = _declared_flag(ENCRYPTION_CONFIG_KEY)
    # off, and no master key to turn it on: the cipher's modules need not load
    if setting is False or (setting is None and not os.environ.get(MASTER_KEY_ENV, "").strip()):
        return None
    from langgraph_checkpoint_agent_memory.crypto import config as crypto_config

    found = crypto_config.resolve(setting)
    if found is None or isinstance(setting, crypto_config.Encryption):
        return found
    keystore = settings.effective_value(KEYSTORE_CONFIG_KEY)
    if keystore and not found.keystore_url:
        found = dataclasses.replace(found, keystore_url=keystore)
    fields = settings.effective_value(FILTERABLE_CONFIG_KEY)
    if fields and not found.filterable_fields:
        if isinstance(fields, str):  # an operator's "owner,status"
            fields = [f.strip() for f in fields.split(",") if f.strip()]
        found = dataclasses.replace(found, filterable_fields=fields)
    return found


def _postgres_settings(target: urls.Target | None, options: dict[str, Any]) -> None:
    if target is None or target.kind != "postgresql" or urls.PREPARE_THRESHOLD in options:
        return
    if urls.take_prepare_threshold(target.url)[1] is not None:
        return
    if (declared := settings.get_field(PREPARE_CONFIG_KEY)) is not None:
        from langgraph_checkpoint_agent_memory.db.postgres import prepare_threshold_of

        options[urls.PREPARE_THRESHOLD] = prepare_threshold_of(
            declared.value(), f"agent_config {PREPARE_CONFIG_KEY!r}"
        )


def _declared_store_options(options: dict[str, Any]) -> None:
    """A declared false ``feedback`` keeps the default: only code turns it off."""
    from langgraph_checkpoint_agent_memory.db.shard import checked_depth

    if options.get("shard_depth") is None:
        depth = settings.effective_value(SHARD_DEPTH_CONFIG_KEY)
        if depth is not None:
            options["shard_depth"] = checked_depth(depth)
    if options.get("feedback") is None:
        options["feedback"] = _declared_flag(FEEDBACK_CONFIG_KEY) or None


def _declared_flag(key: str) -> bool | None:
    value = settings.effective_value(key)
    if value is None or isinstance(value, bool):
        return value
    raise ConfigurationError(f"agent_config {key!r} must be true or false, not {value!r}")


def _sqlite_only(target: urls.Target | None, options: dict[str, Any]) -> None:
    if "mode" in options and (target is None or target.kind != "sqlite"):
        where = "memory" if target is None else target.kind
        raise ConfigurationError(f"mode applies to a SQLite file only, not to {where}")


def _url_mode(target: urls.Target, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` with the stricter of their ``mode`` and the SQLite URL's ``?mode=``."""
    if "mode" not in target.options:
        return options
    return {**options, "mode": urls.sqlite_mode(target, options.get("mode", "rwc"))}


def create_checkpointer(
    ttl_seconds: int | None = None,
    *,
    url: str | None = None,
    encryption: EncryptionLike = None,
    **options: Any,
) -> BaseCheckpointSaver[str]:
    """Return a LangGraph checkpointer for this environment.

    Args:
        ttl_seconds: Seconds of inactivity after which a thread is forgotten. ``None`` reads
            the ``config.checkpointer.ttl_seconds`` field when one is declared with
            ``@agent_config``; ``None`` or ``0`` in the end means no expiry.
        url: Where to persist checkpoints; ``None`` reads ``AGENT_MEMORY_URL``.
        encryption: Encryption at rest of checkpoint values, writes and metadata, with a
            data key per thread (see :func:`resolve_encryption`): ``None`` reads a declared
            ``config.encryption.enabled`` field, else ``AGENT_MEMORY_MASTER_KEY``;
            ``False`` is off. In memory, an encrypting ``TimedInMemorySaver`` is returned
            (without expiry when no TTL is set).
        **options: Passed to the saver, e.g. ``serde=EncryptedSerializer(...)``,
            ``sweep_interval_seconds=5``, or ``strategy="keep_latest", keep_last=5`` (an
            expired thread keeps its last 5 checkpoints per namespace; ``prune`` keeps as many).
            LangGraph's ``InMemorySaver`` (no TTL) has no sweep and no ``prune``: options of
            expiry and retention are checked, then ignored. On PostgreSQL also the
            connection options of :class:`PostgresSaver`; ``prepare_threshold`` may instead
            be written in the URL (``?prepare_threshold=none``) or declared as the
            ``config.postgres.prepare_threshold`` field of ``@agent_config``. On SQLite
            also ``mode``: ``"rw"`` opens an existing file only (a missing one raises
            :class:`DatabaseNotFoundError` and is not created), ``"ro"`` reads it only.

    Returns:
        With a URL: a :class:`SqliteSaver`, :class:`PostgresSaver` or :class:`HanaSaver` (one class
        serving the sync and the async API). Without: LangGraph's ``InMemorySaver`` without TTL (a
        subclass that checks ids, a thread's ``ttl_seconds`` and ``list`` filters as every saver of
        the package does), ``TimedInMemorySaver`` with one.

    Raises:
        TypeError: An option is unknown.
        ConfigurationError: ``ttl_seconds`` is not a whole number from 0 to 2**31 - 1 (a float, a
            string or a bool included), or ``mode`` is given for a backend other than a SQLite file.

    Example:
        ```python
        from langgraph_checkpoint_agent_memory import create_checkpointer

        checkpointer = create_checkpointer(ttl_seconds=3600, url="sqlite:///checkpoints.db")
        graph = builder.compile(checkpointer=checkpointer)
        graph.invoke({"messages": [("user", "hi")]}, {"configurable": {"thread_id": "t1"}})
        ```
    """
    from langgraph_checkpoint_agent_memory.checkpoint.in_memory import CheckedInMemorySaver
    from langgraph_checkpoint_agent_memory.checkpoint.lifetime import validate_keep_last
    from langgraph_checkpoint_agent_memory.checkpoint.timed import TimedInMemorySaver

    ttl = resolve_ttl(ttl_seconds)
    target = urls.resolve(url)
    _sqlite_only(target, options)
    setting = resolve_encryption(encryption)
    if target is not None:
        _postgres_settings(target, options)
        return _open_sql_saver(target, ttl, {**options, "encryption": setting or False})
    _refuse_unknown(options, _MEMORY_OPTIONS, "in-memory saver")
    if setting is not None:  # LangGraph's InMemorySaver cannot seal: the package's saver
        _warn_volatile_once(f"TimedInMemorySaver(ttl_seconds={ttl}, encrypted)")
        return TimedInMemorySaver(ttl, encryption=setting, **options)
    if ttl is None:
        if "keep_last" in options:
            validate_keep_last(options["keep_last"])
        if ignored := sorted(set(options) & _TTL_ONLY_OPTIONS):
            logger.debug("TTL is off; ignoring %s", ", ".join(ignored))
        _warn_volatile_once("InMemorySaver")
        return CheckedInMemorySaver(serde=options.get("serde"))
    _warn_volatile_once(f"TimedInMemorySaver(ttl_seconds={ttl})")
    return TimedInMemorySaver(ttl, **options)


def create_store(
    url: str | None = None,
    *,
    index: IndexSettings | None = None,
    ttl: TTLConfig | None = None,
    encryption: EncryptionLike = None,
    **options: Any,
) -> AgentMemoryStore:
    """Return the long-term memory store for this environment.

    The backend is chosen like :func:`create_checkpointer`'s (``url``, ``AGENT_MEMORY_URL``,
    a HANA service binding); with none of them the store lives in memory, with the same
    semantics as on a database.

    Args:
        url: ``sqlite:///path.db``, ``postgresql://...`` or ``hana://...``.
        index: LangGraph ``IndexConfig`` for vector search (``dims``, ``embed``, ``fields``).
        ttl: LangGraph ``TTLConfig`` (``default_ttl`` in minutes, ``refresh_on_read``,
            ``sweep_interval_minutes``).
        encryption: Encryption at rest (see :class:`AgentMemoryStore`): the argument, else
            a declared ``config.encryption.enabled`` field, else ``AGENT_MEMORY_MASTER_KEY``
            (see :func:`resolve_encryption`). A store in memory keeps its keys in memory.
        **options: :class:`AgentMemoryStore` options (``weights``, ``rrf_k``,
            ``shard_depth`` and ``feedback``, which declared ``config.store.*`` fields also
            set, ...) and the database's (``pool_size``, ``connect_timeout``; on PostgreSQL also
            ``prepare_threshold``, ``synchronous_commit``, ``max_idle`` and ``max_lifetime``,
            see :class:`PostgresSaver`; ``prepare_threshold`` also from the URL or the
            ``config.postgres.prepare_threshold`` field, as for :func:`create_checkpointer`;
            on SQLite ``mode``: ``"rw"`` for an existing file only, ``"ro"`` to read it only).

    Returns:
        An :class:`AgentMemoryStore`, a LangGraph ``BaseStore``.

    Example:
        ```python
        from langgraph_checkpoint_agent_memory import AgentMemory, create_store

        store = create_store("postgresql://user:pw@localhost/app", index="default")
        graph = builder.compile(checkpointer=checkpointer, store=store)
        memory = AgentMemory(store)
        ```
    """
    from langgraph_checkpoint_agent_memory.store.store import AgentMemoryStore

    resolved = resolve_encryption(encryption)  # a bad setting fails before any connection
    _declared_store_options(options)
    database = open_database(url, options)
    return AgentMemoryStore(database, index=index, ttl=ttl, encryption=resolved or False, **options)


def open_database(url: str | None, options: dict[str, Any]) -> Database[Any]:
    """The database of a store at ``url`` (chosen as :func:`create_store` chooses it; in
    memory without one), opened with the database's options that ``options`` holds, which
    are taken out of it (the rest are the store's).

    Example:
        >>> open_database(None, {"weights": None}).describe()
        'memory'
    """
    from langgraph_checkpoint_agent_memory.db.postgres import PostgresOptions
    from langgraph_checkpoint_agent_memory.db.sqlite import SQLiteDatabase

    target = urls.resolve(url)
    _sqlite_only(target, options)
    shared = ("pool_size", "connect_timeout", "mode")
    database_options: dict[str, Any] = {k: options.pop(k) for k in shared if k in options}
    postgres_options = {k: options.pop(k) for k in PostgresOptions.names() & options.keys()}
    _postgres_settings(target, postgres_options)
    if postgres_options and (target is None or target.kind != "postgresql"):
        raise ConfigurationError(
            f"{', '.join(postgres_options)} applies to PostgreSQL only, not to "
            f"{'memory' if target is None else target.kind}"
        )
    database: Database[Any]
    if target is None:
        database = SQLiteDatabase(":memory:")
    elif target.kind == "sqlite":
        database = SQLiteDatabase(target.options["path"], **_url_mode(target, database_options))
    elif target.kind == "postgresql":
        from langgraph_checkpoint_agent_memory.db.postgres import PostgresDatabase

        database = PostgresDatabase(target.url, **database_options, **postgres_options)
    else:
        from langgraph_checkpoint_agent_memory.db.hana import HanaDatabase

        database = HanaDatabase(target.options, url=target.url, **database_options)
    if target is not None:
        where = (target.kind, target.masked(), target.source)
        _once(f"store:{where}", logging.INFO, "create_store(): %s at %s (from %s)", *where)
    return database


def _refuse_unknown(options: dict[str, Any], known: frozenset[str], saver: str) -> None:
    if unknown := sorted(set(options) - known):
        raise TypeError(
            f"create_checkpointer() got unknown option(s) {', '.join(unknown)} for the "
            f"{saver}; known: ttl_seconds, url, {', '.join(sorted(known))}"
        )


def _open_sql_saver(target: urls.Target, ttl: int | None, options: dict[str, Any]) -> SQLSaver:
    import inspect

    from langgraph_checkpoint_agent_memory.checkpoint import backends
    from langgraph_checkpoint_agent_memory.checkpoint.saver import SQLSaver

    kind = {"sqlite": backends.SqliteSaver, "postgresql": backends.PostgresSaver}
    saver_type = kind.get(target.kind, backends.HanaSaver)
    known = {*inspect.signature(SQLSaver).parameters, *inspect.signature(saver_type).parameters}
    if target.kind == "postgresql":
        from langgraph_checkpoint_agent_memory.db.postgres import PostgresOptions

        known |= PostgresOptions.names()
    known -= {"database", "conn", "kwargs", "ttl_seconds"}
    _refuse_unknown(options, frozenset(known), f"{saver_type.__name__} ({target.kind})")
    if target.kind == "sqlite":
        path, sqlite_options = target.options["path"], _url_mode(target, options)
        saver: SQLSaver = backends.SqliteSaver(path, ttl_seconds=ttl, **sqlite_options)
    elif target.kind == "postgresql":
        saver = backends.PostgresSaver(target.url, ttl_seconds=ttl, **options)
    else:
        saver = backends.HanaSaver(target.url, ttl_seconds=ttl, **options)
    where = (target.kind, target.masked(), target.source, ttl)
    _once(
        f"{where}",
        logging.INFO,
        "create_checkpointer(): %s at %s (from %s), ttl_seconds=%s",
        *where,
    )
    return saver
