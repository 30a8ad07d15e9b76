"""How the ``psycopg_pool`` pools opened from a connection string are configured.

:class:`PostgresOptions` is what a user may set; :func:`prepare_threshold_of` reads
``prepare_threshold`` wherever it is written (an argument, a URL, a configuration field);
:func:`pooler_error` is the refusal of prepared statements through a connection pooler;
:class:`IdleCheck` holds the pools' ``configure`` and ``check`` hooks; :func:`with_keepalives`
adds TCP keepalives to a connection string that does not choose its own.

Nothing here sets session state on a connection (no ``SET``, no ``options``): behind a
transaction pooler (PgBouncer, a managed service's pooler) a session's settings would reach
other clients of the same server connection. Settings are per transaction (``SET LOCAL``).
"""

from __future__ import annotations

import math
import re
import time
import weakref
from dataclasses import dataclass, fields
from typing import Any

from langgraph_checkpoint_agent_memory.errors import ConfigurationError

#: psycopg's own default, kept on a direct connection: measured on PostgreSQL 15 on loopback
#: (benchmarks ``scale``), prepared statements make ``get_tuple`` about 4x and a graph
#: invoke about 1.3x faster.
DEFAULT_PREPARE_THRESHOLD = 5
#: What ``schema=`` accepts: a plain identifier, so it is never SQL (it is quoted where used).
SCHEMA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
PREPARE_VALUES = "none (never prepare) or a whole number >= 1 (runs before a statement is prepared)"


def prepare_threshold_of(value: Any, source: str = "prepare_threshold") -> int | None:
    """``prepare_threshold`` as psycopg takes it, from an argument, a URL or a setting.

    Args:
        value: ``None``, ``"none"`` (any case), a whole number >= 1, or its digits.
        source: Where the value was written, for the error message.

    Raises:
        ConfigurationError: Anything else, naming the accepted values. 0 (prepare at the
            first run) is refused: psycopg then prepares statements in the pipeline that
            carries an ``ALTER`` (a migration), forgets them with the ``DEALLOCATE ALL`` it
            sends after it, and the next call fails with "prepared statement does not exist".

    Example:
        >>> prepare_threshold_of("None"), prepare_threshold_of("5"), prepare_threshold_of(1)
        (None, 5, 1)
    """
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip()
        if text.lower() == "none":
            return None
        if text.isascii() and text.isdigit() and int(text) >= 1:
            return int(text)
    elif _whole(value, 1):
        return int(value)
    raise ConfigurationError(f"{source} must be {PREPARE_VALUES}, got {value!r}")


#: Asked once of a pool that prepares statements: the server's process id, which a client
#: also learns from the server at connect time. A pooler (PgBouncer, Supavisor, RDS Proxy,
#: ...) answers the connect itself with an id of its own, as its clients share servers.
#: (Raw SQL: a function call with no table; there is no Core form worth its import here.)
BACKEND_PID_SQL = "SELECT pg_backend_pid()"


def pooler_error(
    told_pid: int, server_pid: int, where: str, *, passed_in: bool = False
) -> ConfigurationError | None:
    """The refusal to prepare statements when the connection goes through a pooler (the
    process id the client was told at connect time is not the server's), else ``None``.

    A transaction pooler hands each transaction to any server connection; statements
    prepared by one client there are seen by others under the same names (psycopg's
    ``_pg3_0``, ``_pg3_1``, ...), so a statement could run with another's parameters.
    """
    if told_pid == server_pid:
        return None
    if passed_in:
        return ConfigurationError(
            f"{where} is reached through a connection pooler (PgBouncer or a managed "
            "service's pooler), and the connection or pool passed in prepares statements "
            "(psycopg's prepare_threshold, 5 unless set), which there reach other clients: "
            "create it with prepare_threshold=None, e.g. ConnectionPool(url, kwargs="
            "{'autocommit': True, 'prepare_threshold': None}). Behind a pooler that keeps "
            "prepared statements per client (PgBouncer >= 1.21 with max_prepared_statements, "
            "or session mode) pass prepare_threshold=<its threshold> to the saver or store "
            "to say so"
        )
    return ConfigurationError(
        f"{where} is reached through a connection pooler (PgBouncer or a managed service's "
        "pooler), where prepared statements of one client reach others: add "
        "?prepare_threshold=none to the URL (or pass prepare_threshold=None). Behind a "
        "pooler that keeps prepared statements per client (PgBouncer >= 1.21 with "
        "max_prepared_statements, or session mode) choose a threshold explicitly, e.g. "
        "?prepare_threshold=5"
    )


