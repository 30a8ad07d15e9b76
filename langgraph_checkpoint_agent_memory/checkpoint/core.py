"""Checkpoint logic with no storage and no I/O, shared by every saver of the package: what a
checkpoint tuple is, how ids are checked, which ancestors a ``DeltaChannel`` still needs."""

from __future__ import annotations

import math
import random
import sys
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import DeltaChannelHistory, PendingWrite

from langgraph_checkpoint_agent_memory.errors import ConfigurationError, InvalidValueError

#: The longest ``thread_id`` and ``checkpoint_ns``, and ``checkpoint_id``, in characters: the
#: column sizes on PostgreSQL and SAP HANA, kept by every saver so that one input gets one
#: outcome everywhere.
MAX_ID = 255
MAX_CHECKPOINT_ID = 64


def thread_coordinates(config: RunnableConfig | None) -> tuple[str, str, str | None]:
    """Return ``(thread_id, checkpoint_ns, checkpoint_id)`` or say precisely what is wrong."""
    try:  # the hot path: a well-formed config costs a few lookups and length checks
        configurable = config["configurable"]  # type: ignore[index]
        thread_id = configurable["thread_id"]
        ns = configurable.get("checkpoint_ns") or ""
        checkpoint_id = configurable.get("checkpoint_id")
        if (
            type(thread_id) is str
            and 0 < len(thread_id) <= MAX_ID
            and type(ns) is str
            and len(ns) <= MAX_ID
            and (checkpoint_id is None or type(checkpoint_id) is str)
            and "\x00" not in thread_id
            and "\x00" not in ns
            and thread_id.isascii()
            and ns.isascii()
            and (
                checkpoint_id is None
                or (
                    len(checkpoint_id) <= MAX_CHECKPOINT_ID
                    and "\x00" not in checkpoint_id
                    and checkpoint_id.isascii()
                )
            )
        ):
            return thread_id, ns, checkpoint_id
    except (KeyError, TypeError):
        pass
    _check_config(config, "config")
    configurable = (config or {}).get("configurable") or {}
    thread_id = configurable.get("thread_id")
    if thread_id is None or thread_id == "":
        raise ConfigurationError(
            "config['configurable']['thread_id'] is required by the checkpointer; "
            "pass e.g. {'configurable': {'thread_id': 'user-42'}} to invoke()"
        )
    ns = configurable.get("checkpoint_ns") or ""
    checkpoint_id = configurable.get("checkpoint_id")
    _check_text(ns, "checkpoint_ns", MAX_ID)
    if checkpoint_id is not None:
        _check_text(checkpoint_id, "checkpoint_id", MAX_CHECKPOINT_ID)
    return checked_thread_id(thread_id), ns, checkpoint_id


def list_coordinates(config: RunnableConfig | None) -> tuple[str | None, str | None, str | None]:
    """:func:`thread_coordinates` of a ``list`` config, each ``None`` where it is left open."""
    _check_config(config, "list() config")
    configurable = (config or {}).get("configurable") or {}
    thread_id, ns, cid = (
        configurable.get(k) for k in ("thread_id", "checkpoint_ns", "checkpoint_id")
    )
    if ns is not None:
        _check_text(ns, "checkpoint_ns", MAX_ID)
    if cid is not None:
        _check_text(cid, "checkpoint_id", MAX_CHECKPOINT_ID)
    return (None if thread_id is None else checked_thread_id(thread_id)), ns, cid


def writes_coordinates(config: RunnableConfig) -> tuple[str, str, str]:
    """:func:`thread_coordinates` of a ``put_writes`` config, which must name its checkpoint."""
    thread_id, ns, checkpoint_id = thread_coordinates(config)
    if checkpoint_id is None:
        raise ConfigurationError(
            "put_writes needs config['configurable']['checkpoint_id'] (the checkpoint the "
            "writes belong to)"
        )
    return thread_id, ns, checkpoint_id


def checked_before_id(before: RunnableConfig | None) -> str | None:
    """The checkpoint id of ``list(before=...)``, a string as every stored id is (or ``None``)."""
    if before is None:
        return None
    _check_config(before, "list() before")
    checkpoint_id = (before.get("configurable") or {}).get("checkpoint_id")
    if checkpoint_id is not None and not isinstance(checkpoint_id, str):
        raise InvalidValueError(
            "list() before['configurable']['checkpoint_id'] must be a string, got "
            f"{type(checkpoint_id).__name__} {checkpoint_id!r}"
        )
    return checkpoint_id


