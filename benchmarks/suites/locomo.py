"""Retrieval quality on LoCoMo for the three units an ``AgentMemory`` holds: dialogue turns,
facts and episodes, each searched with ``store.search`` lexically, by vector and hybrid.

Units, per conversation (one memory scope, ``user_id`` = the conversation's id):

- **turns**: each turn an item ``{"text": "[date] speaker: words", "date"}`` in a namespace
  of its own; it covers itself.
- **facts**: each LoCoMo observation a :class:`Fact` in ``memory.namespace(scope, "facts")``:
  attribute the speaker it is about (one multi-valued attribute per speaker, as LoCoMo groups
  them), value and statement the observation's sentence, valid from its session's date,
  ``source_episodes`` its evidence turns; it covers those turns.
- **episodes**: each session summary an :class:`Episode` in
  ``memory.namespace(scope, "episodes")``, dated by its session, summary the session
  summary; it covers every turn of its session.

Each unit is written as the memory itself writes it: a fact or an episode with the lexical
text ``lexical_text`` gives (a fact's ``Fact.search_text()``: its attribute as words, here
the speaker, its value and statement; an episode's ``Episode.text()``; each with its date in
words) and its vector embedded from that text without the date; a turn is put with its
``text``. The stores are made by ``create_store(index="default")``; ``lexical`` and
``vector`` are the same store with the fusion weights ``(1, 0)`` and ``(0, 1)``, ``hybrid``
the default weights; ``no index`` is ``create_store()`` without the extra (lexical search
alone); the textbook ``bm25`` ranks the lexical text with plain Okapi BM25 (no stemming,
no stopwords).

For every question of categories 1-4, a unit is evidence when it covers one of the
question's evidence turns; a question none of whose evidence turns a unit of that kind covers
is a miss. hit@k: some evidence unit in the top k; recall@k: the share of the evidence units
in the top k; MRR over the first 10. Hybrid is paired with lexical question by question on
hit@5 (McNemar's exact test on the discordant pairs). ``build_context`` ranks turns as
``inject_node`` does: each turn an episode, recalled by relevance, recency and importance,
in a memory that also holds the conversation's facts, each learned from its evidence turns
(``source_episodes``), so facts and episodes vouch for each other (``link_weight``).
``recall`` ranks facts and episodes as ``AgentMemory.recall`` does, in a memory holding both,
each fact learned from its session's episode; ``unlinked`` is either with ``link_weight=0``,
paired with it question by question.

Pass the data with ``--locomo PATH`` or ``AGENT_MEMORY_LOCOMO`` (default
``../shared/data/locomo``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings
from langgraph.store.base import PutOp

from benchmarks.harness import bar_chart, print_table, write_results
from langgraph_checkpoint_agent_memory import AgentMemory, AgentMemoryStore, create_store
from langgraph_checkpoint_agent_memory.db.database import Batch, Plan
from langgraph_checkpoint_agent_memory.memory.model import (
    Episode,
    Fact,
    fact_key,
    lexical_text,
    normalize_attribute,
)
from langgraph_checkpoint_agent_memory.memory.settings import MemorySettings
from langgraph_checkpoint_agent_memory.memory.writes import as_blob, item_row

DEFAULT_DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "locomo"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
KINDS = ("turns", "facts", "episodes")
MODES = (
    *("lexical", "vector", "hybrid", "no index", "bm25"),
    *("build_context", "recall", "unlinked", "guessed"),
)
#: The fusion weights of the modes that are the default-index store with other weights.
MODE_WEIGHTS: dict[str, tuple[float, float]] = {"lexical": (1.0, 0.0), "vector": (0.0, 1.0)}
QUICK_QUESTIONS = 60


def load(path: Path) -> list[dict[str, Any]]:
    file = path / "locomo-dev.json" if path.is_dir() else path
    data: list[dict[str, Any]] = json.loads(file.read_text())
    return data


def when(date: str) -> float:
    """``"1:56 pm on 8 May, 2023"`` as seconds since the epoch (UTC); 0 if unreadable."""
    try:
        parsed = datetime.strptime(date.strip(), "%I:%M %p on %d %B, %Y")
    except ValueError:
        return 0.0
    return parsed.replace(tzinfo=timezone.utc).timestamp()


def sessions(conversation: dict[str, Any]) -> Iterator[tuple[int, str, list[dict[str, Any]]]]:
    """``(number, date, turns)`` of each session, in order."""
    conv = conversation["conversation"]
    n = 1
    while f"session_{n}" in conv:
        yield n, conv.get(f"session_{n}_date_time", ""), conv[f"session_{n}"]
        n += 1


@dataclass(frozen=True)
class Unit:
    """One item to search: its key, its value as the memory stores it, the text the memory
    embeds for it, the dialogue turns it covers, and the text the memory indexes lexically
    for it (``None``: ``text``)."""

    key: str
    value: dict[str, Any]
    text: str
    covers: frozenset[str]
    lexical: str | None = None

    @property
    def doc(self) -> str:
        """What the lexical index keeps for the unit."""
        return self.text if self.lexical is None else self.lexical


def turns(conversation: dict[str, Any]) -> list[Unit]:
    out = []
    for _, date, session in sessions(conversation):
        for turn in session:
            text = turn["text"]
            if turn.get("blip_caption"):
                text += f" [shares a photo: {turn['blip_caption']}]"
            value = {"text": f"[{date}] {turn['speaker']}: {text}", "date": date}
            out.append(Unit(turn["dia_id"], value, value["text"], frozenset([turn["dia_id"]])))
    return out


def facts(conversation: dict[str, Any]) -> list[Unit]:
    """Each observation a multi-valued fact about its speaker (the same sentence stated
    twice is one fact covering both evidence turns, as the memory would confirm it)."""
    found: dict[str, tuple[Fact, set[str]]] = {}
    observations = conversation.get("observation", {})
    for n, date, _ in sessions(conversation):
        at = when(date)
        for speaker, entries in observations.get(f"session_{n}_observation", {}).items():
            attribute = normalize_attribute(speaker)
            for sentence, evidence in entries:
                turns_ = [evidence] if isinstance(evidence, str) else list(evidence)
                turns_ = [t.strip() for t in turns_]
                key = fact_key(attribute, sentence, multi=True)
                if key in found:
                    found[key][1].update(turns_)
                    continue
                fact = Fact(
                    key=key,
                    attribute=attribute,
                    value=sentence,
                    statement=sentence,
                    multi=True,
                    valid_from=at,
                    last_confirmed=at,
                    source_episodes=turns_,
                )
                found[key] = (fact, set(turns_))
    return [
        Unit(
            key,
            fact.to_value() | {"source_episodes": sorted(covers)},
            fact.search_text(),
            frozenset(covers),
            lexical_text(fact),
        )
        for key, (fact, covers) in found.items()
    ]


def episodes(conversation: dict[str, Any]) -> list[Unit]:
    """Each session summary an episode of that session, covering all its turns."""
    summaries = conversation.get("session_summary", {})
    out = []
    for n, date, session in sessions(conversation):
        summary = summaries.get(f"session_{n}_summary")
        if not summary:
            continue
        episode = Episode(
            key=f"session_{n}",
            messages=[],
            occurred_at=when(date),
            thread_id=f"session_{n}",
            status="done",
            summary=summary,
        )
        covers = frozenset(t["dia_id"] for t in session)
        out.append(
            Unit(episode.key, episode.to_value(), episode.text(), covers, lexical_text(episode))
        )
    return out


UNITS: dict[str, Callable[[dict[str, Any]], list[Unit]]] = {
    "turns": turns,
    "facts": facts,
    "episodes": episodes,
}


def questions(conversation: dict[str, Any]) -> list[dict[str, Any]]:
    """Every question of categories 1-4, with its evidence turns as a set."""
    out = []
    for q in conversation["qa"]:
        if q.get("category") in CATEGORIES:
            evidence = {e.strip() for e in q.get("evidence") or [] if e.strip()}
            out.append({**q, "evidence": evidence})
    return out


def score(ranked: list[str], evidence: set[str]) -> dict[str, float]:
    """hit@1/5/10, recall@5/10 and reciprocal rank (in the first 10) of one ranking."""
    if not evidence:
        return {
            "hit@1": 0.0,
            "hit@5": 0.0,
            "hit@10": 0.0,
            "recall@5": 0.0,
            "recall@10": 0.0,
            "mrr": 0.0,
        }
    first = next((i for i, key in enumerate(ranked) if key in evidence), None)
    return {
        "hit@1": float(first is not None and first < 1),
        "hit@5": float(first is not None and first < 5),
        "hit@10": float(first is not None and first < 10),
        "recall@5": len(evidence & set(ranked[:5])) / len(evidence),
        "recall@10": len(evidence & set(ranked[:10])) / len(evidence),
        "mrr": 1.0 / (first + 1) if first is not None and first < 10 else 0.0,
    }


def mcnemar(a: list[float], b: list[float]) -> dict[str, float]:
    """McNemar's exact test of two paired binary outcomes: ``only_a`` and ``only_b`` count
    the discordant pairs, ``p`` is the two-sided exact binomial probability of a split at
    least that uneven if both were equally good."""
    only_a = sum(1 for x, y in zip(a, b, strict=True) if x and not y)
    only_b = sum(1 for x, y in zip(a, b, strict=True) if y and not x)
    n = only_a + only_b
    if n == 0:
        return {"only_a": 0, "only_b": 0, "p": 1.0}
    tail = sum(math.comb(n, i) for i in range(min(only_a, only_b) + 1)) / 2.0**n
    return {"only_a": only_a, "only_b": only_b, "p": min(1.0, 2 * tail)}


_WORD = re.compile(r"[^\W_]+")


def bm25(
    query: list[str], docs: dict[str, str], k1: float = 1.2, b: float = 0.75
) -> dict[str, float]:
    """Textbook Okapi BM25 over lower-cased words (no stemming, no stopwords): the
    baseline the store's own lexical search is measured against."""
    tokenized = {key: _WORD.findall(doc.lower()) for key, doc in docs.items()}
    if not tokenized:
        return {}
    avg = sum(len(t) for t in tokenized.values()) / len(tokenized) or 1.0
    df = Counter(term for toks in tokenized.values() for term in set(toks))
    n = len(tokenized)
    scores: dict[str, float] = {}
    for key, toks in tokenized.items():
        counts = Counter(toks)
        total = 0.0
        for term in dict.fromkeys(query):
            if counts[term]:
                idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
                tf = counts[term]
                total += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(toks) / avg))
        if total > 0:
            scores[key] = total
    return scores


