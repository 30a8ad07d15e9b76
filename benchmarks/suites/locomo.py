"""Retrieval quality on LoCoMo: evidence recall@1/5/10 and MRR by question category, for our
store's lexical, vector and hybrid search, and the baselines BM25 alone and the default
embedder alone (plain numpy), on the same turns.

Each conversation's turns become items (text with speaker and session date) in a namespace
of their own; every question of categories 1-4 searches its conversation. Pass the data with
``--locomo PATH`` or ``AGENT_MEMORY_LOCOMO`` (default ``../shared/data/locomo``).
"""

from __future__ import annotations

import json
import math
import os
import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness import bar_chart, print_table, write_results
from langgraph_checkpoint_agent_memory import create_store

DEFAULT_DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "locomo"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}


def load(path: Path) -> list[dict[str, Any]]:
    file = path / "locomo-dev.json" if path.is_dir() else path
    return json.loads(file.read_text())


def turns(conversation: dict[str, Any]) -> list[dict[str, str]]:
    conv = conversation["conversation"]
    out = []
    n = 1
    while f"session_{n}" in conv:
        date = conv.get(f"session_{n}_date_time", "")
        for turn in conv[f"session_{n}"]:
            text = turn["text"]
            if turn.get("blip_caption"):
                text += f" [shares a photo: {turn['blip_caption']}]"
            out.append(
                {"id": turn["dia_id"], "text": f"[{date}] {turn['speaker']}: {text}", "date": date}
            )
        n += 1
    return out


def score(ranked: list[str], evidence: set[str]) -> dict[str, float]:
    first = next((i for i, key in enumerate(ranked) if key in evidence), None)
    return {
        "r@1": float(first is not None and first < 1),
        "r@5": float(first is not None and first < 5),
        "r@10": float(first is not None and first < 10),
        "mrr": 1.0 / (first + 1) if first is not None else 0.0,
    }


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
        score = 0.0
        for term in dict.fromkeys(query):
            if counts[term]:
                idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
                tf = counts[term]
                score += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(toks) / avg))
        if score > 0:
            scores[key] = score
    return scores


def when(date: str) -> float:
    """``"1:56 pm on 8 May, 2023"`` as seconds since the epoch (UTC)."""
    from datetime import datetime, timezone

    try:
        parsed = datetime.strptime(date.strip(), "%I:%M %p on %d %B, %Y")
    except ValueError:
        return 0.0
    return parsed.replace(tzinfo=timezone.utc).timestamp()


def _build_context(
    conv: dict[str, Any],
    items: list[dict[str, str]],
    questions: list[dict[str, Any]],
    by_id: dict[str, dict[str, str]],
    embedder: Any,
    totals: dict[str, list[dict[str, float]]],
) -> None:
    """What ``inject_node`` would show: each turn an episode dated by its session, recalled
    with the documented mix of relevance, recency and importance; the rank of an episode is
    its position in the context block."""
    from langgraph_checkpoint_agent_memory import AgentMemory

    index = {"dims": embedder.dims, "embed": embedder, "fields": ["$"]} if embedder else None
    store = create_store(index=index, candidates=30)
    last = max((when(t["date"]) for t in items), default=0.0)
    memory = AgentMemory(store, clock=lambda: last + 86400, episode_candidates=30)
    scope = {"user_id": conv["sample_id"]}
    for t in items:
        memory.record(
            scope,
            [{"role": "user", "content": t["text"]}],
            key=t["id"],
            occurred_at=when(t["date"]),
        )
    for q in questions:
        evidence = {e.strip() for e in q["evidence"] if e.strip() in by_id}
        if not evidence:
            continue
        recalled = memory.recall(scope, q["question"], budget_tokens=100_000)
        ranked = [e.key for e in recalled.episodes][:10]
        totals[CATEGORIES[q["category"]]].append(score(ranked, evidence))
    store.close()


