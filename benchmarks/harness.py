"""Timing, statistics and reporting shared by every suite.

Cases of one comparison run interleaved (round-robin, in a shuffled order each round) so a
noisy neighbour slows ours and the peer's alike; we report medians and p99 per operation and
the ratio ours/peer, which is what survives noise.
"""

from __future__ import annotations

import json
import platform
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).parent / "results"


@dataclass
class Comparison:
    """Per-operation samples (seconds) of several cases measured interleaved."""

    title: str
    samples: dict[str, list[float]] = field(default_factory=dict)

    def summary(self) -> dict[str, dict[str, float]]:
        return {
            name: {
                "median_us": statistics.median(xs) * 1e6,
                "p99_us": percentile(xs, 99) * 1e6,
                "n": len(xs),
            }
            for name, xs in self.samples.items()
        }


def percentile(xs: list[float], q: float) -> float:
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q / 100))]


def interleave(
    cases: dict[str, Callable[[], Any]],
    *,
    rounds: int,
    per_round: int,
    seed: int = 1,
    per_case: dict[str, int] | None = None,
) -> Comparison:
    """Call each case ``per_round`` times per round (``per_case`` overrides that for some,
    the slow ones), cases shuffled every round."""
    rng = random.Random(seed)
    comparison = Comparison(title="")
    names = list(cases)
    counts = {name: (per_case or {}).get(name, per_round) for name in names}
    for name in names:  # warm-up
        for _ in range(max(1, counts[name] // 4)):
            cases[name]()
        comparison.samples[name] = []
    clock = time.perf_counter
    for _ in range(rounds):
        rng.shuffle(names)
        for name in names:
            fn, out = cases[name], comparison.samples[name]
            for _ in range(counts[name]):
                start = clock()
                fn()
                out.append(clock() - start)
    return comparison


def interleave_batches(
    cases: dict[str, tuple[str, Callable[[], Any]]],
    *,
    loop: Any,
    rounds: int,
    per_round: int,
    seed: int = 1,
) -> Comparison:
    """Like :func:`interleave`, for a mix of sync functions and async ones.

    An async case runs its ``per_round`` calls inside one ``run_until_complete`` and times
    each awaited call, so the event loop's start-up is not charged to the operation.
    """
    rng = random.Random(seed)
    comparison = Comparison(title="")
    clock = time.perf_counter

    async def timed_async(fn: Callable[[], Any], n: int, out: list[float]) -> None:
        for _ in range(n):
            start = clock()
            await fn()
            out.append(clock() - start)

    def run(kind: str, fn: Callable[[], Any], n: int, out: list[float]) -> None:
        if kind == "async":
            loop.run_until_complete(timed_async(fn, n, out))
            return
        for _ in range(n):
            start = clock()
            fn()
            out.append(clock() - start)

    names = list(cases)
    for name in names:
        run(*cases[name], max(1, per_round // 4), [])  # warm-up
        comparison.samples[name] = []
    for _ in range(rounds):
        rng.shuffle(names)
        for name in names:
            run(*cases[name], per_round, comparison.samples[name])
    return comparison


def ratio(summary: dict[str, dict[str, float]], ours: str, peer: str) -> float:
    return summary[ours]["median_us"] / summary[peer]["median_us"]


def machine() -> dict[str, Any]:
    import os

    return {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
    }


def write_results(out: Path, suite: str, payload: dict[str, Any]) -> Path:
    path = out / f"{suite}.json"
    path.write_text(json.dumps({"machine": machine(), **payload}, indent=2, default=float))
    return path


def print_table(title: str, rows: list[tuple[str, ...]], header: tuple[str, ...]) -> None:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    print(f"\n{title}")
    print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    for row in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)))


def bar_chart(out: Path, suite: str, groups: dict[str, dict[str, float]], ylabel: str) -> None:
    """One PNG: a group of bars per operation, a bar per case. Skipped without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    ops = list(groups)
    cases = sorted({c for g in groups.values() for c in g})
    width = 0.8 / max(1, len(cases))
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(ops)), 4))
    for i, case in enumerate(cases):
        ax.bar(
            [x + i * width for x in range(len(ops))],
            [groups[op].get(case, 0) for op in ops],
            width,
            label=case,
        )
    ax.set_xticks([x + width * (len(cases) - 1) / 2 for x in range(len(ops))], ops)
    ax.set_ylabel(ylabel)
    ax.set_title(suite)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / f"{suite}.png", dpi=110)
    plt.close(fig)
