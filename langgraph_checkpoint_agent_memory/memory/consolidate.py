"""Consolidation: claim a scope's pending episodes, extract (outside any transaction), apply
in one transaction that checks the lease; on failure, record it and back off.

A job is identified by its scope, its episode keys and the extractor version, never by
content: two episodes saying the same words are two episodes, and a job applied once is
not applied again.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from dataclasses import dataclass, field
from typing import Any, TypedDict

from langgraph_checkpoint_agent_memory.db import memory as sqlm
from langgraph_checkpoint_agent_memory.db import memory_jobs as jobsql
from langgraph_checkpoint_agent_memory.memory import facts as F
from langgraph_checkpoint_agent_memory.memory import writes as W
from langgraph_checkpoint_agent_memory.memory.context import (
    Call,
    Embed,
    MemoryContext,
    RunPlan,
    Search,
    Steps,
    Within,
    one,
)
from langgraph_checkpoint_agent_memory.memory.extract import ExtractionRequest, episode_summaries
from langgraph_checkpoint_agent_memory.memory.model import (
    Episode,
    EpisodeSummary,
    Extraction,
    Fact,
    Scope,
    digest,
    lexical_text,
)
from langgraph_checkpoint_agent_memory.memory.traced import memory_span
from langgraph_checkpoint_agent_memory.telemetry import metrics
from langgraph_checkpoint_agent_memory.telemetry.tracing import target_of

logger = logging.getLogger(__name__)


@dataclass
class JobResult:
    """What one job did."""

    scope: str
    job_id: str
    status: str  # completed | failed | parked | lost | erased (the scope, while it ran)
    episodes: int
    added: list[str] = field(default_factory=list)
    confirmed: list[str] = field(default_factory=list)
    superseded: list[tuple[str, str]] = field(default_factory=list)
    error: str | None = None


@dataclass
class Report:
    """What a :meth:`AgentMemory.consolidate` call did, summed over its jobs."""

    jobs: list[JobResult] = field(default_factory=list)

    @property
    def completed(self) -> int:
        return sum(j.status == "completed" for j in self.jobs)

    @property
    def failed(self) -> int:
        return sum(j.status in ("failed", "parked") for j in self.jobs)

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
        counts = ("completed", "failed", "episodes", "added", "confirmed", "superseded")
        return {"jobs": len(self.jobs), **{name: getattr(self, name) for name in counts}}


def job_steps(context: MemoryContext, scope: str) -> Steps[JobResult | None]:
    """Claim ``scope`` and consolidate a batch of its episodes; ``None`` when idle."""
    s = context.settings
    started = context.clock()
    claim = yield RunPlan(
        lambda: jobsql.claim_plan(
            context.sql,
            owner=uuid.uuid4().hex,
            now=started,
            lease_seconds=s.lease_seconds,
            limit=s.max_episodes_per_job,
            scope=scope,
        )
    )
    if claim is None:
        return None
    version = context.extractor.version
    job_id = digest(claim.scope, version, *sorted(claim.episode_keys), size=20)
    job = Job(claim, job_id, version, started)
    attributes = {
        "agent_memory.job.id": job.id,
        "agent_memory.episode_count": len(claim.episode_keys),
    }
    result: JobResult = yield Within(
        lambda: memory_span(context, "consolidate.job", claim.scope, **attributes),
        _job_steps(context, job),
        lambda op, result: _job_ended(context, op, result),
    )
    return result


def _job_steps(context: MemoryContext, job: Job) -> Steps[JobResult]:
    try:
        learned = yield from learn_steps(context, job)
    except Exception as exc:  # the extractor's, the model's, anything: the job fails
        return (yield from _fail(context, job, str(exc) or type(exc).__name__))
    return (yield from _apply(context, job, learned))


def _job_ended(context: MemoryContext, op: Any, result: JobResult) -> None:
    op.set("agent_memory.job.status", result.status)
    for name in ("added", "confirmed", "superseded"):
        op.set(f"agent_memory.{name}_count", len(getattr(result, name)))
    if result.status in ("failed", "parked"):
        op.fail(f"job_{result.status}", result.error or "")  # the error left out when sealed
    system = {"db.system.name": target_of(context.store.db).system}
    metrics.add("jobs", 1, {**system, "agent_memory.job.status": result.status})


class JobRecord(TypedDict):
    """The arguments of a job's ledger plans that name the job."""

    job_id: str
    episode_keys: list[str]
    extractor_version: str
    started_at: float


