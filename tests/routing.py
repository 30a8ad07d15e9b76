"""What Citus does with the statements the package sends: one shard, or many.

:class:`~tests.helpers.Recorder` records every statement (with its parameters) a saver or
store sends through ``db.run``; :func:`routing` asks the coordinator to ``EXPLAIN`` one, and
says how many shard tasks it runs and whether it goes through the coordinator in steps (a
distributed subplan, rows pulled to the coordinator, a repartition). A router query is one
task, no step.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import psycopg

from tests.helpers import Recorder


@dataclass(frozen=True)
class Routing:
    """How Citus runs a statement."""

    text: str
    tasks: list[int]
    steps: list[str]

    @property
    def router(self) -> bool:
        """One shard, in one step: what every hot statement must be."""
        return self.tasks == [1] and not self.steps

    @property
    def local(self) -> bool:
        """Run by the coordinator alone, naming no table of the package: no shard at all
        (the advisory lock of a memory scope's shard key, taken first by its writers)."""
        return not self.tasks and not self.steps and not re.search(r"\bam_\w+", self.text)

    def __str__(self) -> str:
        return f"tasks={self.tasks} steps={self.steps}: {self.text[:160]}"


#: Plan lines that show a statement runs through the coordinator in more than one step
#: (PostgreSQL's own ``SubPlan``, a correlated subquery inside a shard's task, is not one).
STEP_MARKERS = ("Distributed Subplan", "pull to coordinator", "repartition")


def routing(url: str, text: str, params: Any) -> Routing:
    """``EXPLAIN`` of statement ``text`` with ``params`` on the coordinator at ``url``."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute("EXPLAIN " + text, params).fetchall()
    plan = "\n".join(str(r[0]) for r in rows)
    tasks = [int(n) for n in re.findall(r"Task Count: (\d+)", plan)]
    steps = [m for m in STEP_MARKERS if m.lower() in plan.lower()]
    return Routing(text, tasks, steps)


def not_routed(url: str, recorder: Recorder) -> list[str]:
    """The statements ``recorder`` saw that are not router queries (empty: all are); a
    statement that touches no shard (:attr:`Routing.local`) is none of them."""
    seen: set[str] = set()
    out: list[str] = []
    for text, params in recorder.sent:
        if text in seen:
            continue
        seen.add(text)
        found = routing(url, text, params)
        if not (found.router or found.local):
            out.append(str(found))
    return out
