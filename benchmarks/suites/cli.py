"""How fast the ``agent-memory`` command answers: ``--help``, and the read commands
``scopes`` and ``facts`` on a small SQLite file (the demo's memory), each a process of its
own as a user starts it, interleaved with a bare ``python -c pass`` (the interpreter's own
start); wall medians (target: at most 0.4 s each).

The package's modules are compiled first (as an installed wheel's are), so the figures do
not include compiling them in an environment that writes no bytecode."""

from __future__ import annotations

import compileall
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from rich.console import Console

import langgraph_checkpoint_agent_memory as package
from benchmarks.harness import interleave, print_table, write_results
from langgraph_checkpoint_agent_memory.demo import run_demo

#: The issue's bound on a command's answer, in seconds.
TARGET_S = 0.4
COMMAND = [sys.executable, "-m", "langgraph_checkpoint_agent_memory.cli"]


def _process(args: list[str]) -> Callable[[], None]:
    """Run ``args`` as a process (outputs discarded); a failure stops the suite."""
    env = {**os.environ, "PYTHONPATH": str(Path(package.__file__).parent.parent)}

    def call() -> None:
        subprocess.run(args, stdout=subprocess.DEVNULL, check=True, env=env)

    return call


def run(*, quick: bool, out: Path) -> None:
    """Each command as a process, interleaved; its wall median against the target."""
    rounds, per_round = (3, 2) if quick else (10, 5)
    compileall.compile_dir(Path(package.__file__).parent, quiet=1)
    with tempfile.TemporaryDirectory(prefix="bench-cli-") as tmp:
        db = Path(tmp) / "memory.db"
        with open(os.devnull, "w") as devnull:
            run_demo(f"sqlite:///{db}", console=Console(file=devnull))
        url = ["--url", str(db)]
        cases = {
            "python -c pass": _process([sys.executable, "-c", "pass"]),
            "agent-memory --help": _process([*COMMAND, "--help"]),
            "agent-memory scopes": _process([*COMMAND, "scopes", *url]),
            "agent-memory facts SCOPE": _process([*COMMAND, "facts", "user=alice", *url]),
            "agent-memory facts SCOPE --all": _process(
                [*COMMAND, "facts", "user=alice", "--all", *url]
            ),
        }
        summary = interleave(cases, rounds=rounds, per_round=per_round).summary()
    rows = [
        (
            name,
            f"{s['median_us'] / 1e6:.3f}",
            f"{s['p99_us'] / 1e6:.3f}",
            ""
            if name.startswith("python")
            else ("ok" if s["median_us"] / 1e6 <= TARGET_S else "over"),
        )
        for name, s in summary.items()
    ]
    print_table(
        "the command line's answer, a process each (wall seconds)",
        rows,
        ("command", "median", "p99", f"≤{TARGET_S} s"),
    )
    write_results(out, "cli", {"quick": quick, "target_s": TARGET_S, "cases": summary})