class IdleCheck:
    """The ``configure`` and ``check`` hooks of the pools opened here, and :meth:`returned`,
    which the database calls as it gives a connection back.

    psycopg_pool's ``check_connection`` costs a round trip; run on every checkout it adds one
    to every saver call, ten per graph invoke. A connection can only have been broken unseen
    (a server restart, a network cut) while it sat unused, so it is checked when it has been
    idle for ``after`` seconds since it was opened or returned (``0``: at every checkout).
    Under load connections come back within milliseconds and go out without that round
    trip; every checkout still runs :func:`closed_by_server`, which costs none, so a
    connection a restart closed is replaced before use however briefly it sat idle.
    """

    def __init__(self, after: float) -> None:
        self.after = after
        self._since: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()

    def _stamp(self, conn: Any) -> None:
        self._since[conn] = time.monotonic()

    def _due(self, conn: Any) -> bool:
        return time.monotonic() - self._since.get(conn, -math.inf) >= self.after

    def configure(self, conn: Any) -> None:
        self._stamp(conn)

    def returned(self, conn: Any) -> None:
        """Note that ``conn`` goes back to its pool now. (Not psycopg_pool's ``reset`` hook:
        with one, an async pool hands every return to a background task.)"""
        self._stamp(conn)

    def check(self, conn: Any) -> None:
        if self._due(conn):
            import psycopg_pool

            psycopg_pool.ConnectionPool.check_connection(conn)
        else:
            closed_by_server(conn)

    async def aconfigure(self, conn: Any) -> None:
        self._stamp(conn)

    async def acheck(self, conn: Any) -> None:
        if self._due(conn):
            import psycopg_pool

            await psycopg_pool.AsyncConnectionPool.check_connection(conn)
        else:
            closed_by_server(conn)


def closed_by_server(conn: Any) -> None:
    """Raise ``psycopg.OperationalError`` when the server has closed ``conn`` (a restart, an
    administrator's ``pg_terminate_backend``), found without a round trip: libpq reads what
    already arrived on the socket (``PQconsumeInput``, which never blocks), and a server that
    ended the session sent its goodbye and closed it. A connection cut without a word (a
    network gone) is found by the round trip of the idle check or by the keepalives."""
    import psycopg

    pgconn = conn.pgconn
    # the first read takes what arrived (the server's "terminating connection" notice),
    # which is_busy() parses; the second meets the closed socket and raises
    pgconn.consume_input()
    pgconn.is_busy()
    pgconn.consume_input()
    if pgconn.status != psycopg.pq.ConnStatus.OK:
        raise psycopg.OperationalError("the server closed the connection")


#: What a server says when it refuses a connection for now, not for good: it is starting
#: up, shutting down or in recovery, or out of connection slots. (libpq reports a refused
#: connect as a message only: no SQLSTATE reaches the client before a session exists.)
TRANSIENT_WORDS = (
    "starting up",
    "shutting down",
    "recovery",
    "not yet accepting connections",
    "too many clients",
    "connection slots",
    "too many connections",
)
#: What libpq says when the server refused the connect itself (``FATAL``: a database or role
#: that does not exist, a wrong password, no ``pg_hba.conf`` entry), nothing listens on the
#: port, or the host name is unknown.
DEFINITE_WORDS = (
    "FATAL:",
    "Connection refused",
    "could not translate host name",
)


def definite_refusal(exc: BaseException) -> bool:
    """Whether a failed connect is final, so trying again for ``connect_timeout`` seconds
    would only delay the error: the server refused with a FATAL error, or nothing listens
    on the port. A server starting up or out of slots, or one not answering, is tried again.

    Example:
        >>> import psycopg
        >>> definite_refusal(psycopg.OperationalError('FATAL:  database "x" does not exist'))
        True
        >>> definite_refusal(psycopg.OperationalError("FATAL:  the database system is starting up"))
        False
    """
    import psycopg

    if not isinstance(exc, psycopg.OperationalError):
        return False
    text = str(exc)
    if any(word in text for word in TRANSIENT_WORDS):
        return False
    return any(word in text for word in DEFINITE_WORDS)


#: libpq's refusal of a connection parameter's value, which it reports only as it connects:
#: ``invalid port number: "99999"``, ``invalid sslmode value: "bogus"``, ``invalid integer
#: value "abc" for connection option "keepalives"`` (older libpq: ``keepalives parameter
#: must be an integer``), ``could not match 2 port numbers to 1 hosts``; and a server's
#: ``invalid value for parameter`` of ``options=-c ...``.
OPTION_ERROR = re.compile(
    r"invalid (?:\w+ )?(?:value|number)\b.*|could not match \d+ .*|\w+ parameter must be .*"
)


