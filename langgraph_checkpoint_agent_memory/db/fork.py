"""What a forked child must not share with its parent: open connections, locks, threads.
Using an inherited connection mixes two processes' traffic, and closing it ends the parent's
session too, so in a child each registered holder sets its connections aside (never closed)
and starts afresh.
"""

from __future__ import annotations

import logging
import os
import weakref
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

logger = logging.getLogger(__name__)
L = TypeVar("L")


class ForkAware(Protocol):
    def after_fork(self) -> None:
        """Called in the child, right after the fork, before any other thread exists."""


_holders: weakref.WeakSet[Any] = weakref.WeakSet()
_callbacks: list[Callable[[], None]] = []
#: The parent's connections, kept referenced in the child so that no finalizer closes them.
_inherited: list[Any] = []


def register(holder: ForkAware) -> None:
    """Reset ``holder`` in every child process."""
    _holders.add(holder)


def after_fork(callback: Callable[[], None]) -> Callable[[], None]:
    """Run ``callback`` in every child, before the holders reset (for module-level locks)."""
    _callbacks.append(callback)
    return callback


def module_lock(namespace: dict[str, Any], name: str, make: Callable[[], L]) -> L:
    """A module's lock, ``namespace[name]`` (``namespace`` its ``globals()``), made anew in
    every child: a fork copies a lock another thread holds, held for good.

    Example:
        >>> import threading
        >>> space: dict = {}
        >>> module_lock(space, "_lock", threading.Lock) is space["_lock"]
        True
    """

    def renew() -> None:
        namespace[name] = make()

    after_fork(renew)
    namespace[name] = lock = make()
    return lock


def set_aside(*objects: Any) -> None:
    """Keep ``objects`` alive and untouched for the rest of this (child) process."""
    _inherited.extend(o for o in objects if o is not None)


def _in_child() -> None:
    for callback in _callbacks:
        callback()
    for holder in list(_holders):
        try:
            holder.after_fork()
        except Exception:  # one holder's failure must not leave the others shared
            logger.exception("resetting %r after fork failed", holder)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_in_child)
