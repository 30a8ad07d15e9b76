"""A throwaway PostgreSQL cluster started from the machine's own server binaries.

Tests and benchmarks use it when no server URL is given: ``initdb`` into a temporary folder,
``pg_ctl start`` on loopback with a free port, ``pg_ctl stop`` and removal at the end.
PostgreSQL refuses to run as root, so as root the cluster is created and run as the
``postgres`` system user (``runuser -u postgres --``); elsewhere as the current user.
"""

from __future__ import annotations

import getpass
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

PG_BIN_ENV = "AGENT_MEMORY_PG_BIN"


def find_pg_bin() -> Path | None:
    """The folder holding ``initdb`` and ``pg_ctl``, or ``None``."""
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
        if (Path(folder) / "initdb").exists() and (Path(folder) / "pg_ctl").exists():
            return Path(folder)
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalPostgres:
    """``with LocalPostgres() as pg: pg.url`` gives a superuser URL on 127.0.0.1.

    Args:
        fsync: Keep PostgreSQL's fsync on (benchmarks) or off (faster tests; crash safety
            against a killed *client* process does not depend on it).
    """

    def __init__(self, *, fsync: bool = True, base_dir: str | None = None) -> None:
        bindir = find_pg_bin()
        if bindir is None:
            raise RuntimeError(
                f"no PostgreSQL server binaries found (install postgresql, or set {PG_BIN_ENV} "
                "to the folder holding initdb and pg_ctl)"
            )
        self.bindir = bindir
        self.fsync = fsync
        self.as_root = os.geteuid() == 0
        self.user = "postgres" if self.as_root else getpass.getuser()
        self.root = Path(tempfile.mkdtemp(prefix="agent-memory-pg-", dir=base_dir))
        self.data = self.root / "data"
        self.port = _free_port()
        self.url = f"postgresql://{self.user}@127.0.0.1:{self.port}/postgres"
        self._started = False

    def _run(self, *args: str) -> None:
        cmd = [str(self.bindir / args[0]), *args[1:]]
        if self.as_root:
            # runuser lives in sbin, which a minimal PATH (cron, env -i, some CI) leaves out
            search = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
            cmd = [shutil.which("runuser", path=search) or "runuser", "-u", "postgres", "--", *cmd]
        result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"{args[0]} failed: {result.stderr.strip() or result.stdout}")

    def start(self) -> str:
        if self.as_root:
            shutil.chown(self.root, "postgres", "postgres")
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
            f"-c fsync={'on' if self.fsync else 'off'} -c max_connections=200 "
            "-c shared_buffers=128MB"
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
        if self._started:
            try:
                self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
            finally:
                self._started = False
        shutil.rmtree(self.root, ignore_errors=True)

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