def option_error(exc: BaseException) -> str | None:
    """What a failed connect says is wrong in the connection string, or ``None`` when the
    failure is not the string's: a configuration error, which trying again cannot cure.
    psycopg's own reading of the string fails with ``ProgrammingError`` (``bad value for
    connect_timeout``, ``invalid URI query parameter``), libpq's with the words above.

    Example:
        >>> import psycopg
        >>> option_error(psycopg.OperationalError('connection is bad: invalid port number: "0"'))
        'invalid port number: "0"'
        >>> option_error(psycopg.OperationalError("Connection refused")) is None
        True
    """
    import psycopg

    if isinstance(exc, psycopg.ProgrammingError):
        return str(exc).strip()
    found = OPTION_ERROR.search(str(exc)) if isinstance(exc, psycopg.OperationalError) else None
    return found.group(0).strip() if found else None


def checked_conninfo(conninfo: str, where: str) -> dict[str, Any]:
    """The parameters of ``conninfo`` as libpq reads them (``psycopg.conninfo``).

    Raises:
        ConfigurationError: A parameter libpq does not know, or a string it cannot read,
            named in libpq's words; ``where`` is the masked string.
    """
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    try:
        return conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError as exc:
        raise ConfigurationError(
            f"{where}: {str(exc).strip()} (the parameters libpq knows are listed at "
            "https://www.postgresql.org/docs/current/libpq-connect.html#LIBPQ-PARAMKEYWORDS; "
            "this package adds prepare_threshold and schema)"
        ) from None


#: Connection parameters a connection string gets unless it sets them: a dead peer (a server
#: gone without closing the socket, a dropped NAT entry) is noticed in about a minute.
KEEPALIVES = {
    "keepalives": "1",
    "keepalives_idle": "30",
    "keepalives_interval": "10",
    "keepalives_count": "3",
}


def with_keepalives(conninfo: str) -> str:
    """``conninfo`` with TCP keepalives turned on, where it does not choose otherwise."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    given = conninfo_to_dict(conninfo)
    return make_conninfo(conninfo, **{k: v for k, v in KEEPALIVES.items() if k not in given})


def require_psycopg() -> tuple[Any, Any]:
    """psycopg and psycopg_pool, or an error that says how to install them."""
    try:
        import psycopg
        import psycopg_pool
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ConfigurationError(
            "PostgreSQL needs psycopg 3: pip install 'langgraph-checkpoint-agent-memory[postgres]'"
        ) from exc
    return psycopg, psycopg_pool


@dataclass(frozen=True)
class PostgresOptions:
    """How a PostgreSQL saver or store connects; see :class:`PostgresSaver` for each one.

    Only ``synchronous_commit`` applies to a connection or pool passed in; the others shape
    the pools opened from a connection string.
    """

    pool_size: int = 8
    connect_timeout: float = 10.0
    #: ``False``: ``set_config('synchronous_commit', 'off', true)`` in each write transaction
    synchronous_commit: bool = True
    #: ``None`` never prepares (a transaction pooler); see :func:`prepare_threshold_of`
    prepare_threshold: int | None = DEFAULT_PREPARE_THRESHOLD
    max_idle: float = 600.0
    max_lifetime: float = 3600.0
    #: seconds a pooled connection sits unused before it is checked at checkout (IdleCheck)
    check_after_idle: float = 1.0
    #: the PostgreSQL schema of the package's tables (``None``: the search path's, public)
    schema: str | None = None

    def __post_init__(self) -> None:
        if self.schema is not None and (
            not isinstance(self.schema, str) or not SCHEMA_NAME.fullmatch(self.schema)
        ):
            raise ConfigurationError(
                "schema must be a PostgreSQL identifier of letters, digits and underscores, "
                f"starting with a letter or underscore, at most 63 characters; got "
                f"{self.schema!r}"
            )
        if not _whole(self.pool_size, 1):
            raise ConfigurationError(f"pool_size must be an int >= 1, got {self.pool_size!r}")
        if self.prepare_threshold is not None and not _whole(self.prepare_threshold, 1):
            raise ConfigurationError(
                f"prepare_threshold must be {PREPARE_VALUES}, got {self.prepare_threshold!r}"
            )
        for name in ("connect_timeout", "max_idle", "max_lifetime", "check_after_idle"):
            value = getattr(self, name)
            least = 0 if name == "check_after_idle" else 1e-9
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < least:
                raise ConfigurationError(
                    f"{name} must be a number of seconds {'>= 0' if least == 0 else '> 0'}, "
                    f"got {value!r}"
                )

    @classmethod
    def names(cls) -> frozenset[str]:
        return frozenset(f.name for f in fields(cls))


def _whole(value: Any, least: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least
