"""The rows a change of a scope's memory writes, decided inside the transaction that
writes them (consolidation and the memory tools alike: a :class:`Decider` is called with
the facts the plan read); and recording a turn as a pending episode.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from langchain_core.messages import BaseMessage, convert_to_messages
from langchain_core.prompt_values import PromptValue

from langgraph_checkpoint_agent_memory.db import memory as sqlm
from langgraph_checkpoint_agent_memory.db import memory_jobs as jobsql
from langgraph_checkpoint_agent_memory.db.database import Batch, Plan
from langgraph_checkpoint_agent_memory.errors import InvalidValueError
from langgraph_checkpoint_agent_memory.memory import facts as F
from langgraph_checkpoint_agent_memory.memory.context import MemoryContext
from langgraph_checkpoint_agent_memory.memory.decay import log_importance
from langgraph_checkpoint_agent_memory.memory.extract import messages_as_dicts
from langgraph_checkpoint_agent_memory.memory.model import (
    MAX_EPISODE_KEY,
    MAX_THREAD_ID,
    Episode,
    Fact,
    FactCandidate,
    Scope,
    ScopeLike,
    as_timestamp,
    checked_identifier,
    lexical_text,
    normalize_attribute,
)
from langgraph_checkpoint_agent_memory.memory.nodes import turn_key
from langgraph_checkpoint_agent_memory.memory.settings import RecordOptions


@dataclass(frozen=True)
class StoredFacts:
    """A scope's current facts (and their vectors, by key) as the transaction changing them read."""

    rows: list[sqlm.StoredRow]
    vectors: dict[str, bytes] = field(default_factory=dict)

    def current(self) -> dict[str, Fact]:
        return {r.key: Fact.from_value(r.key, r.value) for r in self.rows}


@dataclass(frozen=True)
class Said:
    """Facts said to be true now, to merge into a scope's current facts (``vectors`` by search
    text; ``sources``: per candidate, ``(episode key, when)`` for ``episode_key`` and ``when``)."""

    candidates: list[FactCandidate]
    vectors: dict[str, list[float]]
    episode_key: str
    when: float
    sources: Sequence[tuple[str, float]] | None = None


@dataclass(frozen=True)
class FactWrites:
    """What a change decided: the rows to write, and what changed among the facts."""

    writes: jobsql.Writes
    changes: F.FactChanges


@dataclass
class Decider:
    """The callback a fact-changing plan calls with the facts it read; it keeps what it
    decided last (the plan returns only the rows)."""

    decide: Callable[[StoredFacts], FactWrites]
    decided: FactWrites | None = None

    def __call__(self, rows: list[sqlm.StoredRow], vectors: dict[str, bytes]) -> jobsql.Writes:
        self.decided = self.decide(StoredFacts(rows, vectors))
        return self.decided.writes


@dataclass
class RowWriter:
    """Adds one scope's store item rows and decay rows (updated ``now``) to ``writes``."""

    writes: jobsql.Writes
    scope_key: str
    now: float

    def item(self, prefix: str, key: str, value: dict[str, Any], created: float, doc: str) -> None:
        self.writes.items.append(
            item_row(prefix, key, value, created=created, updated=self.now, doc=doc)
        )

    def decay(
        self,
        prefix: str,
        key: str,
        importance: float,
        at: float,
        pinned: bool,
        log: float | None = None,
    ) -> None:
        """A decay row; ``log``: the stored logarithm of the importance, if any."""
        self.writes.decay.append(
            {
                "prefix": prefix,
                "key": key,
                "scope": self.scope_key,
                "log_importance": log_importance(importance) if log is None else log,
                "reinforced_at": at,
                "pinned": int(pinned),
            }
        )

    def vector(self, prefix: str, key: str, vector: bytes) -> None:
        row = {"prefix": prefix, "key": key, "field": "text#0", "vector": vector}
        self.writes.vectors.append(row)


def item_row(
    prefix: str, key: str, value: dict[str, Any], *, created: float, updated: float, doc: str
) -> dict[str, Any]:
    """A store item row of memory's (no TTL): ``value`` as compact JSON."""
    return {
        "prefix": prefix,
        "key": key,
        "value": json.dumps(value, ensure_ascii=False, separators=(",", ":")),
        "created_at": created,
        "updated_at": updated,
        "ttl_minutes": None,
        "expires_at": None,
        "doc": doc,
    }


def as_blob(vector: Sequence[float]) -> bytes:
    """A vector as the store keeps it: little-endian float32."""
    return np.asarray(vector, dtype="<f4").tobytes()


def apply_facts(
    context: MemoryContext, scope: Scope, out: RowWriter, stored: StoredFacts, said: Said
) -> F.FactChanges:
    """Merge what was ``said`` into the scope's ``stored`` facts and add the rows that
    change to ``out``: the one way facts are confirmed, superseded, accumulated or merged as
    near-duplicates, by consolidation and by the memory tools alike."""
    s = context.settings
    fact_vectors = {k: np.frombuffer(v, dtype="<f4") for k, v in stored.vectors.items()}
    if said.vectors and fact_vectors:
        similar = F.by_vectors(said.vectors, fact_vectors, s.near_duplicate_threshold)
    else:
        similar = F.by_words(s.near_duplicate_words)
    changes = F.merge(
        stored.current(),
        said.candidates,
        episode_key=said.episode_key,
        now=said.when,
        similar=similar,
        sources=said.sources,
        learned=out.now,
    )
    facts_prefix = context.prefix(scope, "facts")
    for key, fact in changes.current.items():
        out.item(facts_prefix, key, fact.to_value(), fact.valid_from, lexical_text(fact))
        out.decay(facts_prefix, key, fact.importance, said.when, fact.pinned)
        # the embedding of the fact's text (its date is in the lexical text only), when a
        # candidate said it exactly; else a confirmed fact keeps the vector it has
        vector = said.vectors.get(fact.search_text())
        if vector is not None:
            out.vector(facts_prefix, key, as_blob(vector))
        elif key in changes.confirmed and key in stored.vectors:
            out.vector(facts_prefix, key, stored.vectors[key])
    write_history(context, scope, out, changes, said.when)
    return changes