def run(*, quick: bool, out: Path) -> None:
    data = Path(os.environ.get("AGENT_MEMORY_LOCOMO", DEFAULT_DATA))
    if not data.exists():
        print(f"LoCoMo data not found at {data}; set AGENT_MEMORY_LOCOMO")
        return
    conversations = load(data)[: 1 if quick else None]
    try:
        from langgraph_checkpoint_agent_memory.store.embed import WordLlamaEmbeddings

        embedder: Any = WordLlamaEmbeddings()
        embedder.embed_query("warm up")
    except Exception as exc:  # the embed extra is optional
        print(f"no default embedder ({exc}); vector and hybrid modes are skipped")
        embedder = None
    modes = ["lexical", "bm25-baseline", "build_context"]
    if embedder is not None:
        modes += ["vector", "hybrid", "embedder-baseline"]
    totals: dict[str, dict[str, list[dict[str, float]]]] = {m: defaultdict(list) for m in modes}
    for conv in conversations:
        items = turns(conv)
        by_id = {t["id"]: t for t in items}
        questions = [q for q in conv["qa"] if q.get("category") in CATEGORIES and q.get("evidence")]
        if quick:
            questions = questions[:60]
        stores = {"lexical": create_store()}
        if embedder is not None:
            # the three modes index the same text: lexical is the hybrid store without vectors
            index = {"dims": embedder.dims, "embed": embedder, "fields": ["text"]}
            stores["lexical"] = create_store(index=index, weights=(1.0, 0.0))
            stores["vector"] = create_store(index=index, weights=(0.0, 1.0))
            stores["hybrid"] = create_store(index=index)  # default fusion
        ns = ("locomo", conv["sample_id"])
        from langgraph.store.base import PutOp

        for store in stores.values():
            store.batch([PutOp(ns, t["id"], {"text": t["text"], "date": t["date"]}) for t in items])
        docs = {t["id"]: t["text"] for t in items}
        matrix = None
        if embedder is not None:
            ids = list(docs)
            matrix = np.asarray(embedder.embed_documents([docs[i] for i in ids]), dtype=np.float32)
            matrix /= np.linalg.norm(matrix, axis=1, keepdims=True) + 1e-9
        for q in questions:
            evidence = {e.strip() for e in q["evidence"] if e.strip() in by_id}
            if not evidence:
                continue
            category = CATEGORIES[q["category"]]
            for mode, store in stores.items():
                ranked = [i.key for i in store.search(ns, query=q["question"], limit=10)]
                totals[mode][category].append(score(ranked, evidence))
            bm = bm25(_WORD.findall(q["question"].lower()), docs)
            totals["bm25-baseline"][category].append(
                score(sorted(bm, key=lambda k: -bm[k])[:10], evidence)
            )
            if matrix is not None:
                qv = np.asarray(embedder.embed_query(q["question"]), dtype=np.float32)
                sims = matrix @ (qv / (np.linalg.norm(qv) + 1e-9))
                top = [ids[i] for i in np.argsort(-sims)[:10]]
                totals["embedder-baseline"][category].append(score(top, evidence))
        _build_context(conv, items, questions, by_id, embedder, totals["build_context"])
        for store in stores.values():
            store.close()
    results: dict[str, Any] = {"quick": quick, "conversations": len(conversations)}
    rows = []
    chart: dict[str, dict[str, float]] = {}
    for mode in modes:
        per_cat = {}
        everything = [s for scores in totals[mode].values() for s in scores]
        for category, scores in sorted(totals[mode].items()):
            per_cat[category] = {m: float(np.mean([s[m] for s in scores])) for m in scores[0]}
            per_cat[category]["n"] = len(scores)
        overall = {m: float(np.mean([s[m] for s in everything])) for m in everything[0]}
        overall["n"] = len(everything)
        results[mode] = {"overall": overall, "by_category": per_cat}
        rows.append(
            (
                mode,
                f"{overall['r@1']:.3f}",
                f"{overall['r@5']:.3f}",
                f"{overall['r@10']:.3f}",
                f"{overall['mrr']:.3f}",
                str(overall["n"]),
            )
        )
        chart[mode] = {"r@1": overall["r@1"], "r@5": overall["r@5"], "r@10": overall["r@10"]}
    print_table(
        "LoCoMo evidence retrieval over dialogue turns (categories 1-4)",
        rows,
        ("mode", "r@1", "r@5", "r@10", "MRR", "questions"),
    )
    write_results(out, "locomo", results)
    bar_chart(
        out,
        "locomo",
        {
            k: v
            for k, v in (
                (m, {mode: chart[mode][m] for mode in chart}) for m in ("r@1", "r@5", "r@10")
            )
        },
        "share of questions",
    )
