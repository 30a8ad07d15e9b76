"""How fast the ``agent-memory`` command answers: ``--help``, and the read commands
``scopes`` and ``facts`` on a small SQLite file (the demo's memory, written by
:func:`run_demo`) and on the demo's own database as ``make demo`` leaves it (written by
``agent-memory demo --reset`` in a folder of its own, read there by the relative URL the
demo prints), each a process of its own as a user starts it, interleaved with a bare
``python -c pass`` (the interpreter's own start); wall medians (target: at most 0.4 s each).

The package's modules are compiled first (as an installed wheel's are), so the figures do
not include compiling them in an environment that writes no bytecode; one case shows what
that costs: ``scopes`` on the demo's database with the package's modules not compiled and
no bytecode written (``PYTHONDONTWRITEBYTECODE``, as in an editable install whose
``__pycache__`` is missing or stale), which Python then compiles on every run."""

from __future__ import annotations

import compileall
import os
import shutil
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
#: The case that shows what compiling the package on every run costs (not held to the target:
#: an installed wheel, or Python writing bytecode on the first run, compiles it once).
UNCOMPILED = "demo's database: scopes, not compiled"


def _process(
    args: list[str], *, cwd: Path | None = None, package_at: Path | None = None, **env: str
) -> Callable[[], None]:
    """Run ``args`` as a process in ``cwd`` (outputs discarded), the package imported from
    ``package_at`` (else this tree), with ``env`` added; a failure stops the suite."""
    where = package_at or Path(package.__file__).parent.parent
    environment = {**os.environ, "PYTHONPATH": str(where), **env}

    def call() -> None:
        subprocess.run(args, stdout=subprocess.DEVNULL, check=True, env=environment, cwd=cwd)

    return call


def _uncompiled(into: Path) -> Path:
    """A copy of the package without bytecode, in ``into``."""
    root = Path(package.__file__).parent
    shutil.copytree(root, into / root.name, ignore=shutil.ignore_patterns("__pycache__"))
    return into


def run(*, quick: bool, out: Path) -> None:
    """Each command as a process, interleaved; its wall median against the target."""
    rounds, per_round = (3, 2) if quick else (10, 5)
    compileall.compile_dir(Path(package.__file__).parent, quiet=1)
    with tempfile.TemporaryDirectory(prefix="bench-cli-") as tmp:
        db = Path(tmp) / "memory.db"
        with open(os.devnull, "w") as devnull:
            run_demo(f"sqlite:///{db}", console=Console(file=devnull))
        url = ["--url", str(db)]
        # the demo's own database, as `make demo` writes it and as its last line says to
        # read it: from the folder it was written in, by a relative URL
        demo_dir = Path(tmp) / "demo"
        demo_dir.mkdir()
        _process([*COMMAND, "demo", "--reset"], cwd=demo_dir)()
        demo = ["--url", "sqlite:///agent-memory-demo.db"]
        raw = _uncompiled(Path(tmp) / "uncompiled")
        cases = {
            "python -c pass": _process([sys.executable, "-c", "pass"]),
            "agent-memory --help": _process([*COMMAND, "--help"]),
            "agent-memory scopes": _process([*COMMAND, "scopes", *url]),
            "agent-memory facts SCOPE": _process([*COMMAND, "facts", "user=alice", *url]),
            "agent-memory facts SCOPE --all": _process(
                [*COMMAND, "facts", "user=alice", "--all", *url]
            ),
            "demo's database: scopes": _process([*COMMAND, "scopes", *demo], cwd=demo_dir),
            "demo's database: facts SCOPE": _process(
                [*COMMAND, "facts", "user=alice", *demo], cwd=demo_dir
            ),
            UNCOMPILED: _process(
                [*COMMAND, "scopes", *demo],
                cwd=demo_dir,
                package_at=raw,
                PYTHONDONTWRITEBYTECODE="1",
            ),
        }
        summary = interleave(cases, rounds=rounds, per_round=per_round).summary()
    rows = [
        (
            name,
            f"{s['median_us'] / 1e6:.3f}",
            f"{s['p99_us'] / 1e6:.3f}",
            ""
            if name.startswith("python") or name == UNCOMPILED
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
