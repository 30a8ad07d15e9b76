"""Consolidation: claim a scope's pending episodes, extract, apply in one transaction.

One job, written once as a generator of *steps* (a database plan, a search, an embedding, an
extractor call) so the synchronous and the asynchronous API run the same code (see
:func:`run_steps` and :func:`arun_steps`)::

    claim (lease the scope; FOR UPDATE SKIP LOCKED / BEGIN IMMEDIATE)
      -> read the episodes, search the scope's relevant facts (top-k)
      -> extractor(episodes, facts)                       outside any transaction
      -> one summary per episode, or the job fails
      -> one transaction: check the lease, read current facts, write facts, history,
         episode summaries, "done" marks, the job record; release the lease
    or, on any failure: record the failed job with its error, release the scope with a
    back-off, keep the episodes pending (parked after ``max_attempts`` failures in a row)

A job is identified by its scope, its episode keys and the extractor version, never by
content: two episodes saying the same words are two episodes, and a job applied once is
not applied again.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Awaitable, Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from langgraph_checkpoint_agent_memory.db import memory as sqlm
from langgraph_checkpoint_agent_memory.db import memory_jobs as jobsql
from langgraph_checkpoint_agent_memory.db.database import Plan, adrive, drive
from langgraph_checkpoint_agent_memory.memory import facts as F
from langgraph_checkpoint_agent_memory.memory.decay import log_importance
from langgraph_checkpoint_agent_memory.memory.extract import (
    ExtractionRequest,
    Extractor,
    episode_summaries,
)
from langgraph_checkpoint_agent_memory.memory.model import (
    Episode,
    EpisodeSummary,
    Extraction,
    Fact,
    FactCandidate,
    Scope,
    digest,
)

logger = logging.getLogger(__name__)


# -- steps ---------------------------------------------------------------------------------


@dataclass
class RunPlan:
    plan: Plan[Any]


@dataclass
class Extract:
    extractor: Extractor
    request: ExtractionRequest


@dataclass
class Embed:
    texts: list[str]
    query: bool = False  # embed as a search query (some models embed queries differently)


@dataclass
class Search:
    namespace: tuple[str, ...]
    query: str
    limit: int


Step = RunPlan | Extract | Embed | Search
T = TypeVar("T")
#: Steps that end with a value of type ``T``.
Steps = Generator[Step, Any, T]


def run_steps(steps: Steps[T], store: Any, run: Callable[[Plan[Any]], Any]) -> T:
    """Drive ``steps`` synchronously; ``run`` runs a plan."""

    def execute(step: Step) -> Any:
        if isinstance(step, RunPlan):
            return run(step.plan)
        if isinstance(step, Extract):
            return step.extractor.extract(step.request)
        if isinstance(step, Embed):
            e = store.embeddings
            if step.query:
                return [e.embed_query(t) for t in step.texts]
            return e.embed_documents(step.texts) if step.texts else []
        return store.search(step.namespace, query=step.query, limit=step.limit)

    return drive(steps, execute)


async def arun_steps(steps: Steps[T], store: Any, run: Callable[[Plan[Any]], Awaitable[Any]]) -> T:
    """Drive ``steps`` on the event loop (blocking drivers move to threads); ``run`` runs a
    plan."""

    async def execute(step: Step) -> Any:
        if isinstance(step, RunPlan):
            return await run(step.plan)
        if isinstance(step, Extract):
            return await step.extractor.aextract(step.request)
        if isinstance(step, Embed):
            e = store.embeddings
            if step.query:
                return [await e.aembed_query(t) for t in step.texts]
            return await e.aembed_documents(step.texts) if step.texts else []
        return await store.asearch(step.namespace, query=step.query, limit=step.limit)

    return await adrive(steps, execute)


# -- one job -------------------------------------------------------------------------------


@dataclass
class JobResult:
    """What one job did."""

    scope: str
    job_id: str
    status: str  # completed | failed | parked | lost
    episodes: int
    added: list[str] = field(default_factory=list)
    confirmed: list[str] = field(default_factory=list)
    superseded: list[tuple[str, str]] = field(default_factory=list)
    error: str | None = None


@dataclass
class Report:
    """What a :meth:`AgentMemory.consolidate` call did, summed over its jobs."""

    jobs: list[JobResult] = field(default_factory=list)

    def _count(self, status: str) -> int:
        return sum(1 for j in self.jobs if j.status == status)

    @property
    def completed(self) -> int:
        return self._count("completed")

    @property
    def failed(self) -> int:
        return self._count("failed") + self._count("parked")

    @property
    def episodes(self) -> int:
        return sum(j.episodes for j in self.jobs if j.status == "completed")

    @property
    def added(self) -> int:
        return sum(len(j.added) for j in self.jobs)

    @property
    def confirmed(self) -> int:
        return sum(len(j.confirmed) for j in self.jobs)

    @property
    def superseded(self) -> int:
        return sum(len(j.superseded) for j in self.jobs)

    def as_dict(self) -> dict[str, int]:
        return {
            "jobs": len(self.jobs),
            "completed": self.completed,
            "failed": self.failed,
            "episodes": self.episodes,
            "added": self.added,
            "confirmed": self.confirmed,
            "superseded": self.superseded,
        }


def job_id(scope: str, episode_keys: list[str], extractor_version: str) -> str:
    return digest(scope, extractor_version, *sorted(episode_keys), size=20)


def job_steps(
    memory: Any, *, scope: str | None = None, skip: tuple[str, ...] = ()
) -> Steps[JobResult | None]:
    """Claim one scope and consolidate a batch of its episodes; ``None`` when idle."""
    s = memory.settings
    sql = memory._sql
    started = memory._clock()
    owner = uuid.uuid4().hex
    claim = yield RunPlan(
        jobsql.claim_plan(
            sql,
            owner=owner,
            now=started,
            lease_seconds=s.lease_seconds,
            limit=s.max_episodes_per_job,
            scope=scope,
            skip=skip,
        )
    )
    if claim is None:
        return None
    the_scope = Scope.parse(claim.scope)
    extractor: Extractor = memory.extractor
    jid = job_id(claim.scope, claim.episode_keys, extractor.version)
    episodes_ns = memory.namespace(the_scope, "episodes")
    try:
        rows = yield RunPlan(sqlm.read_plan(sql, sqlm.ns(episodes_ns), started, claim.episode_keys))
        episodes = sorted(
            (Episode.from_value(r.key, r.value) for r in rows),
            key=lambda e: (e.occurred_at, e.key),
        )
        extraction: Extraction | None = None
        summaries: list[EpisodeSummary] = []
        relevant: list[Fact] = []
        candidate_vectors: dict[str, list[float]] = {}
        episode_vectors: list[list[float]] = []
        if episodes:
            query = " ".join(
                m.get("content", "")
                for e in episodes
                for m in e.messages
                if m.get("role") == "user"
            )[:2000]
            found = yield Search(memory.namespace(the_scope, "facts"), query, s.relevant_facts)
            relevant = [Fact.from_value(i.key, i.value) for i in found]
            extraction = yield Extract(extractor, ExtractionRequest(the_scope, episodes, relevant))
            # an answer that does not summarise every episode on its own fails the job
            summaries = episode_summaries(extraction, episodes)
            if memory.store.embeddings is not None:
                texts = [c.search_text() for c in extraction.facts]
                ep_texts = [
                    Episode(**{**e.__dict__, "summary": s.summary}).text()
                    for e, s in zip(episodes, summaries, strict=True)
                ]
                vectors = yield Embed(texts + ep_texts)
                candidate_vectors = dict(zip(texts, vectors[: len(texts)], strict=True))
                episode_vectors = list(vectors[len(texts) :])
    except Exception as exc:  # the extractor's, the model's, anything: the job fails
        return (yield from _fail(memory, claim, jid, str(exc) or type(exc).__name__, started))

    now = memory._clock()
    changes: list[F.FactChanges] = []

    def decide(rows: list[sqlm.StoredRow], vectors: dict[str, bytes]) -> jobsql.Writes:
        return _writes(
            memory,
            the_scope,
            claim.scope,
            episodes,
            extraction,
            summaries,
            rows,
            vectors,
            candidate_vectors,
            episode_vectors,
            now,
            changes,
        )

    try:
        writes = yield RunPlan(
            jobsql.apply_plan(
                sql,
                claim,
                job_id=jid,
                episode_keys=claim.episode_keys,
                extractor_version=extractor.version,
                facts_prefix=sqlm.ns(memory.namespace(the_scope, "facts")),
                now=now,
                read_vectors=memory.store.embeddings is not None,
                decide=decide,
                started_at=started,
            )
        )
    except Exception as exc:
        logger.warning("consolidation of %s could not be applied: %s", claim.scope, exc)
        try:
            yield from _fail(memory, claim, jid, f"apply failed: {exc}", started)
        except Exception:  # the database is gone: the lease expires and others retry
            pass
        raise
    if writes is None:
        return JobResult(claim.scope, jid, "lost", len(claim.episode_keys))
    change = changes[0] if changes else F.FactChanges()
    return JobResult(
        claim.scope,
        jid,
        "completed",
        len(claim.episode_keys),
        added=change.added,
        confirmed=change.confirmed,
        superseded=change.superseded,
    )


def _fail(
    memory: Any, claim: jobsql.Claim, jid: str, error: str, started: float
) -> Steps[JobResult]:
    s = memory.settings
    outcome = yield RunPlan(
        jobsql.fail_plan(
            memory._sql,
            claim,
            job_id=jid,
            episode_keys=claim.episode_keys,
            extractor_version=memory.extractor.version,
            error=error,
            now=memory._clock(),
            started_at=started,
            max_attempts=s.max_attempts,
            backoff_seconds=s.backoff_seconds,
        )
    )
    logger.warning("consolidation job for %s failed (%s): %s", claim.scope, outcome, error)
    status = {"retry": "failed", "parked": "parked", "lost": "lost"}[outcome]
    return JobResult(claim.scope, jid, status, len(claim.episode_keys), error=error)


@dataclass
class RowWriter:
    """Adds one scope's store item rows and decay rows to a transaction's :class:`Writes`.

    Args:
        writes: Where the rows go.
        scope_key: The scope the decay rows belong to (``user=alice``).
        now: The rows' ``updated_at``.
    """

    writes: jobsql.Writes
    scope_key: str
    now: float

    def item(self, prefix: str, key: str, value: dict[str, Any], created: float, doc: str) -> None:
        """An item row (a fact, a past fact or an episode)."""
        self.writes.items.append(
            {
                "prefix": prefix,
                "key": key,
                "value": json.dumps(value, ensure_ascii=False, separators=(",", ":")),
                "created_at": created,
                "updated_at": self.now,
                "ttl_minutes": None,
                "expires_at": None,
                "doc": doc,
            }
        )

    def decay(self, prefix: str, key: str, importance: float, at: float, pinned: bool) -> None:
        """The decay row of an item: its importance, reinforced ``at``."""
        self.writes.decay.append(
            {
                "prefix": prefix,
                "key": key,
                "scope": self.scope_key,
                "log_importance": log_importance(importance),
                "reinforced_at": at,
                "pinned": int(pinned),
            }
        )


def apply_facts(
    memory: Any,
    scope: Scope,
    out: RowWriter,
    rows: list[sqlm.StoredRow],
    stored_vectors: dict[str, bytes],
    candidates: list[FactCandidate],
    candidate_vectors: dict[str, list[float]],
    *,
    episode_key: str,
    when: float,
    sources: Sequence[tuple[str, float]] | None = None,
) -> F.FactChanges:
    """Merge ``candidates`` into the scope's current facts (``rows``, read inside the
    transaction that writes) and add the rows that change to ``out``: the one way facts are
    confirmed, superseded, accumulated or merged as near-duplicates, by consolidation and by
    the memory tools alike.

    Args:
        memory: The :class:`AgentMemory` (its settings and namespaces).
        scope: Whose facts.
        out: Collects the rows to write.
        rows: The scope's current fact items.
        stored_vectors: Their vectors, by key (empty without an embedder).
        candidates: What is true now, in the order it was said.
        candidate_vectors: The candidates' vectors, by their search text.
        episode_key: What the facts come from (a source of each fact).
        when: When they became true (and when the decay clock of each restarts).
        sources: Per candidate, ``(episode key, when)`` instead of ``episode_key`` and
            ``when`` (see :func:`~.facts.merge`).

    Returns:
        What changed, by key.
    """
    s = memory.settings
    current = {r.key: Fact.from_value(r.key, r.value) for r in rows}
    fact_vectors = {k: np.frombuffer(v, dtype="<f4") for k, v in stored_vectors.items()}
    if candidate_vectors and fact_vectors:
        similar: F.Similar | None = F.by_vectors(
            candidate_vectors, fact_vectors, s.near_duplicate_threshold
        )
    else:
        similar = F.by_words(s.near_duplicate_words)
    changes = F.merge(
        current, candidates, episode_key=episode_key, now=when, similar=similar, sources=sources
    )
    facts_prefix = sqlm.ns(memory.namespace(scope, "facts"))
    for key, fact in changes.current.items():
        text = fact.search_text()
        out.item(facts_prefix, key, fact.to_value(), fact.valid_from, text)
        out.decay(facts_prefix, key, fact.importance, when, fact.pinned)
        # the embedding of the text just indexed, when a candidate said it exactly; else a
        # confirmed fact keeps the vector it has
        vector = candidate_vectors.get(text)
        if vector is not None:
            blob: bytes | None = np.asarray(vector, dtype="<f4").tobytes()
        elif key in changes.confirmed:
            blob = stored_vectors.get(key)
        else:
            blob = None
        if blob is not None:
            out.writes.vectors.append(
                {"prefix": facts_prefix, "key": key, "field": "text#0", "vector": blob}
            )
    write_history(memory, scope, out, changes, when)
    return changes


def write_history(
    memory: Any, scope: Scope, out: RowWriter, changes: F.FactChanges, when: float
) -> None:
    """Add the rows of the facts ``changes`` moved to history (superseded or retired)."""
    history_prefix = sqlm.ns(memory.namespace(scope, "history"))
    for key, fact in changes.history.items():
        out.item(history_prefix, key, fact.to_value(), fact.valid_from, fact.search_text())
        out.decay(history_prefix, key, fact.importance, when, fact.pinned)


def _writes(
    memory: Any,
    scope: Scope,
    scope_key: str,
    episodes: list[Episode],
    extraction: Extraction | None,
    summaries: list[EpisodeSummary],
    rows: list[sqlm.StoredRow],
    stored_vectors: dict[str, bytes],
    candidate_vectors: dict[str, list[float]],
    episode_vectors: list[list[float]],
    now: float,
    out: list[F.FactChanges],
) -> jobsql.Writes:
    """The rows a job writes, from the current facts read inside its transaction."""
    writes = jobsql.Writes()
    if extraction is None or not episodes:
        return writes
    when = max(e.occurred_at for e in episodes)
    # each fact dates from the episode that states it (the last one when it does not say),
    # applied in the order they were said
    stated = sorted(
        extraction.facts,
        key=lambda c: episodes[(c.episode or len(episodes)) - 1].occurred_at,
    )
    sources = [
        (e.key, e.occurred_at) for e in (episodes[(c.episode or len(episodes)) - 1] for c in stated)
    ]
    rows_out = RowWriter(writes, scope_key, now)
    changes = apply_facts(
        memory,
        scope,
        rows_out,
        rows,
        stored_vectors,
        stated,
        candidate_vectors,
        episode_key=episodes[-1].key,
        when=when,
        sources=sources,
    )
    out.append(changes)
    episodes_prefix = sqlm.ns(memory.namespace(scope, "episodes"))
    for i, (episode, summary) in enumerate(zip(episodes, summaries, strict=True)):
        done = Episode(
            **{
                **episode.__dict__,
                "status": "done",
                "summary": summary.summary,
                "outcome": summary.outcome,
                "importance": summary.importance,
            }
        )
        rows_out.item(
            episodes_prefix, episode.key, done.to_value(), episode.occurred_at, done.text()
        )
        rows_out.decay(episodes_prefix, episode.key, summary.importance, episode.occurred_at, False)
        if i < len(episode_vectors):
            writes.vectors.append(
                {
                    "prefix": episodes_prefix,
                    "key": episode.key,
                    "field": "text#0",
                    "vector": np.asarray(episode_vectors[i], dtype="<f4").tobytes(),
                }
            )
    writes.outcome = {
        "added": changes.added,
        "confirmed": changes.confirmed,
        "superseded": [list(p) for p in changes.superseded],
    }
    return writes


def consolidate_steps(
    memory: Any, *, scope: str | None = None, max_jobs: int | None = None
) -> Steps[Report]:
    """Run jobs until no scope has claimable work (or ``max_jobs`` ran)."""
    report = Report()
    failed: list[str] = []  # a scope that failed waits for the next round, whatever back-off
    while max_jobs is None or len(report.jobs) < max_jobs:
        result = yield from job_steps(memory, scope=scope, skip=tuple(failed))
        if result is None:
            break
        report.jobs.append(result)
        if result.status != "completed":
            failed.append(result.scope)
    return report
