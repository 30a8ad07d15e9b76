"""``python -m benchmarks compare REV [SUITE...]``: the code at ``REV`` against the working tree.

A change that should not alter speed is measured before and after in one run: the suites run
on a checkout of ``REV`` and on this tree, alternately (before, after, after, before, ...), so
that a machine growing busier or quieter during the run weighs on both sides alike. Each run
is a separate process with its own copy of the package on ``PYTHONPATH``.

The figure compared is each suite's own ratio of ours over LangGraph's peer (measured
interleaved in one process, so it carries little of the machine's noise), and our medians
beside them as context. For each, the median over the repeats before and after, and after
over before: about 1 is no change; the spread between the repeats of one side is the noise.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def leaves(value: Any, path: str = "") -> Iterator[tuple[str, float]]:
    """``(path, number)`` of every number in a results file that speaks of our code: the
    ``ratios`` entries, and our cases' medians (or their plain figures, such as invokes/s)."""
    if isinstance(value, dict):
        for key, inner in value.items():
            if key in ("machine", "p99_us", "n"):
                continue
            yield from leaves(inner, f"{path}/{key}" if path else str(key))
    elif (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and ("/ratios/" in path or "ours" in path)
    ):
        yield path, float(value)


def run_once(tree: Path, suites: list[str], quick: bool, out: Path) -> dict[str, float]:
    """Run the suites with the package and benchmarks of ``tree``; their figures by path."""
    command = [sys.executable, "-m", "benchmarks", "run", *suites, "--out", str(out)]
    if quick:
        command.append("--quick")
    # A checkout of REV lies in a temporary folder, where the default path to the LoCoMo data
    # (beside the repository) leads nowhere: both sides read this tree's.
    locomo = ROOT.parent / "shared" / "data" / "locomo"
    env = {"AGENT_MEMORY_LOCOMO": str(locomo), **os.environ, "PYTHONPATH": str(tree)}
    subprocess.run(command, cwd=tree, env=env, check=True)
    figures: dict[str, float] = {}
    for result in sorted(out.glob("*.json")):
        for path, number in leaves(json.loads(result.read_text())):
            figures[f"{result.stem}:{path}"] = number
    return figures


def compare(rev: str, suites: list[str], *, quick: bool, repeat: int) -> list[dict[str, Any]]:
    """Run before (``rev``) and after (this tree) ``repeat`` times each, alternating; one row
    per figure found on both sides."""
    with tempfile.TemporaryDirectory(prefix="bench-compare-") as tmp:
        before_tree = Path(tmp) / "before"
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(before_tree), rev],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
        try:
            runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
            for i in range(repeat):
                order = ("before", "after") if i % 2 == 0 else ("after", "before")
                for side in order:
                    tree = before_tree if side == "before" else ROOT
                    print(f"== {side} ({rev if side == 'before' else 'this tree'}), run {i + 1}")
                    out = Path(tmp) / f"{side}-{i}"
                    runs[side].append(run_once(tree, suites, quick, out))
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(before_tree)],
                cwd=ROOT,
                check=False,
                capture_output=True,
            )
    rows = []
    for path in sorted(set.intersection(*(set(r) for r in runs["before"] + runs["after"]))):
        before = statistics.median(r[path] for r in runs["before"])
        after = statistics.median(r[path] for r in runs["after"])
        rows.append(
            {"figure": path, "before": before, "after": after, "change": after / before - 1}
        )
    return rows


def print_rows(rows: list[dict[str, Any]]) -> None:
    width = max((len(r["figure"]) for r in rows), default=10)
    print(f"{'figure':<{width}}  {'before':>12}  {'after':>12}  {'change':>8}")
    for r in rows:
        figures = f"{r['before']:>12.4g}  {r['after']:>12.4g}  {r['change']:>+8.1%}"
        print(f"{r['figure']:<{width}}  {figures}")
