"""The rules that keep facts current: confirm, supersede, accumulate, catch near-duplicates.

Pure functions over :class:`~.model.Fact` objects. A restated value is *confirmed*; a new
value of a single-valued attribute *supersedes* the current one (so at most one value is
current and validity windows never overlap); a multi-valued attribute accumulates; a
restated value with another ``since`` is a *correction*, the version believed before kept
in history, *retracted*, so what the memory believed then can still be asked
(:func:`believed`); a new attribute stating an existing fact's value in nearly the same
words is merged into that fact instead of stored twice.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from langgraph_checkpoint_agent_memory.memory.model import (
    Fact,
    default_statement,
    digest,
    fact_key,
    normalize_value,
)

if TYPE_CHECKING:  # numpy is loaded where it computes: reading needs neither it nor pydantic
    import numpy as np

    from langgraph_checkpoint_agent_memory.memory.candidates import FactCandidate

MAX_SOURCES = 20


@dataclass
class FactChanges:
    """What one extraction does to a scope's facts."""

    current: dict[str, Fact] = field(default_factory=dict)  # facts to write as current
    history: dict[str, Fact] = field(default_factory=dict)  # superseded versions, by history key
    added: list[str] = field(default_factory=list)
    confirmed: list[str] = field(default_factory=list)
    superseded: list[tuple[str, str]] = field(default_factory=list)  # (history key, new key)
    retired: list[tuple[str, str]] = field(default_factory=list)  # (history key, old key)
    corrected: list[tuple[str, str]] = field(default_factory=list)  # (history key, key)


def history_key(fact: Fact) -> str:
    return f"{fact.key}@{fact.valid_from:.6f}#{digest(normalize_value(fact.value), size=4)}"


#: ``similar(candidate, facts) -> key of the fact it duplicates, or None``
Similar = Callable[["FactCandidate", dict[str, Fact]], "str | None"]


def merge(
    facts: dict[str, Fact],
    candidates: list[FactCandidate],
    *,
    episode_key: str,
    now: float,
    similar: Similar | None = None,
    sources: Sequence[tuple[str, float]] | None = None,
    learned: float | None = None,
) -> FactChanges:
    """Apply ``candidates``, in order, to the current ``facts`` (by key; not modified), said
    in the episode ``episode_key`` at ``now``, or per candidate as ``sources`` give (``(episode
    key, when)``: a fact of the first of several episodes is valid from its time); a
    candidate's ``since`` overrides the time. ``learned``: transaction time (default ``now``)."""
    current = dict(facts)
    out = FactChanges()
    learned = now if learned is None else learned
    for i, c in enumerate(candidates):
        source, at = sources[i] if sources is not None else (episode_key, now)
        if c.valid_from is not None and c.valid_from <= learned:  # a date to come is no start
            at = c.valid_from
        attribute, value = c.attribute, normalize_value(c.value)
        multi = c.multi or any(f.multi for f in current.values() if f.attribute == attribute)
        if not any(f.attribute == attribute for f in current.values()) and similar is not None:
            # only the same value stated under another name is a duplicate: similar sentences
            # about different values ("item 5 is A", "item 50 is B") are different facts
            same_value = {k: f for k, f in current.items() if normalize_value(f.value) == value}
            twin = similar(c, same_value) if same_value else None
            if twin is not None:
                attribute, multi = current[twin].attribute, current[twin].multi
        key = fact_key(attribute, c.value, multi)
        old = current.get(key)
        if old is not None and normalize_value(old.value) == value:
            confirmed = Fact(**{**old.__dict__})
            confirmed.confirmations += 1
            confirmed.last_confirmed = max(old.last_confirmed, at)
            confirmed.importance = max(old.importance, c.importance)
            if source not in confirmed.source_episodes:
                confirmed.source_episodes = [*old.source_episodes, source][-MAX_SOURCES:]
            if c.valid_from is not None and at != old.valid_from and at == c.valid_from:
                # the version believed before, retracted: one per correction, never overwritten
                was = dataclasses.replace(old, key=f"{history_key(old)}!{learned:.6f}")
                was.retracted_at = learned
                out.history[was.key] = was
                out.corrected.append((was.key, key))
                confirmed.valid_from = c.valid_from
                confirmed.learned_at = learned
            current[key] = out.current[key] = confirmed
            out.confirmed.append(key)
            continue
        new = Fact(
            key=key,
            attribute=attribute,
            value=c.value,
            statement=c.statement or default_statement(attribute, c.value),
            multi=multi,
            importance=c.importance,
            valid_from=at,
            last_confirmed=at,
            source_episodes=[source],
            learned_at=learned,
        )
        if old is not None:  # single-valued, another value: supersede
            gone = dataclasses.replace(old, valid_to=at, ended_at=learned, superseded_by=c.value)
            gone.key = hkey = history_key(gone)
            out.history[hkey] = gone
            out.superseded.append((hkey, key))
            new.pinned = old.pinned
        else:
            out.added.append(key)
        current[key] = out.current[key] = new
    return out


