"""A throwaway Citus cluster for tests and benchmarks: a coordinator and workers on loopback.

Each node is a :class:`~langgraph_checkpoint_agent_memory.testing.LocalPostgres` of the
machine's server with ``shared_preload_libraries = 'citus'``. Citus keeps its metadata per
database, so :meth:`LocalCitus.create_database` creates the database on every node, creates
the extension in each, and registers the coordinator and the workers in the coordinator's
copy; the URL it returns is the coordinator's, which is what an application connects to.

Citus is not in Debian's registry; ``bash ../shared/citus/install.sh`` (or a package of your
distribution) installs it into the machine's PostgreSQL. :func:`citus_binaries` says whether it
is there.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from langgraph_checkpoint_agent_memory.testing import LocalPostgres, PgBinaries, machine_binaries

#: Why a Citus cluster cannot start here.
NO_CITUS = (
    "Citus is not installed for this machine's PostgreSQL "
    "(bash ../shared/citus/install.sh installs it into Debian's postgresql-15)"
)
#: Workers of the test cluster: two, so that a statement that is not a router query shows
#: up as a plan with tasks on more than one node.
DEFAULT_WORKERS = 2


def _pg_config(binaries: PgBinaries, flag: str) -> Path | None:
    pg_config = binaries.bindir / "pg_config"
    if not pg_config.exists():
        return None
    try:
        out = subprocess.run([str(pg_config), flag], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return Path(out.stdout.strip())


def citus_binaries() -> PgBinaries | None:
    """The machine's PostgreSQL binaries when the Citus extension is installed for them
    (its control file and its library, which ``shared_preload_libraries`` loads)."""
    binaries = machine_binaries()
    if binaries is None:
        return None
    share, lib = _pg_config(binaries, "--sharedir"), _pg_config(binaries, "--pkglibdir")
    if share is None or lib is None:
        return None
    if (share / "extension" / "citus.control").exists() and (lib / "citus.so").exists():
        return binaries
    return None


class LocalCitus:
    """``with LocalCitus() as citus: citus.create_database()`` gives a coordinator URL of a
    database distributed over ``workers`` worker nodes.

    Args:
        workers: How many worker nodes to start besides the coordinator.
        fsync: As :class:`LocalPostgres`: off for tests, on for benchmarks.
        settings: Extra server settings for every node.
    """

    def __init__(
        self,
        workers: int = DEFAULT_WORKERS,
        *,
        fsync: bool = True,
        settings: dict[str, str] | None = None,
    ) -> None:
        binaries = citus_binaries()
        if binaries is None:
            raise RuntimeError(NO_CITUS)
        node_settings = {
            "shared_preload_libraries": "citus",
            # each test database adds connections from the coordinator to every worker
            "max_connections": "300",
            **(settings or {}),
        }
        self.coordinator = LocalPostgres(binaries, fsync=fsync, settings=node_settings)
        self.workers = [
            LocalPostgres(binaries, fsync=fsync, settings=node_settings) for _ in range(workers)
        ]
        self.url = ""

    @property
    def nodes(self) -> list[LocalPostgres]:
        return [self.coordinator, *self.workers]

    def start(self) -> str:
        """Start every node; returns the coordinator's superuser URL (its ``postgres``
        database, without Citus: use :meth:`create_database`)."""
        try:
            for node in self.nodes:
                node.start()
        except Exception:
            self.stop()
            raise
        self.url = self.coordinator.url
        return self.url

    def create_database(self, name: str | None = None, *, citus: bool = True) -> str:
        """A new database on every node, with Citus set up in it (unless ``citus`` is
        false: then :meth:`add_citus` does it later, as for a database that held data
        before it was distributed); returns the coordinator's URL of it."""

        name = name or f"t_{uuid.uuid4().hex[:12]}"
        self._on_every_node(lambda node: node.create_database(name))
        url = self.coordinator.url.rsplit("/", 1)[0] + f"/{name}"
        if citus:
            self.add_citus(url)
        return url

    def add_citus(self, url: str) -> None:
        """Create the extension in database ``url`` on every node and register the
        coordinator and the workers in it."""
        import psycopg

        name = url.rsplit("/", 1)[1]

        def extension(node: LocalPostgres) -> None:
            node_url = node.url.rsplit("/", 1)[0] + f"/{name}"
            with psycopg.connect(node_url, autocommit=True) as conn:
                conn.execute("CREATE EXTENSION IF NOT EXISTS citus")

        self._on_every_node(extension)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(
                "SELECT citus_set_coordinator_host('127.0.0.1', %s)", (self.coordinator.port,)
            )
            for worker in self.workers:
                conn.execute("SELECT citus_add_node('127.0.0.1', %s)", (worker.port,))

    def drop_database(self, url: str) -> None:
        """Drop a database :meth:`create_database` made, on every node."""
        import psycopg

        name = url.rsplit("/", 1)[1]

        def drop(node: LocalPostgres) -> None:
            with psycopg.connect(node.url, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

        self._on_every_node(drop)

    def _on_every_node(self, step: Callable[[LocalPostgres], object]) -> None:
        """Run ``step`` on every node at once (each node is a server of its own), raising
        the first error once all are done."""
        with ThreadPoolExecutor(max_workers=len(self.nodes)) as pool:
            for done in [pool.submit(step, node) for node in self.nodes]:
                done.result()

    def stop(self) -> None:
        """Stop every node and remove its folder."""
        for node in self.nodes:
            node.stop()

    @property
    def log_files(self) -> list[Path]:
        return [node.root / "server.log" for node in self.nodes]

    def __enter__(self) -> LocalCitus:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
