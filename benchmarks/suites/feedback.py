"""Pseudo-relevance feedback on LoCoMo: the ``locomo`` suite's units (turns, facts,
episodes) searched lexically and hybrid with the store's feedback on (recall's default; an
opt-in for ``store.search``) and off,
question by question on the same stores' data, with McNemar's exact test of on against off
on hit@5 (``+a -b``: questions only feedback / only the plain query finds), overall and on
the temporal questions (category 2), and each search's p50 in milliseconds (one SQLite
store in memory per conversation and mode, interleaved question by question).

The feedback settings themselves (``Feedback(docs=4, terms=10, weight=0.5)``) were chosen
on a grid (docs 3-5, terms 5-20, weight 0.2-0.5) by leaving each conversation out in turn
and picking the best setting on the other four: every fold picked ``(4, 10, 0.5)`` but one,
which picked ``(4, 5, 0.5)``.
"""

from __future__ import annotations

import importlib
import os
import statistics
import time
from pathlib import Path
from typing import Any

from langgraph.store.base import PutOp

from benchmarks.harness import print_table, write_results
from langgraph_checkpoint_agent_memory import AgentMemory, AgentMemoryStore, create_store

#: ``benchmarks.suites`` binds each suite's ``run`` under the module's name.
L = importlib.import_module("benchmarks.suites.locomo")
WEIGHTS = {"lexical": (1.0, 0.0), "hybrid": (1.0, 0.6)}


def _stores(embedder: Any) -> dict[tuple[str, bool], AgentMemoryStore]:
    index = {"dims": embedder.dims, "embed": embedder}
    stores = {}
    for mode, weights in WEIGHTS.items():
        for on in (False, True):
            stores[(mode, on)] = create_store(index=index, weights=weights, feedback=on)
    return stores


def evaluate(
    conversations: list[dict[str, Any]], embedder: Any, max_questions: int | None
) -> tuple[dict[tuple[str, str, bool], Any], dict[tuple[str, str, bool], list[float]]]:
    """``{(unit, mode, feedback on): Tally}`` and the seconds of each search."""
    tallies: dict[tuple[str, str, bool], Any] = {}
    seconds: dict[tuple[str, str, bool], list[float]] = {}
    for conv in conversations:
        scope = {"user_id": conv["sample_id"]}
        qs = L.questions(conv)
        if max_questions is not None and len(qs) > max_questions:
            qs = qs[:: len(qs) // max_questions][:max_questions]
        stores = _stores(embedder)
        memory = AgentMemory(next(iter(stores.values())))
        namespaces = {
            "turns": ("locomo", conv["sample_id"]),
            "facts": memory.namespace(scope, "facts"),
            "episodes": memory.namespace(scope, "episodes"),
        }
        for kind in L.KINDS:
            units = L.UNITS[kind](conv)
            ns = namespaces[kind]
            for store in stores.values():
                if kind == "turns":
                    store.batch([PutOp(ns, u.key, {"text": u.text}, index=["text"]) for u in units])
                else:
                    L.write_as_memory(store, ns, units)
            for q in qs:
                evidence = {u.key for u in units if u.covers & q["evidence"]}
                embedder.embed_query(q["question"])  # embedded once, outside the timing
                for (mode, on), store in stores.items():
                    start = time.perf_counter()
                    found = store.search(ns, query=q["question"], limit=10)
                    seconds.setdefault((kind, mode, on), []).append(time.perf_counter() - start)
                    ranked = [i.key for i in found if mode == "hybrid" or (i.score or 0) > 0]
                    tally = tallies.setdefault((kind, mode, on), L.Tally())
                    tally.add(L.CATEGORIES[q["category"]], L.score(ranked, evidence))
        for store in stores.values():
            store.close()
    return tallies, seconds


def _hits(tally: Any, category: str | None) -> list[float]:
    return [
        s["hit@5"]
        for s, c in zip(tally.scores, tally.categories, strict=True)
        if category in (None, c)
    ]


def summarize(
    tallies: dict[tuple[str, str, bool], Any], seconds: dict[tuple[str, str, bool], list[float]]
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind in L.KINDS:
        for mode in WEIGHTS:
            row: dict[str, Any] = {}
            for name, category in (("overall", None), ("temporal", "temporal")):
                off = _hits(tallies[(kind, mode, False)], category)
                on = _hits(tallies[(kind, mode, True)], category)
                test = L.mcnemar(on, off)
                row[name] = {
                    "n": len(on),
                    "hit@5_off": sum(off) / len(off),
                    "hit@5_on": sum(on) / len(on),
                    "only_on": test["only_a"],
                    "only_off": test["only_b"],
                    "p": test["p"],
                }
            for flag in (False, True):
                row[f"p50_ms_{'on' if flag else 'off'}"] = 1000 * statistics.median(
                    seconds[(kind, mode, flag)]
                )
            out.setdefault(kind, {})[mode] = row
    return out


def run(*, quick: bool, out: Path) -> None:
    data = Path(os.environ.get("AGENT_MEMORY_LOCOMO", L.DEFAULT_DATA))
    if not data.exists():
        print(f"LoCoMo data not found at {data}; set AGENT_MEMORY_LOCOMO")
        return
    embedder = L.default_embedder()
    if embedder is None:
        return
    conversations = L.load(data)[: 1 if quick else None]
    tallies, seconds = evaluate(conversations, embedder, L.QUICK_QUESTIONS if quick else None)
    summary = summarize(tallies, seconds)
    rows = []
    for kind, modes in summary.items():
        for mode, r in modes.items():
            cells = [
                f"{r[c]['hit@5_off']:.3f} -> {r[c]['hit@5_on']:.3f} "
                f"+{r[c]['only_on']}/-{r[c]['only_off']} p={r[c]['p']:.3g}"
                for c in ("overall", "temporal")
            ]
            rows.append((kind, mode, *cells, f"{r['p50_ms_off']:.2f} -> {r['p50_ms_on']:.2f}"))
    print_table(
        f"LoCoMo hit@5, feedback off -> on, {len(conversations)} conversation(s)",
        rows,
        ("unit", "mode", "overall (McNemar)", "temporal (McNemar)", "search p50 ms"),
    )
    write_results(out, "feedback", {"quick": quick, "conversations": len(conversations), **summary})