def retire(facts: dict[str, Fact], attribute: str, value: str | None, *, now: float) -> FactChanges:
    """End the current facts of ``attribute`` (only the one of ``value`` when given): each
    moves to history with ``valid_to`` set and no ``superseded_by``."""
    out = FactChanges()
    wanted = normalize_value(value) if value is not None else None
    for key, fact in sorted(facts.items()):
        if fact.attribute != attribute:
            continue
        if wanted is not None and normalize_value(fact.value) != wanted:
            continue
        gone = dataclasses.replace(fact, valid_to=now, ended_at=now)
        gone.key = history_key(gone)
        out.history[gone.key] = gone
        out.retired.append((gone.key, key))
    return out


def believed(versions: Iterable[Fact], known_at: float | None = None) -> list[Fact]:
    """What the memory believed at ``known_at`` (transaction time): the versions it had
    learned by then and not yet retracted, each as recorded then (an end recorded later is
    unset: ``valid_to`` and ``superseded_by``). ``None``: what it believes now (every
    version not retracted).

    Example:
        >>> old = Fact("k", "city", "Paris", "", valid_from=1.0, learned_at=5.0)
        >>> [f.value for f in believed([old], known_at=4.0)]
        []
    """
    if known_at is None:
        return [fact for fact in versions if fact.retracted_at is None]
    out = []
    for fact in versions:
        if fact.learned > known_at or (
            fact.retracted_at is not None and fact.retracted_at <= known_at
        ):
            continue
        ended = fact.ended
        if ended is not None and ended > known_at:
            fact = dataclasses.replace(fact, valid_to=None, superseded_by=None)
        out.append(fact)
    return out


def known_at(versions: Iterable[Fact], when: float) -> list[Fact]:
    """The versions of facts begun by ``when`` (``valid_from <= when``), each as held then: one
    that ended later shows current (``valid_to``, ``superseded_by`` unset), not yet replaced."""
    return [
        dataclasses.replace(f, valid_to=None, superseded_by=None)
        if f.valid_to is not None and f.valid_to > when
        else f
        for f in versions
        if f.valid_from <= when
    ]


def held_at(versions: Iterable[Fact], when: float) -> list[Fact]:
    """The facts current at ``when`` (``valid_from <= when < valid_to``) as held then (see
    :func:`known_at`), of versions :func:`believed` at some moment. Of a single-valued
    attribute the value that began last holds: a correction that moved a value's start
    before its predecessor's recorded end wins from its new start."""
    held = [f for f in known_at(versions, when) if f.valid_to is None]
    latest: dict[str, Fact] = {}
    for f in held:
        if not f.multi:
            best = latest.get(f.attribute)
            if best is None or (f.valid_from, f.learned) > (best.valid_from, best.learned):
                latest[f.attribute] = f
    return [f for f in held if f.multi or latest[f.attribute] is f]


_WORD = re.compile(r"\w+", re.U)


def words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.casefold()) if len(w) > 1}


def jaccard(a: str, b: str) -> float:
    wa, wb = words(a), words(b)
    return len(wa & wb) / len(wa | wb) if wa and wb else 0.0


def by_words(threshold: float = 0.8) -> Similar:
    """Near-duplicates by word overlap: the fallback when no embedder is configured."""

    def similar(c: FactCandidate, facts: dict[str, Fact]) -> str | None:
        text = c.statement or f"{c.attribute} {c.value}"
        best, score = None, threshold
        for key, fact in facts.items():
            s = jaccard(text, fact.text())
            if s >= score and fact.attribute != c.attribute:
                best, score = key, s
        return best

    return similar


def by_vectors(
    candidate_vectors: dict[str, list[float]],
    fact_vectors: dict[str, np.ndarray],
    threshold: float = 0.92,
) -> Similar:
    """Near-duplicates by cosine similarity of the embeddings of what search indexes
    (:meth:`~.model.Fact.search_text`): ``candidate_vectors`` by the candidates' text."""
    import numpy as np

    keys = list(fact_vectors)
    matrix = np.stack([fact_vectors[k] for k in keys]) if keys else np.zeros((0, 1), "f4")
    norms = np.linalg.norm(matrix, axis=1) if keys else np.zeros(0)

    def similar(c: FactCandidate, facts: dict[str, Fact]) -> str | None:
        vector = candidate_vectors.get(c.search_text())
        if vector is None or not keys:
            return None
        q = np.asarray(vector, dtype="f4")
        sims = (matrix @ q) / np.where(norms == 0, 1.0, norms * (np.linalg.norm(q) or 1.0))
        for i in np.argsort(-sims):
            if sims[i] < threshold:
                return None
            key = keys[int(i)]
            if key in facts and facts[key].attribute != c.attribute:
                return key
        return None

    return similar