@dataclass(frozen=True)
class Job:
    """One consolidation job: its claim on a scope, its id, its extractor's version."""

    claim: jobsql.Claim
    id: str
    extractor_version: str
    started: float

    @property
    def ledger(self) -> JobRecord:
        return {
            "job_id": self.id,
            "episode_keys": self.claim.episode_keys,
            "extractor_version": self.extractor_version,
            "started_at": self.started,
        }

    def result(
        self, status: str, *, changes: F.FactChanges | None = None, error: str | None = None
    ) -> JobResult:
        c = changes if changes is not None else F.FactChanges()
        scope, count = self.claim.scope, len(self.claim.episode_keys)
        return JobResult(scope, self.id, status, count, c.added, c.confirmed, c.superseded, error)


@dataclass(frozen=True)
class Learned:
    """What a job learned before its transaction (``extraction`` ``None``: no episode was
    left to read; ``fact_vectors`` by search text)."""

    scope: Scope
    scope_key: str
    episodes: list[Episode]
    extraction: Extraction | None = None
    summaries: list[EpisodeSummary] = field(default_factory=list)
    fact_vectors: dict[str, list[float]] = field(default_factory=dict)
    episode_vectors: list[list[float]] = field(default_factory=list)


def learn_steps(context: MemoryContext, job: Job) -> Steps[Learned]:
    """Read the job's episodes, ask the extractor about them with the scope's relevant
    facts, check it summarised every episode, and embed what will be indexed."""
    claim = job.claim
    scope = Scope.parse(claim.scope)
    prefix = context.prefix(scope, "episodes")
    rows = yield RunPlan(
        lambda: sqlm.read_plan(context.sql, prefix, job.started, claim.episode_keys)
    )
    episodes = sorted(
        (Episode.from_value(r.key, r.value) for r in rows), key=lambda e: (e.occurred_at, e.key)
    )
    if not episodes:
        return Learned(scope, claim.scope, episodes)
    query = " ".join(
        m.get("content", "") for e in episodes for m in e.messages if m.get("role") == "user"
    )[:2000]
    found = yield Search(context.namespace(scope, "facts"), query, context.settings.relevant_facts)
    relevant = [Fact.from_value(i.key, i.value) for i in found]
    extractor, request = context.extractor, ExtractionRequest(scope, episodes, relevant)
    attributes = {
        "agent_memory.episode_count": len(episodes),
        "agent_memory.extractor": type(extractor).__name__,
    }
    extraction = yield Within(
        lambda: memory_span(context, "extract", claim.scope, **attributes),
        one(Call(lambda: extractor.extract(request), lambda: extractor.aextract(request))),
    )
    summaries = episode_summaries(extraction, episodes)  # one for each episode, or the job fails
    learned = Learned(scope, claim.scope, episodes, extraction, summaries)
    if not context.embeds:
        return learned
    texts = [c.search_text() for c in extraction.facts]
    ep_texts = [
        dataclasses.replace(e, summary=s.summary).text()
        for e, s in zip(episodes, summaries, strict=True)
    ]
    vectors = yield Embed(texts + ep_texts)
    return dataclasses.replace(
        learned,
        fact_vectors=dict(zip(texts, vectors[: len(texts)], strict=True)),
        episode_vectors=list(vectors[len(texts) :]),
    )


def _apply(context: MemoryContext, job: Job, learned: Learned) -> Steps[JobResult]:
    claim = job.claim
    now = context.clock()
    decider = W.Decider(lambda stored: job_writes(context, learned, stored, now=now))
    try:
        writes = yield RunPlan(
            lambda: jobsql.apply_plan(
                context.sql,
                claim,
                **job.ledger,
                facts_prefix=context.prefix(learned.scope, "facts"),
                now=now,
                read_vectors=context.embeds,
                decide=decider,
            )
        )
    except Exception as exc:
        logger.warning("consolidation of %s could not be applied: %s", claim.scope, exc)
        try:
            yield from _fail(context, job, f"apply failed: {exc}")
        except Exception:  # the database is gone: the lease expires and others retry
            pass
        raise
    if writes is None:
        return job.result("lost")
    if writes is jobsql.ERASED:
        return job.result("erased")
    decided = decider.decided
    return job.result("completed", changes=decided.changes if decided is not None else None)


