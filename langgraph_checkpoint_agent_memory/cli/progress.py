"""Progress of a command that can run long, shown on a terminal only.

:func:`progress` yields ``report(done, total)``, the signature of the ``on_progress``
callbacks of the package's long operations, so a command passes it on as is. Piped, or with
``--json``, nothing is shown (``rich`` is not even loaded): scripts read stdout unchanged.

Example:
    ```python
    import argparse

    from langgraph_checkpoint_agent_memory import create_store

    args = argparse.Namespace(json=False)  # the command's arguments
    with create_store("sqlite:///memory.db") as store:
        with progress(args, "removing expired store items", "items") as report:
            store.sweep(on_progress=report)
    ```
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

#: ``report(done, total)``: ``done`` units so far, ``total`` when known (else ``None``).
Report = Callable[[int, "int | None"], None]


class Bars:
    """``bars(done, total)`` reports the first bar's work; ``bars.part(...)`` adds a bar."""

    def __init__(self, bar: Any = None, description: str = "", unit: str = "") -> None:
        self._bar = bar
        self._first = self.part(description, unit)

    def __call__(self, done: int, total: int | None) -> None:
        self._first(done, total)

    def part(self, description: str, unit: str = "") -> Report:
        """A bar of its own for another part of the work (shown under the others)."""
        bar = self._bar
        if bar is None:  # progress not shown
            return lambda done, total: None
        task = bar.add_task(description, total=None, unit=unit)
        return lambda done, total: bar.update(task, completed=done, total=total)


@contextmanager
def progress(args: argparse.Namespace, description: str, unit: str = "") -> Iterator[Bars]:
    """Show the progress of the work done inside the ``with`` block (see the module).

    Args:
        args: The command's arguments (``--json``).
        description: What is being done, e.g. ``"encrypting store items"``.
        unit: What ``done`` counts (``"items"``, ``"threads"``), shown after the count.

    Yields:
        ``report(done, total)``: call it with the units done so far and the total when known;
        a bar with the rate and the time left when the total is known, else the count, the
        rate and the time spent (:class:`Bars`: ``report.part(...)`` adds a bar).
    """
    if getattr(args, "json", False) or not sys.stderr.isatty():
        yield Bars()
        return
    from rich import progress as rp
    from rich.console import Console
    from rich.text import Text

    class Rate(rp.ProgressColumn):
        def render(self, task: Any) -> Text:
            speed = task.finished_speed or task.speed
            return Text("" if speed is None else f"{speed:,.1f}/s")

    columns = (
        rp.SpinnerColumn(),
        rp.TextColumn("{task.description}"),
        rp.BarColumn(),
        rp.MofNCompleteColumn(),
        rp.TextColumn("{task.fields[unit]}"),
        rp.TaskProgressColumn(),
        Rate(),
        rp.TextColumn("elapsed"),
        rp.TimeElapsedColumn(),
        rp.TextColumn("left"),
        rp.TimeRemainingColumn(),
    )
    with rp.Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        yield Bars(bar, description, unit)
