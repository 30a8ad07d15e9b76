"""The shard key of the store and agent memory: a row's namespace's first ``shard_depth``
labels joined with "." (one rule, here only), so all of one user's memory lives on one
Citus shard.
"""

from __future__ import annotations

from collections.abc import Sequence

from langgraph_checkpoint_agent_memory.errors import ConfigurationError

#: The default number of leading namespace labels that form the shard key.
DEFAULT_SHARD_DEPTH = 2


def checked_depth(depth: object) -> int:
    """``depth`` if it is a valid ``shard_depth`` (an int >= 1), else ``ConfigurationError``.

    Example:
        >>> checked_depth(3)
        3
    """
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise ConfigurationError(f"shard_depth must be an integer >= 1, not {depth!r}")
    return depth


def shard_key(namespace: Sequence[str], depth: int = DEFAULT_SHARD_DEPTH) -> str:
    """The key every row of ``namespace`` (a store namespace, or a memory scope's ``(root,
    *labels)``) carries: its first ``depth`` (the store's ``shard_depth``) labels joined by ".".

    Example:
        >>> shard_key(("memory", "user=alice", "agent=support", "facts"))
        'memory.user=alice'
        >>> shard_key(("docs",))
        'docs'
    """
    return ".".join(namespace[:depth])


def prefix_shard(prefix: str, depth: int = DEFAULT_SHARD_DEPTH) -> str:
    """:func:`shard_key` of a namespace kept as text (its labels joined with ".").

    Example:
        >>> prefix_shard("users.alice.notes", 2)
        'users.alice'
    """
    return shard_key(prefix.split("."), depth)


def covers(namespace: Sequence[str], depth: int = DEFAULT_SHARD_DEPTH) -> bool:
    """Whether every namespace at or below ``namespace`` has the same shard key.

    Example:
        >>> covers(("users", "alice"), 2), covers(("users",), 2)
        (True, False)
    """
    return len(namespace) >= depth


def rule_refused(recorded: int, asked: int) -> ConfigurationError:
    """The error for a store opened with a ``shard_depth`` its database does not record.

    Example:
        >>> str(rule_refused(3, 2)).startswith("this database's store uses shard_depth=3")
        True
    """
    return ConfigurationError(
        f"this database's store uses shard_depth={recorded}, and this store was opened with "
        f"shard_depth={asked}: the shard-key rule is fixed once data is written (open it "
        f"with shard_depth={recorded}, or leave shard_depth out to take the database's)"
    )