def checkpoint_id_of(checkpoint: Any) -> str:
    """The checked id of a checkpoint given to ``put`` (a LangGraph ``Checkpoint`` dict)."""
    try:
        checkpoint_id = checkpoint["id"]
    except (KeyError, TypeError, IndexError):
        raise InvalidValueError(
            "put() needs a checkpoint with an 'id' (a LangGraph Checkpoint, e.g. from "
            f"empty_checkpoint()), got {type(checkpoint).__name__} without one"
        ) from None
    return checked_checkpoint_id(checkpoint_id)


def _check_config(config: Any, name: str) -> None:
    if config is not None and not isinstance(config, Mapping):
        raise InvalidValueError(
            f"{name} must be a dict such as {{'configurable': {{'thread_id': 'user-42'}}}}, "
            f"got {type(config).__name__} {config!r}"
        )


def checked_checkpoint_id(checkpoint_id: Any) -> str:
    """A checkpoint's own id, checked as every backend can store it."""
    if (
        type(checkpoint_id) is str
        and len(checkpoint_id) <= MAX_CHECKPOINT_ID
        and "\x00" not in checkpoint_id
        and checkpoint_id.isascii()
    ):
        return checkpoint_id
    _check_text(checkpoint_id, "checkpoint_id", MAX_CHECKPOINT_ID)
    return str(checkpoint_id)


def checked_thread_id(thread_id: Any) -> str:
    """A thread id as stored: a string, or an int or UUID as text (else InvalidValueError)."""
    if (
        type(thread_id) is str
        and 0 < len(thread_id) <= MAX_ID
        and "\x00" not in thread_id
        and thread_id.isascii()
    ):
        return thread_id
    if isinstance(thread_id, uuid.UUID) or (
        isinstance(thread_id, int) and not isinstance(thread_id, bool)
    ):
        thread_id = str(thread_id)
    if thread_id == "":
        raise InvalidValueError("thread_id must not be empty")
    _check_text(thread_id, "thread_id", MAX_ID)
    return str(thread_id)


def _check_text(value: Any, name: str, longest: int) -> None:
    if not isinstance(value, str):
        raise InvalidValueError(
            f"config['configurable']['{name}'] must be a string, got "
            f"{type(value).__name__} {value!r}"
        )
    if len(value) > longest:
        raise InvalidValueError(
            f"config['configurable']['{name}'] is {len(value)} characters; at most {longest}"
        )
    from langgraph_checkpoint_agent_memory.text import unstorable  # loads the stemmers

    if why := unstorable(value):
        raise InvalidValueError(f"config['configurable']['{name}'] {why}")


def checkpoint_config(thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> RunnableConfig:
    """The config that names one stored checkpoint."""
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint_ns,
            "checkpoint_id": checkpoint_id,
        }
    }


def parent_config(
    thread_id: str, checkpoint_ns: str, parent_id: str | None
) -> RunnableConfig | None:
    return checkpoint_config(thread_id, checkpoint_ns, parent_id) if parent_id else None


class VersionCounter:
    """The package's savers' ``get_next_version``."""

    def get_next_version(self, current: str | None, channel: None) -> str:
        """The channel version after ``current``: a zero-padded counter and a random tail, the
        form LangGraph's savers use (an ``int`` version, as older checkpoints hold, counts too).

        Args:
            current: The current version (``None`` for a new channel).
            channel: Unused (LangGraph's signature).

        Example:
            >>> saver.get_next_version(None, None)[:32]
            '00000000000000000000000000000001'
            >>> saver.get_next_version("00000000000000000000000000000041.25", None)[:32]
            '00000000000000000000000000000042'
        """
        if current is None:
            counter = 0
        elif isinstance(current, int):
            counter = current
        else:
            counter = int(current.split(".")[0])
        return f"{counter + 1:032}.{random.random():016}"


#: Whole numbers a ``list`` filter may hold: the 64-bit range SQLite (and memory) keeps.
_INT_BOUND = 2**63


