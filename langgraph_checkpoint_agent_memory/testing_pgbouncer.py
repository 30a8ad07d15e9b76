"""A throwaway PgBouncer in transaction mode, in front of a PostgreSQL server, for tests and
benchmarks.

``LocalPgBouncer(server_url)`` writes a configuration into a temporary folder (a wildcard
database entry pointing at the server, ``pool_mode = transaction``, ``auth_type = trust``,
listening on 127.0.0.1 and a free port), starts the ``pgbouncer`` program as a daemon and
stops it at the end. As root it runs as the ``postgres`` system user (``nobody`` where there is
none), as :class:`~langgraph_checkpoint_agent_memory.testing.LocalPostgres` runs the server.
:func:`find_pgbouncer` says whether the program is installed (Debian's ``pgbouncer``
package puts it in ``/usr/sbin``).

Example:
    ```python
    from langgraph_checkpoint_agent_memory.testing import LocalPostgres
    from langgraph_checkpoint_agent_memory.testing_pgbouncer import LocalPgBouncer

    with LocalPostgres() as pg, LocalPgBouncer(pg.url) as bouncer:
        url = bouncer.url_for(pg.create_database())  # the same database, through PgBouncer
    ```
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from langgraph_checkpoint_agent_memory.testing import _free_port, _runuser, _server_os_user

PGBOUNCER_ENV = "AGENT_MEMORY_PGBOUNCER"
#: Where Debian's ``pgbouncer`` package installs the program (``/usr/sbin`` is often left out
#: of a non-root ``PATH``).
_KNOWN = ("/usr/sbin/pgbouncer", "/usr/local/sbin/pgbouncer", "/usr/local/bin/pgbouncer")
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
    for candidate in _KNOWN:
        if Path(candidate).exists():
            return Path(candidate)
    return None


class LocalPgBouncer:
    """A PgBouncer in ``pool_mode = transaction`` in front of the server of ``server_url``.

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
        for name, value in self.settings.items():
            if not re.fullmatch(r"[a-z_]+", name) or not re.fullmatch(r"[\w.]+", str(value)):
                raise ValueError(f"not a PgBouncer setting: {name}={value!r}")
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
            account = pwd.getpwnam(self.os_user)
            for path in (self.root, *self.root.iterdir()):
                os.chown(path, account.pw_uid, account.pw_gid)
            cmd = [_runuser(), "-u", self.os_user, "--", *cmd]
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

    def __enter__(self) -> LocalPgBouncer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