def _fail(context: MemoryContext, job: Job, error: str) -> Steps[JobResult]:
    s = context.settings
    claim = job.claim
    outcome = yield RunPlan(
        lambda: jobsql.fail_plan(
            context.sql,
            claim,
            **job.ledger,
            error=error,
            now=context.clock(),
            max_attempts=s.max_attempts,
            backoff_seconds=s.backoff_seconds,
        )
    )
    if outcome == "erased":
        return job.result("erased")
    logger.warning("consolidation job for %s failed (%s): %s", claim.scope, outcome, error)
    status = {"retry": "failed", "parked": "parked", "lost": "lost"}[outcome]
    return job.result(status, error=error)


def job_writes(
    context: MemoryContext, learned: Learned, stored: W.StoredFacts, *, now: float
) -> W.FactWrites:
    """The rows a job writes, from the current facts read inside its transaction: the facts
    said merged in, each episode done with its summary, the job's outcome."""
    writes = jobsql.Writes()
    episodes, extraction = learned.episodes, learned.extraction
    if extraction is None or not episodes:
        return W.FactWrites(writes, F.FactChanges())
    # each fact dates from the episode that states it (else the last), applied in that order
    stated = [(c, episodes[(c.episode or len(episodes)) - 1]) for c in extraction.facts]
    stated.sort(key=lambda pair: pair[1].occurred_at)
    out = W.RowWriter(writes, learned.scope_key, now)
    said = W.Said(
        [c for c, _ in stated],
        learned.fact_vectors,
        episode_key=episodes[-1].key,
        when=max(e.occurred_at for e in episodes),
        sources=[(e.key, e.occurred_at) for _, e in stated],
    )
    changes = W.apply_facts(context, learned.scope, out, stored, said)
    prefix = context.prefix(learned.scope, "episodes")
    for i, (episode, summary) in enumerate(zip(episodes, learned.summaries, strict=True)):
        done = dataclasses.replace(
            episode,
            status="done",
            summary=summary.summary,
            outcome=summary.outcome,
            importance=summary.importance,
        )
        out.item(prefix, episode.key, done.to_value(), episode.occurred_at, lexical_text(done))
        out.decay(prefix, episode.key, summary.importance, episode.occurred_at, False)
        if i < len(learned.episode_vectors):
            out.vector(prefix, episode.key, W.as_blob(learned.episode_vectors[i]))
    writes.outcome = {
        "added": changes.added,
        "confirmed": changes.confirmed,
        "superseded": [list(p) for p in changes.superseded],
    }
    return W.FactWrites(writes, changes)


def consolidate_steps(
    context: MemoryContext, *, scope: str | None = None, max_jobs: int | None = None
) -> Steps[Report]:
    """Run jobs until no scope has claimable work (or ``max_jobs`` ran); the scopes with
    work are found once a round, then each scope's jobs claimed on its own shard."""
    report = Report()
    failed: list[str] = []  # a scope that failed waits for the next round, whatever back-off

    def more() -> bool:
        return max_jobs is None or len(report.jobs) < max_jobs

    while more():
        if scope is not None:
            found = [scope]
        else:
            found = yield RunPlan(
                lambda: jobsql.scopes_plan(context.sql, now=context.clock(), skip=tuple(failed))
            )
        for name in found:
            while more():
                result = yield from job_steps(context, name)
                if result is None:
                    break
                report.jobs.append(result)
                if result.status != "completed":
                    failed.append(result.scope)
                    break
        if scope is not None or len(found) < jobsql.ROUND_SCOPES:
            break
    if metrics.metering():  # what is left, for the backlog gauges
        yield from _backlog_steps(context)
    return report


def _backlog_steps(context: MemoryContext) -> Steps[None]:
    """Read what is left for the backlog gauges; a failure is logged, not raised."""
    try:
        left = yield RunPlan(lambda: sqlm.backlog_plan(context.sql, context.clock()))
        stuck = yield RunPlan(lambda: sqlm.failures_plan(context.sql))
    except Exception:
        logger.warning("the consolidation backlog could not be read", exc_info=True)
    else:
        backlog = context.backlog
        backlog.pending, backlog.oldest_at = left.pending, left.oldest_at
        backlog.parked = stuck["parked_episodes"]