class Memo(Embeddings):
    """An embedder that embeds each text once (per document or query side): every mode and
    store of a run shares the vectors, so quality is measured without paying for them thrice.
    ``seconds`` and ``texts`` add up the embedder's own work."""

    def __init__(self, inner: Any, dims: int) -> None:
        self.inner = inner
        self.dims = dims
        self._docs: dict[str, list[float]] = {}
        self._queries: dict[str, list[float]] = {}
        self._lock = threading.Lock()
        self.seconds = 0.0
        self.texts = 0

    def _embed(
        self, texts: list[str], cache: dict[str, list[float]], query: bool
    ) -> list[list[float]]:
        missing = [t for t in dict.fromkeys(texts) if t not in cache]
        if missing:
            start = time.perf_counter()
            if query:
                found = [self.inner.embed_query(t) for t in missing]
            else:
                found = self.inner.embed_documents(missing)
            with self._lock:
                self.seconds += time.perf_counter() - start
                self.texts += len(missing)
                cache.update(zip(missing, found, strict=True))
        return [cache[t] for t in texts]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self._embed(list(texts), self._docs, query=False)

    def embed_query(self, text: str) -> list[float]:
        return self._embed([text], self._queries, query=True)[0]


@dataclass
class Tally:
    """Per-question scores of one kind and mode, with the questions' categories."""

    scores: list[dict[str, float]] = field(default_factory=list)
    categories: list[str] = field(default_factory=list)

    def add(self, category: str, s: dict[str, float]) -> None:
        self.scores.append(s)
        self.categories.append(category)

    def mean(self, category: str | None = None) -> dict[str, float]:
        rows = [
            s for s, c in zip(self.scores, self.categories, strict=True) if category in (None, c)
        ]
        if not rows:
            return {}
        out = {m: float(np.mean([r[m] for r in rows])) for m in rows[0]}
        out["n"] = len(rows)
        return out

    def column(self, metric: str) -> list[float]:
        return [s[metric] for s in self.scores]


