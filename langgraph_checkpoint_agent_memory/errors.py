"""Exceptions raised by the package.

Every error derives from :class:`AgentMemoryError`, so callers can catch the package's failures
in one clause, and from the matching built-in (``ValueError``, ``LookupError``) so code written
against LangGraph's own savers keeps working.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from langgraph.store.base import InvalidNamespaceError


class AgentMemoryError(Exception):
    """Base class of every error this package raises on purpose."""


class ConfigurationError(AgentMemoryError, ValueError):
    """A setting, argument or configuration source holds a value that cannot be used."""


class MissingExtraError(ConfigurationError, ImportError):
    """A feature needs packages of an extra that is not installed; nothing was done. The
    message is one line: what needs them, and the command that installs the extra (``extra``
    names it). A :class:`ConfigurationError` (the command line exits with status 2) and an
    ``ImportError``.

    Example:
        >>> print(MissingExtraError("PostgreSQL needs psycopg 3", "postgres"))
        PostgreSQL needs psycopg 3: pip install 'langgraph-checkpoint-agent-memory[postgres]'
    """

    def __init__(self, needs: str, extra: str, alternative: str = "") -> None:
        super().__init__(
            f"{needs}: pip install 'langgraph-checkpoint-agent-memory[{extra}]'{alternative}"
        )
        self.extra = extra


def require(module: str, extra: str, needs: str, alternative: str = "") -> Any:
    """``module``, imported, or :class:`MissingExtraError` naming the extra that installs it
    (``needs``: what needs it; ``alternative``: the end of the message, another way out).

    Example:
        >>> require("json", "postgres", "PostgreSQL needs psycopg 3").__name__
        'json'
    """
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(needs, extra, alternative) from exc


class DatabaseNotFoundError(ConfigurationError):
    """The database named does not exist, and was opened in a way that creates none (a SQLite
    file with ``mode="rw"`` or ``"ro"``): nothing was created. The message names it."""


class InvalidValueError(AgentMemoryError, ValueError):
    """A value, key, namespace or id that not every backend could store and read back equal
    (the message says which and why); nothing was written."""


if TYPE_CHECKING:

    class InvalidNamespaceValueError(InvalidValueError, InvalidNamespaceError):
        """A namespace no backend could store, or LangGraph refuses (made by ``__getattr__``)."""


def __getattr__(name: str) -> Any:
    """:class:`InvalidNamespaceValueError`, made at its first use: its other base's module
    loads LangChain's runnables (a quarter of a second)."""
    if name != "InvalidNamespaceValueError":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from langgraph.store.base import InvalidNamespaceError

    class InvalidNamespaceValueError(InvalidValueError, InvalidNamespaceError):
        """A store namespace that not every backend could store (a label with a NUL character
        or a lone surrogate, not a string, too long) or that LangGraph refuses (an empty label,
        a dot in a label): nothing was written. An :class:`InvalidValueError` and LangGraph's
        ``InvalidNamespaceError``, so code written against either catches it."""

    InvalidNamespaceValueError.__qualname__ = InvalidNamespaceValueError.__name__
    globals()[name] = InvalidNamespaceValueError
    return InvalidNamespaceValueError


class DamagedValueError(AgentMemoryError, ValueError):
    """A stored value cannot be read back: its compressed form is cut short, altered, or
    claims to expand beyond the bound the package ever writes (see the user guide, "How
    conversations are stored"). Nothing is decompressed beyond that bound."""


class ThreadDeletedError(AgentMemoryError, LookupError):
    """A write named a parent checkpoint of a thread that was deleted or expired: accepting
    it would bring the thread back to life with a broken history. Start the thread afresh (a
    config without ``checkpoint_id``) or use a new ``thread_id``."""


class DatabaseUnavailableError(AgentMemoryError, ConnectionError):
    """The database could not be reached (the message names it, with the password masked)."""


class ReadOnlyDatabaseError(DatabaseUnavailableError):
    """A write reached a database that cannot be written (a read-only SQLite file, or one in
    a folder where its write-ahead log cannot be made): nothing was written, reads still work.
    Its own class, because waiting and retrying will not cure it."""


class KeysBesideDataWarning(AgentMemoryError, UserWarning):
    """Warned at the first erase of a process whose data keys live in the data's own
    database (the default key store): the erase destroys them there, but a backup taken
    before it still holds them, so the erased scopes stay readable in that backup. Set
    ``AGENT_MEMORY_KEYSTORE_URL`` (or ``Encryption(keystore_url=...)``) to keep them apart."""


class ClosedError(AgentMemoryError, RuntimeError):
    """The saver or store was closed; open a new one."""


class EncryptionError(AgentMemoryError):
    """Encrypted data could not be written or read as encryption requires (the subclasses
    say why); nothing was written, and nothing unreadable was returned as if it were data."""


class KeyMissingError(EncryptionError, LookupError):
    """A row is encrypted under a data key the key store does not hold: its scope or thread
    was erased (the key destroyed, so the row is unreadable by design), or the key store in
    use is not the one the row was written with. ``key_id`` names the key."""

    def __init__(self, message: str, key_id: str) -> None:
        super().__init__(message)
        self.key_id = key_id


class PlaintextRowError(EncryptionError, ValueError):
    """Encryption is on and a row holds plaintext (written before encryption was turned on,
    or by a process without it). Run ``agent-memory encrypt`` to encrypt such rows, or open
    with ``Encryption(..., allow_plaintext=True)`` while migrating."""


class DecryptionError(EncryptionError, ValueError):
    """An encrypted row failed authentication: it was altered, moved to another row or
    scope, or its data key was unwrapped with the wrong master key."""


def error_type(error: BaseException) -> str:
    """``error.type`` of ``error``: its class's fully qualified name (a built-in's name).

    Example:
        >>> error_type(ValueError("bad")), error_type(KeyboardInterrupt())
        ('ValueError', 'KeyboardInterrupt')
    """
    kind = type(error)
    if kind.__module__ == "builtins":
        return kind.__qualname__
    return f"{kind.__module__}.{kind.__qualname__}"