def checked_filter(filter: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """``filter`` of ``list(filter=...)`` if every backend compares it alike: string keys, and
    no NUL, lone surrogate, non-finite number or whole number beyond 64 bits, nested or not."""
    if not filter:
        return filter
    if not isinstance(filter, Mapping):
        raise InvalidValueError(f"list() filter must be a dict, got {type(filter).__name__}")
    for key, value in filter.items():
        if not isinstance(key, str):
            raise InvalidValueError(
                f"list() filter keys are metadata keys, strings; got {type(key).__name__} {key!r}"
            )
        if why := _json_problem(key, value):
            raise InvalidValueError(f"list() filter on {key!r}: {why}")
    return filter


def checked_limit(limit: Any) -> int | None:
    """``limit`` of ``list(limit=...)`` as a whole number (``2.0`` is 2), or ``None``: every
    saver refuses ``2.5`` alike (SQLite's ``LIMIT`` took it as a datatype mismatch)."""
    if limit is None or (isinstance(limit, int) and not isinstance(limit, bool)):
        return limit
    if isinstance(limit, float) and limit.is_integer():
        return int(limit)
    raise InvalidValueError(f"list() limit must be a whole number or None, got {limit!r}")


def slice_stop(limit: int) -> int:
    """How many items a checked ``limit`` takes from an iterator: a negative limit none, one
    beyond ``sys.maxsize`` (which ``islice`` refuses) all."""
    return min(max(limit, 0), sys.maxsize)


def check_metadata(metadata: Mapping[str, Any]) -> None:
    """Refuse, naming the key, metadata holding what :func:`checked_filter` refuses."""
    for key, value in metadata.items():
        if why := _json_problem(key, value):
            raise InvalidValueError(f"checkpoint metadata {key!r}: {why}")


def _json_problem(key: Any, value: Any) -> str | None:
    """What makes ``key: value`` of a filter or of metadata unusable, or ``None``."""
    from langgraph_checkpoint_agent_memory.text import unstorable  # loads the stemmers

    stack: list[Any] = [key, value]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            if why := unstorable(node):
                return f"{node!r} {why}"
        elif isinstance(node, float) and not math.isfinite(node):
            return f"{node!r} is not a finite number (no metadata holds one on every backend)"
        elif type(node) is int and not -_INT_BOUND <= node < _INT_BOUND:
            return f"{node} is beyond the 64-bit whole numbers metadata holds on every backend"
        elif isinstance(node, Mapping):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, (list, tuple)):
            stack.extend(node)
    return None


def metadata_matches(metadata: Mapping[str, Any], filter: Mapping[str, Any] | None) -> bool:
    """LangGraph's ``list(filter=...)`` rule: every key equal, a missing key never matches."""
    if not filter:
        return True
    missing = object()
    return all(metadata.get(k, missing) == v for k, v in filter.items())


class Stored(Protocol):
    """A stored checkpoint, as far as its place in the history goes."""

    @property
    def parent_id(self) -> str | None: ...


def ancestors(rows: Mapping[str, Stored], parent_id: str | None) -> Iterator[str]:
    """``parent_id`` and its ancestors among ``rows``, nearest first."""
    while parent_id is not None and parent_id in rows:
        yield parent_id
        parent_id = rows[parent_id].parent_id


def checkpoints_to_keep(
    rows: Mapping[str, Stored],
    keep_last: int,
    metadata_of: Callable[[str], Mapping[str, Any]],
    has_value: Callable[[str, str], bool],
) -> set[str]:
    """The last ``keep_last`` checkpoint ids and, transitively, each one's ancestors up to the
    nearest seeding each of its ``DeltaChannel`` channels (else they rebuild empty, silently)."""
    keep: set[str] = set()
    pending = sorted(rows, reverse=True)[:keep_last]
    while pending:
        checkpoint_id = pending.pop()
        if checkpoint_id in keep:
            continue
        keep.add(checkpoint_id)
        remaining = set(metadata_of(checkpoint_id).get("counters_since_delta_snapshot") or ())
        for parent in ancestors(rows, rows[checkpoint_id].parent_id):
            if not remaining:
                break
            pending.append(parent)
            remaining = {ch for ch in remaining if not has_value(parent, ch)}
    return keep


def delta_history(
    chain: Sequence[str],
    channels: Sequence[str],
    has_value: Callable[[str, str], bool],
    value_of: Callable[[str, str], Any],
    writes_of: Callable[[str], Sequence[PendingWrite]],
) -> dict[str, DeltaChannelHistory]:
    """``get_delta_channel_history`` over ancestors ``chain`` (nearest first): each channel's
    writes (``writes_of``, sorted) of every ancestor up to the nearest storing a value (seed)."""
    collected: dict[str, list[PendingWrite]] = {c: [] for c in channels}
    seeds: dict[str, Any] = {}
    remaining = set(channels)
    for checkpoint_id in chain:
        if not remaining:
            break
        terminated = {ch for ch in remaining if has_value(checkpoint_id, ch)}
        for write in reversed(writes_of(checkpoint_id)):
            if write[1] in remaining:
                collected[write[1]].append(write)
        for ch in terminated:
            seeds[ch] = value_of(checkpoint_id, ch)
            remaining.discard(ch)
    out: dict[str, DeltaChannelHistory] = {ch: {"writes": collected[ch][::-1]} for ch in channels}
    for ch, seed in seeds.items():
        out[ch]["seed"] = seed
    return out
