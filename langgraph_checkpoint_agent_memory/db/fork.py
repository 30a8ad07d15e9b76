"""What a forked child must not share with its parent: open connections, locks, threads.

A child process (``os.fork``: a gunicorn ``--preload`` worker, a Celery prefork worker, a
``multiprocessing`` fork) inherits its parent's open connections, which are the parent's own
sockets and SQLite file handles, and its locks in whatever state other threads left them,
but none of its threads. Using an inherited connection from the child mixes two processes'
traffic on one PostgreSQL session or breaks SQLite's locking; closing it in the child ends the
parent's session too (psycopg sends Terminate; SQLite may checkpoint and delete a log the
parent still writes). So the objects that hold connections, locks or sweeper threads register
here, and in a child each one sets its inherited connections aside, never to be closed, and
starts afresh: connections open on first use and sweepers restart on the next write, as in
any new process. A connection or pool the caller passed in stays the caller's to replace.
"""

from __future__ import annotations

import logging
import os
import weakref
from collections.abc import Callable
from typing import Any, Protocol

logger = logging.getLogger(__name__)


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
    """Run ``callback`` in every child, before the registered objects reset: for module-level
    locks, which another thread of the parent may hold at the moment of the fork (the child
    would wait on them forever)."""
    _callbacks.append(callback)
    return callback


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