def _stores(embedder: Any, options: dict[str, Any]) -> dict[str, AgentMemoryStore]:
    stores: dict[str, AgentMemoryStore] = {"no index": create_store(**options)}
    if embedder is not None:
        index = {"dims": embedder.dims, "embed": embedder}
        stores["hybrid"] = create_store(index=index, **options)
        for mode, weights in MODE_WEIGHTS.items():
            stores[mode] = create_store(index=index, **{**options, "weights": weights})
    return stores


def evaluate(
    conversations: list[dict[str, Any]],
    embedder: Any,
    *,
    options: dict[str, Any] | None = None,
    max_questions: int | None = None,
    kinds: tuple[str, ...] = KINDS,
    build_context: bool = True,
) -> dict[str, dict[str, Tally]]:
    """Search every unit kind in every mode for every question: ``{kind: {mode: Tally}}``.
    ``options`` go to ``create_store`` (``weights``, ``rrf_k``, ``candidates``)."""
    options = dict(options or {})
    tallies: dict[str, dict[str, Tally]] = {k: {} for k in kinds}
    for conv in conversations:
        scope = {"user_id": conv["sample_id"]}
        qs = questions(conv)
        if max_questions is not None and len(qs) > max_questions:
            qs = qs[:: len(qs) // max_questions][:max_questions]  # a spread of categories
        stores = _stores(embedder, options)
        memory = AgentMemory(stores["no index"])
        namespaces = {
            "turns": ("locomo", conv["sample_id"]),
            "facts": memory.namespace(scope, "facts"),
            "episodes": memory.namespace(scope, "episodes"),
        }
        for kind in kinds:
            units = UNITS[kind](conv)
            ns = namespaces[kind]
            for store in stores.values():
                if kind == "turns":  # each store indexes the turn's text, alone
                    store.batch([PutOp(ns, u.key, {"text": u.text}, index=["text"]) for u in units])
                else:
                    write_as_memory(store, ns, units)
            docs = {u.key: u.doc for u in units}
            for q in qs:
                evidence = {u.key for u in units if u.covers & q["evidence"]}
                category = CATEGORIES[q["category"]]
                for mode, store in stores.items():
                    found = store.search(ns, query=q["question"], limit=10)
                    # a zero weight still lists the other side's candidates, at score 0
                    ranked = [
                        i.key for i in found if mode not in MODE_WEIGHTS or (i.score or 0) > 0
                    ]
                    tallies[kind].setdefault(mode, Tally()).add(category, score(ranked, evidence))
                bm = bm25(_WORD.findall(q["question"].lower()), docs)
                top = sorted(bm, key=lambda k: -bm[k])[:10]
                tallies[kind].setdefault("bm25", Tally()).add(category, score(top, evidence))
        for store in stores.values():
            store.close()
        if build_context and "turns" in kinds:
            _build_context(conv, qs, embedder, tallies["turns"])
        if build_context and embedder is not None and {"facts", "episodes"} <= set(kinds):
            _recall(conv, qs, embedder, tallies)
    return tallies


def write_as_memory(
    store: AgentMemoryStore, ns: tuple[str, ...], units: list[Unit], *, values: bool = False
) -> None:
    """Write ``units`` as agent memory writes facts and episodes: each item's lexical text
    its ``doc``, its vector (when ``store`` embeds) embedded from its ``text``; its value
    ``{"text": ...}``, or with ``values`` the unit's value (a fact or an episode that
    agent memory reads back)."""
    prefix, sql = ".".join(ns), AgentMemory(store).context.sql
    items = [
        item_row(
            prefix,
            u.key,
            u.value if values else {"text": u.text},
            created=0.0,
            updated=0.0,
            doc=u.doc,
        )
        for u in units
    ]
    vectors = None
    if store.embeddings is not None:
        embedded = store.embeddings.embed_documents([u.text for u in units])
        vectors = [
            {"prefix": prefix, "key": u.key, "field": "text#0", "vector": as_blob(v)}
            for u, v in zip(units, embedded, strict=True)
        ]

    def plan() -> Plan[None]:
        yield Batch(sql.item_writes(items, vectors), write=True)

    store.run_plan(plan())


def _build_context(
    conv: dict[str, Any], qs: list[dict[str, Any]], embedder: Any, tallies: dict[str, Tally]
) -> None:
    """What ``inject_node`` would show: each turn an episode dated by its session, and the
    conversation's facts (LoCoMo's observations, each learned from its evidence turns:
    ``source_episodes``), recalled with the documented mix of relevance, recency and
    importance, facts and episodes vouching for each other (mode ``build_context``) or not
    (``link_weight=0``, mode ``unlinked``); mode ``guessed`` links each fact to the episode
    consolidation credits when the extractor names none (:func:`_guessed`). The rank of an
    episode is its position in the context block."""
    items = turns(conv)
    index = {"dims": embedder.dims, "embed": embedder, "fields": ["$"]} if embedder else None
    store = create_store(index=index, candidates=30)
    last = max((when(str(t.value["date"])) for t in items), default=0.0)
    order = [t.key for t in items]
    runs = []
    for provenance, learned in (("exact", facts(conv)), ("guessed", _guessed(facts(conv), order))):
        scope = {"user_id": f"{conv['sample_id']}-{provenance}"}
        modes = (("build_context", MemorySettings.link_weight), ("unlinked", 0.0))
        for mode, weight in (
            modes if provenance == "exact" else (("guessed", MemorySettings.link_weight),)
        ):
            memory = AgentMemory(
                store, clock=lambda: last + 86400, episode_candidates=30, link_weight=weight
            )
            runs.append((mode, scope, memory))
        for t in items:
            memory.record(
                scope,
                [{"role": "user", "content": t.text}],
                key=t.key,
                occurred_at=when(str(t.value["date"])),
            )
        write_as_memory(store, memory.namespace(scope, "facts"), learned, values=True)
    for q in qs:
        for mode, scope, m in runs:
            recalled = m.recall(scope, q["question"], budget_tokens=100_000)
            ranked = [e.key for e in recalled.episodes][:10]
            tallies.setdefault(mode, Tally()).add(
                CATEGORIES[q["category"]], score(ranked, q["evidence"])
            )
    store.close()


def _guessed(units: list[Unit], order: list[str], of: Callable[[str], str] = str) -> list[Unit]:
    """Facts credited as consolidation credits a fact whose extractor names no episode: to
    the last episode of the job that read it, jobs taking ``max_episodes_per_job`` pending
    episodes oldest first (``order``; ``of``: the episode of an evidence turn). The worst
    case of provenance: every episode pending when the worker runs, and an extractor that
    never says which episode states a fact."""
    batch = MemorySettings.max_episodes_per_job
    position = {key: i for i, key in enumerate(order)}

    def last(key: str) -> str:
        return order[min(len(order), (position[key] // batch + 1) * batch) - 1]

    return [
        dataclasses.replace(
            u,
            value={
                **u.value,
                "source_episodes": sorted({last(of(t)) for t in u.covers if of(t) in position}),
            },
        )
        for u in units
    ]


def _session_of(turn: str) -> str:
    """The episode of the session a turn belongs to (``D3:5`` -> ``session_3``)."""
    return f"session_{turn.split(':')[0][1:]}"


def _recall(
    conv: dict[str, Any],
    qs: list[dict[str, Any]],
    embedder: Any,
    tallies: dict[str, dict[str, Tally]],
) -> None:
    """Facts and episodes as ``AgentMemory.recall`` ranks them (mode ``recall``), with
    ``link_weight=0`` (mode ``unlinked``), and with each fact credited as consolidation
    credits it when the extractor names no episode (mode ``guessed``, :func:`_guessed`): the
    memory holds both, each fact learned from the episodes of the sessions its evidence
    turns belong to (``source_episodes``, as consolidation records them). The facts' order
    is the block's, where they do not all fit (the default budget); the episodes' order is
    the block's with every fact in it."""
    store = create_store(index={"dims": embedder.dims, "embed": embedder})
    last = max((when(date) for _, date, _ in sessions(conv)), default=0.0)
    sessions_ = episodes(conv)
    exact = [
        dataclasses.replace(
            u,
            value={**u.value, "source_episodes": sorted({_session_of(t) for t in u.covers})},
        )
        for u in facts(conv)
    ]
    guessed = _guessed(facts(conv), [e.key for e in sessions_], _session_of)
    runs = []
    for provenance, learned in (("exact", exact), ("guessed", guessed)):
        scope = {"user_id": f"{conv['sample_id']}-{provenance}"}
        modes = (("recall", MemorySettings.link_weight), ("unlinked", 0.0))
        for mode, weight in (
            modes if provenance == "exact" else (("guessed", MemorySettings.link_weight),)
        ):
            memory = AgentMemory(store, clock=lambda: last + 86400, link_weight=weight)
            runs.append((mode, scope, memory))
        write_as_memory(store, memory.namespace(scope, "facts"), learned, values=True)
        write_as_memory(store, memory.namespace(scope, "episodes"), sessions_, values=True)
    for q in qs:
        category = CATEGORIES[q["category"]]
        for mode, scope, m in runs:
            ranked = [f.key for f in m.recall(scope, q["question"]).facts][:10]
            evidence = {u.key for u in exact if u.covers & q["evidence"]}
            tallies["facts"].setdefault(mode, Tally()).add(category, score(ranked, evidence))
            everything = m.recall(scope, q["question"], budget_tokens=1_000_000)
            ranked = [e.key for e in everything.episodes][:10]
            evidence = {u.key for u in sessions_ if u.covers & q["evidence"]}
            tallies["episodes"].setdefault(mode, Tally()).add(category, score(ranked, evidence))
    store.close()


def summarize(tallies: dict[str, dict[str, Tally]]) -> dict[str, Any]:
    """Means overall and per category, and hybrid against lexical (McNemar on hit@5)."""
    out: dict[str, Any] = {}
    for kind, modes in tallies.items():
        out[kind] = {}
        for mode, tally in sorted(modes.items(), key=lambda kv: MODES.index(kv[0])):
            out[kind][mode] = {
                "overall": tally.mean(),
                "by_category": {c: tally.mean(c) for c in CATEGORIES.values() if tally.mean(c)},
            }
        if "hybrid" in modes and "lexical" in modes:
            test = mcnemar(modes["hybrid"].column("hit@5"), modes["lexical"].column("hit@5"))
            out[kind]["hybrid"]["mcnemar_vs_lexical_hit@5"] = {
                "hybrid_only": test["only_a"],
                "lexical_only": test["only_b"],
                "p": test["p"],
            }
        for linked in ("build_context", "recall", "guessed"):
            if linked in modes and "unlinked" in modes:
                test = mcnemar(modes[linked].column("hit@5"), modes["unlinked"].column("hit@5"))
                out[kind][linked]["mcnemar_vs_unlinked_hit@5"] = {
                    "linked_only": test["only_a"],
                    "unlinked_only": test["only_b"],
                    "p": test["p"],
                }
    return out


def discordant(test: dict[str, Any]) -> tuple[int, int]:
    """The discordant pairs of a McNemar result: (the mode's wins, the other's)."""
    a, b = (v for k, v in test.items() if k != "p")
    return int(a), int(b)


def print_summary(summary: dict[str, Any], title: str) -> None:
    rows = []
    for kind, modes in summary.items():
        for mode, result in modes.items():
            o = result["overall"]
            test = result.get("mcnemar_vs_lexical_hit@5") or result.get("mcnemar_vs_unlinked_hit@5")
            paired = ""
            if test:
                wins, losses = discordant(test)
                paired = f"+{wins}/-{losses} p={test['p']:.3g}"
            rows.append(
                (
                    kind,
                    mode,
                    f"{o['hit@1']:.3f}",
                    f"{o['hit@5']:.3f}",
                    f"{o['hit@10']:.3f}",
                    f"{o['recall@5']:.3f}",
                    f"{o['mrr']:.3f}",
                    str(o["n"]),
                    paired,
                )
            )
    print_table(
        title,
        rows,
        (
            "unit",
            "mode",
            "hit@1",
            "hit@5",
            "hit@10",
            "recall@5",
            "MRR",
            "questions",
            "McNemar hit@5: hybrid vs lexical, linked vs unlinked",
        ),
    )
    rows = []
    for kind, modes in summary.items():
        for mode, result in modes.items():
            cats = result["by_category"]
            rows.append(
                (
                    kind,
                    mode,
                    *(
                        f"{cats[c]['hit@5']:.3f} / {cats[c]['recall@5']:.3f}" if c in cats else "-"
                        for c in CATEGORIES.values()
                    ),
                )
            )
    print_table(
        "hit@5 / recall@5 by question category",
        rows,
        ("unit", "mode", *(f"{c} (n={_n(summary, c)})" for c in CATEGORIES.values())),
    )


def _n(summary: dict[str, Any], category: str) -> int:
    for modes in summary.values():
        for result in modes.values():
            if category in result["by_category"]:
                return int(result["by_category"][category]["n"])
    return 0


def default_embedder() -> Memo | None:
    """The ``index="default"`` embedder (each text embedded once), or ``None`` without
    the extra."""
    from langgraph_checkpoint_agent_memory.store.embed import default_index

    try:
        index = default_index()
        index["embed"].embed_query("warm up")
    except Exception as exc:  # the embed extra is optional
        print(f"no default embedder ({exc}); vector and hybrid modes are skipped")
        return None
    return Memo(index["embed"], int(index["dims"]))


def run(*, quick: bool, out: Path) -> None:
    data = Path(os.environ.get("AGENT_MEMORY_LOCOMO", DEFAULT_DATA))
    if not data.exists():
        print(f"LoCoMo data not found at {data}; set AGENT_MEMORY_LOCOMO")
        return
    conversations = load(data)[: 1 if quick else None]
    embedder = default_embedder()
    tallies = evaluate(conversations, embedder, max_questions=QUICK_QUESTIONS if quick else None)
    summary = summarize(tallies)
    name = type(embedder.inner).__name__ if embedder is not None else "none"
    print_summary(
        summary,
        f"LoCoMo evidence retrieval, {len(conversations)} conversation(s), categories 1-4, "
        f"default embedder {name}",
    )
    if embedder is not None and embedder.texts:
        print(f"(embedded {embedder.texts} distinct texts in {embedder.seconds:.1f} s)")
    write_results(
        out,
        "locomo",
        {"quick": quick, "conversations": len(conversations), "embedder": name, **summary},
    )
    bar_chart(
        out,
        "locomo",
        {
            f"{kind} hit@5": {mode: r["overall"]["hit@5"] for mode, r in modes.items()}
            for kind, modes in summary.items()
        },
        "share of questions",
    )