def write_history(
    context: MemoryContext, scope: Scope, out: RowWriter, changes: F.FactChanges, when: float
) -> None:
    """Add the rows of the facts ``changes`` moved to history (superseded or retired)."""
    history_prefix = context.prefix(scope, "history")
    for key, fact in changes.history.items():
        out.item(history_prefix, key, fact.to_value(), fact.valid_from, lexical_text(fact))
        out.decay(history_prefix, key, fact.importance, when, fact.pinned)


def checked_messages(messages: Any) -> list[BaseMessage]:
    """``messages`` (an iterable of what ``convert_to_messages`` reads, or a ``PromptValue``)
    as LangChain messages; an :class:`InvalidValueError` when they are not."""
    if isinstance(messages, PromptValue):
        return messages.to_messages()
    if isinstance(messages, (str, bytes, Mapping, BaseMessage)) or not isinstance(
        messages, Iterable
    ):
        raise InvalidValueError(
            f"messages must be a list of messages, got {type(messages).__name__} "
            f"{str(messages)[:40]!r}: wrap one message in a list, e.g. [('user', text)]"
        )
    out: list[BaseMessage] = []
    for i, message in enumerate(messages):
        try:
            out.extend(convert_to_messages([message]))
        except (ValueError, TypeError, KeyError, NotImplementedError) as exc:
            why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise InvalidValueError(
                f"messages[{i}] is not a message LangChain can read ({why}); give a "
                "message, a (role, text) pair or a {'role', 'content'} dict with text content"
            ) from None
    return out


def record_plan(
    context: MemoryContext,
    scope: ScopeLike,
    messages: Sequence[BaseMessage],
    options: RecordOptions,
    *,
    reinforcements: Callable[[], Sequence[dict[str, Any]]] = list,
) -> Plan[str | None]:
    """Store ``messages`` as a pending episode of ``scope`` (once per key), in one transaction with
    recall's queued reinforcements (taken only for an episode); its key, or ``None`` if empty."""
    unknown = sorted(set(options) - set(RecordOptions.__annotations__))
    if unknown:  # a misspelled option would otherwise be ignored without a word
        raise TypeError(
            f"record got unexpected keyword argument(s): {', '.join(unknown)}; "
            f"known: {', '.join(RecordOptions.__annotations__)}"
        )
    thread_id, key, at = options.get("thread_id"), options.get("key"), options.get("occurred_at")
    if thread_id is not None:
        thread_id = checked_identifier(thread_id, "thread_id", MAX_THREAD_ID)
    if key is not None:
        key = checked_identifier(key, "key", MAX_EPISODE_KEY)
    occurred_at = None if at is None else as_timestamp(at, "occurred_at", InvalidValueError)
    s = Scope.of(scope)
    context.namespace(s, "episodes")  # refuses a scope too long to store
    dicts = [m for m in messages_as_dicts(messages) if m["content"] or m["role"] != "tool"]
    if not dicts:
        return None
    now = context.clock()
    when = now if occurred_at is None else occurred_at
    ep_key = key or turn_key(thread_id, 0, list(messages))
    episode = Episode(ep_key, dicts, when, thread_id=thread_id)
    prefix = context.prefix(s, "episodes")
    item = item_row(
        prefix, ep_key, episode.to_value(), created=when, updated=now, doc=lexical_text(episode)
    )
    yield from sqlm.record_plan(
        context.sql,
        scope=s.key,
        root=context.settings.namespace_root,
        item=item,
        thread_id=thread_id,
        now=now,
        reinforce=list(reinforcements()),
    )
    return ep_key


def pin_plan(context: MemoryContext, scope: ScopeLike, attribute: str, pinned: bool) -> Plan[int]:
    s = Scope.of(scope)
    prefix = context.prefix(s, "facts")
    rows = yield from sqlm.read_plan(context.sql, prefix, context.clock())
    name = normalize_attribute(attribute)
    hits = [r for r in rows if r.value.get("attribute") == name or r.key == attribute]
    if not hits:
        return 0
    out = RowWriter(jobsql.Writes(), s.key, context.clock())
    for r in hits:
        value = {**r.value, "pinned": pinned}
        out.item(prefix, r.key, value, r.created_at, lexical_text(Fact.from_value(r.key, value)))
        at = out.now if r.reinforced_at is None else r.reinforced_at
        importance = float(r.value.get("importance", 0.5))
        out.decay(prefix, r.key, importance, at, pinned, r.log_importance)
    items = out.writes.items
    yield from sqlm.seal_items_plan(context.sql, items)
    locks = context.sql.lock_scopes([s.key])
    writes = [*locks, *context.sql.item_writes(items), context.sql.decay_stmt(out.writes.decay)]
    yield Batch(writes, write=True)
    return len(hits)
