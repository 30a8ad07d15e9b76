"""The shard key of the store and agent memory: one rule, here and nowhere else.

Every row of the store's and agent memory's tables carries a ``shard`` column, part of its
primary key, derived from the row's namespace: **its first N labels joined with "."** (the
whole namespace when it has fewer). N is the store setting ``shard_depth`` (default 2).

Under the default, all of one user's agent memory shares one key: the namespaces
``("memory", "user=alice", "agent=support", "facts" | "history" | "episodes")`` all map to
``"memory.user=alice"``, and so do the scope's ledger rows (a scope's key is the rule applied
to its namespace ``(root, *labels)``). On a distributed database (Citus) the rows of one key
live on one shard, and every statement that names one key is a single-shard query.

A statement over a namespace prefix names one key only when the prefix holds at least N
labels (:func:`covers`); a shorter prefix matches rows of many keys and fans out.

This module does no I/O, so the store, agent memory and the SQL layer share it.
"""

from __future__ import annotations

from collections.abc import Sequence

from langgraph_checkpoint_agent_memory.errors import ConfigurationError

#: The default number of leading namespace labels that form the shard key.
DEFAULT_SHARD_DEPTH = 2


def checked_depth(depth: object) -> int:
    """``depth`` if it is a valid ``shard_depth`` (an int >= 1), else ``ConfigurationError``.

    Args:
        depth: The candidate setting.

    Returns:
        The depth.

    Example:
        >>> checked_depth(3)
        3
    """
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise ConfigurationError(f"shard_depth must be an integer >= 1, not {depth!r}")
    return depth


def shard_key(namespace: Sequence[str], depth: int = DEFAULT_SHARD_DEPTH) -> str:
    """The shard key of ``namespace``: its first ``depth`` labels joined with ".".

    Args:
        namespace: The labels of a namespace (a store namespace, or a memory scope's
            ``(root, *labels)``).
        depth: The store's ``shard_depth``.

    Returns:
        The key every row of that namespace carries.

    Example:
        >>> shard_key(("memory", "user=alice", "agent=support", "facts"))
        'memory.user=alice'
        >>> shard_key(("docs",))
        'docs'
    """
    return ".".join(namespace[:depth])


def prefix_shard(prefix: str, depth: int = DEFAULT_SHARD_DEPTH) -> str:
    """:func:`shard_key` of a namespace kept as text (its labels joined with ".", which
    no label holds).

    Example:
        >>> prefix_shard("users.alice.notes", 2)
        'users.alice'
    """
    return shard_key(prefix.split("."), depth)


def covers(namespace: Sequence[str], depth: int = DEFAULT_SHARD_DEPTH) -> bool:
    """Whether every namespace at or below ``namespace`` has the same shard key (it holds
    at least ``depth`` labels), so a statement over that prefix reads one shard.

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
