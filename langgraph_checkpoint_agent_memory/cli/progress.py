"""Progress of a command that can run long, shown on a terminal only.

:func:`progress` opens a bar on stderr when stderr is a terminal and ``--json`` is off, and
yields what to call as the work advances: ``report(done, total)``, the signature of the
``on_progress`` callbacks of the package's long operations (``encrypt_plaintext``,
``sweep``, ``rotate``, ``migrate``, ``erase``), so a command passes it on as is. Piped, or
with ``--json``, nothing is shown and the callback does nothing (not even load ``rich``):
scripts read stdout and stderr unchanged.

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

#: ``report(done, total)``: ``done`` units so far, ``total`` when known (else ``None``).
Report = Callable[[int, "int | None"], None]


def shown(args: argparse.Namespace) -> bool:
    """Whether a command's progress is shown: stderr is a terminal, and ``--json`` is off."""
    return not getattr(args, "json", False) and sys.stderr.isatty()


def _quiet(done: int, total: int | None) -> None:
    """The report of a command whose progress is not shown."""


@contextmanager
def progress(args: argparse.Namespace, description: str, unit: str = "") -> Iterator[Report]:
    """Show the progress of the work done inside the ``with`` block (see the module).

    Args:
        args: The command's arguments (``--json``).
        description: What is being done, e.g. ``"encrypting store items"``.
        unit: What ``done`` counts (``"items"``, ``"threads"``), shown after the count.

    Yields:
        ``report(done, total)``: call it with the units done so far and the total when known;
        a bar with the rate and the time left when the total is known, else the count, the
        rate and the time spent.
    """
    if not shown(args):
        yield _quiet
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TaskProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = (
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn(unit),
        TaskProgressColumn(show_speed=True),
        TextColumn("elapsed"),
        TimeElapsedColumn(),
        TextColumn("left"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(description, total=None)

        def report(done: int, total: int | None) -> None:
            bar.update(task, completed=done, total=total)

        yield report
