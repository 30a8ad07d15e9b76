"""Where the memory lives: URLs, environment detection and password masking.

Accepted URLs::

    sqlite:///relative/path.db    sqlite:////absolute/path.db    sqlite:///~/in/home.db
    sqlite:///path.db?mode=ro     (rw: an existing file only; ro: read only; rwc, the default)
    postgresql://user:pass@host:5432/db?sslmode=require   (also postgres://, or key=value)
    postgresql://host/db?prepare_threshold=none   (this package's option, taken out for libpq)
    hana://user:pass@host:443/?encrypt=true&currentSchema=AGENT

Without a URL: ``AGENT_MEMORY_URL``; then a SAP HANA service binding (Cloud Foundry's
``VCAP_SERVICES`` or a Kubernetes binding under ``SERVICE_BINDING_ROOT``); then nothing (the
in-memory backends).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from langgraph_checkpoint_agent_memory.errors import ConfigurationError

URL_ENV = "AGENT_MEMORY_URL"
HOME_ENV = "AGENT_MEMORY_HOME"
#: The demo's own database, a file in the current folder.
DEMO_FILE = "agent-memory-demo.db"


def default_url() -> str:
    """``agent-memory.db`` in ``$AGENT_MEMORY_HOME``, ``$XDG_DATA_HOME/agent-memory`` or
    ``~/.local/share/agent-memory``; ``ConfigurationError`` if none (a container's uid, no HOME)."""
    folder = os.environ.get(HOME_ENV)
    if not folder:
        base = os.environ.get("XDG_DATA_HOME")
        try:
            folder = str(Path(base or Path.home() / ".local" / "share") / "agent-memory")
        except RuntimeError:  # Path.home(): no HOME and no account
            raise ConfigurationError(
                "no folder for the default database: HOME is not set and this user has no "
                f"home folder; set {HOME_ENV} (or XDG_DATA_HOME), or give a database URL"
            ) from None
    return f"sqlite:///{Path(folder) / 'agent-memory.db'}"


@dataclass(frozen=True)
class Target:
    """A resolved backend: its kind, how to connect, and where the setting came from."""

    kind: str  # "sqlite" | "postgresql" | "hana"
    url: str
    source: str  # "argument" | "AGENT_MEMORY_URL" | "VCAP_SERVICES" | "SERVICE_BINDING_ROOT"
    options: dict[str, Any] = field(default_factory=dict)

    def masked(self) -> str:
        return mask_url(self.url)


_PASSWORD_KV = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.I)


def mask_url(url: str) -> str:
    """The URL with any password replaced by ``***`` (URL form and key=value form)."""
    if "://" not in url:  # libpq key=value form
        return _PASSWORD_KV.sub(r"\1***", url)
    parts = urlsplit(url)
    if parts.password is not None:
        netloc = parts.netloc.rsplit("@", 1)
        user = netloc[0].split(":", 1)[0]
        url = url.replace(parts.netloc, f"{user}:***@{netloc[1]}", 1)
    return re.sub(r"([?&]password=)[^&]*", r"\1***", url, flags=re.I)


def resolve(url: str | None, *, environ: dict[str, str] | None = None) -> Target | None:
    """The backend to use: the argument, else the environment, else ``None`` (memory)."""
    env = os.environ if environ is None else environ
    if url is not None:
        return parse(url, "argument")
    if env.get(URL_ENV):  # a plain path or file: URL too, as the CLI and Agent Server take it
        return parse(as_url(env[URL_ENV], URL_ENV), URL_ENV)
    return _vcap_hana(env) or _k8s_hana(env)


def as_url(text: str, source: str = "argument") -> str:
    """What a person may write for a database, as a URL :func:`parse` takes: a URL or
    libpq ``key=value`` string as is; a ``file:`` URL or a plain path of a SQLite file as
    ``sqlite:///<path>`` (``~`` expanded). The one rule of the command line and the Agent
    Server's ``AGENT_MEMORY_URL``; ``ConfigurationError``, naming ``source``, for an empty
    text, a ``file:`` URL without a path, or a database this package does not support."""
    raw = _checked_text(text, source)
    if raw.lower().startswith("file:"):
        parts = urlsplit(raw)
        path = unquote(parts.path)
        if not path:
            raise ConfigurationError(f"{source}={raw!r}: a file: URL needs a path")
        raw = f"sqlite:///{path}" + (f"?{parts.query}" if parts.query else "")
    elif "://" not in raw and not ("=" in raw and ("host=" in raw or "dbname=" in raw)):
        raw = f"sqlite:///{Path(raw).expanduser()}"
    parse(raw, source)  # an unsupported URL fails here, naming its source
    return raw


def _checked_text(url: object, source: str) -> str:
    """``url`` stripped; ``ConfigurationError`` if it is not a string, or empty."""
    if not isinstance(url, str):
        raise ConfigurationError(
            f"memory URL from {source} must be a string, not {type(url).__name__}"
        )
    if not url.strip():
        raise ConfigurationError(f"memory URL from {source} is empty")
    return url.strip()


def parse(url: str, source: str = "argument") -> Target:
    url = _checked_text(url, source)
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme == "sqlite":
        # sqlite:///rel.db -> rel.db ; sqlite:////abs.db -> /abs.db
        path, _, query = url[len("sqlite://") :].removeprefix("/").partition("?")
        if not path or path == ":memory:":
            raise ConfigurationError(
                f"{mask_url(url)}: SQLite needs a file path, e.g. sqlite:///./memory.db"
            )
        options = {"path": _home_expanded(unquote(path), url), **_sqlite_options(url, query)}
        return Target("sqlite", url, source, options)
    if scheme in ("postgresql", "postgres", "postgresql+psycopg"):
        return Target("postgresql", "postgresql://" + url.split("://", 1)[1], source)
    if scheme == "" and "=" in url and ("host=" in url or "dbname=" in url):
        return Target("postgresql", url, source)
    if scheme in ("hana", "hana+hdbcli", "hdbsql"):
        return Target("hana", url, source, hana_connect_args(url))
    raise ConfigurationError(
        f"unsupported memory URL {mask_url(url)!r} (from {source}): use sqlite:///path.db, "
        "postgresql://... or hana://user:password@host:port"
    )


#: The SQLite URL's one option, ``mode``, and its values (SQLite's), the least strict first.
SQLITE_MODES = ("rwc", "rw", "ro")
SqliteMode = Literal["rwc", "rw", "ro"]


def sqlite_mode(target: Target, mode: str = "rwc") -> SqliteMode:
    """The stricter of ``mode`` and the URL's ``?mode=``; a mode SQLite lacks is its to refuse."""
    given = target.options.get("mode", mode)
    if mode in SQLITE_MODES:
        mode = max(mode, given, key=SQLITE_MODES.index)
    return cast(SqliteMode, mode)


def _sqlite_options(url: str, query: str) -> dict[str, str]:
    """``{"mode": ...}`` from a SQLite URL's query; ``ConfigurationError`` for anything else."""
    options: dict[str, str] = {}
    for key, value in parse_qsl(query, keep_blank_values=True):
        if key != "mode":
            raise ConfigurationError(
                f"{mask_url(url)}: unknown SQLite URL option {key!r}; the one known is "
                f"mode ({', '.join(SQLITE_MODES)})"
            )
        if value not in SQLITE_MODES:
            raise ConfigurationError(f"{mask_url(url)}: mode must be rwc, rw or ro, got {value!r}")
        if key in options:
            raise ConfigurationError(f"{mask_url(url)}: mode is given more than once")
        options[key] = value
    return options


def _home_expanded(path: str, url: str) -> str:
    """A SQLite path with a leading ``~`` or ``~user`` expanded; refused if it cannot be."""
    if not path.startswith("~"):
        return path
    expanded = os.path.expanduser(path)
    if expanded.startswith("~"):
        raise ConfigurationError(
            f"{mask_url(url)}: {path.split('/', 1)[0]} cannot be expanded (no such user, or "
            "no home folder): write the folder out"
        )
    return expanded


#: The package's own PostgreSQL URL parameters, removed before libpq (which refuses them).
PREPARE_THRESHOLD = "prepare_threshold"
SCHEMA = "schema"


def take_url_option(conninfo: str, name: str) -> tuple[str, str | None]:
    """``conninfo`` (a PostgreSQL URL or key=value string) without the package's own parameter
    ``name`` (:data:`PREPARE_THRESHOLD`, :data:`SCHEMA`), and its raw value (``None``: none);
    other parameters are left as written. ``ConfigurationError`` if it is given more than once.

    Example:
        >>> take_url_option("postgresql://h/db?schema=app&sslmode=require", "schema")
        ('postgresql://h/db?sslmode=require', 'app')
    """
    found: list[str] = []
    if "://" in conninfo:
        base, _, rest = conninfo.partition("?")
        query, hash_, fragment = rest.partition("#")
        kept = []
        for part in query.split("&"):
            key, _, value = part.partition("=")
            if unquote(key).strip().lower() == name:
                found.append(unquote(value))
            elif part:
                kept.append(part)
        query = "&".join(kept)
        taken = base + ("?" + query if query else "") + hash_ + fragment
    else:
        pattern = re.compile(rf"(?:^|\s+){name}\s*=\s*('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)
        for match in pattern.finditer(conninfo):
            value = match.group(1)
            found.append(re.sub(r"\\(.)", r"\1", value[1:-1]) if value.startswith("'") else value)
        taken = pattern.sub("", conninfo).strip()
    if len(found) > 1:
        raise ConfigurationError(f"{mask_url(conninfo)}: {name} is given {len(found)} times")
    return (taken, found[0]) if found else (conninfo, None)


def take_prepare_threshold(conninfo: str) -> tuple[str, str | None]:
    """:func:`take_url_option` for ``prepare_threshold``."""
    return take_url_option(conninfo, PREPARE_THRESHOLD)


def hana_connect_args(url: str) -> dict[str, Any]:
    """``hdbcli.dbapi.connect`` keyword arguments from a ``hana://`` URL."""
    parts = urlsplit(url)
    if not parts.hostname:
        raise ConfigurationError(f"{mask_url(url)}: a HANA URL needs a host")
    args: dict[str, Any] = {
        "address": parts.hostname,
        "port": parts.port or 443,
        "user": unquote(parts.username or ""),
        "password": unquote(parts.password or ""),
    }
    for key, value in parse_qsl(parts.query):
        args[key] = {"true": True, "false": False}.get(value.lower(), value)
    return args


def _hana_url(creds: dict[str, Any]) -> str:
    user = quote(str(creds.get("user") or creds.get("username") or ""), safe="")
    password = quote(str(creds.get("password") or ""), safe="")
    host = creds.get("host") or creds.get("hostname")
    port = creds.get("port") or 443
    query = "encrypt=true"
    if creds.get("schema"):
        query += f"&currentSchema={quote(str(creds['schema']))}"
    if creds.get("certificate") or creds.get("sslValidateCertificate") is False:
        query += "&sslValidateCertificate=false"
    return f"hana://{user}:{password}@{host}:{port}/?{query}"


def _vcap_hana(env: Any) -> Target | None:
    raw = env.get("VCAP_SERVICES")
    if not raw:
        return None
    try:
        services = json.loads(raw)
    except ValueError as exc:
        raise ConfigurationError(f"VCAP_SERVICES is not valid JSON: {exc}") from None
    for label, instances in services.items():
        for instance in instances or []:
            tags = [t.lower() for t in instance.get("tags", [])]
            if "hana" in label.lower() or "hana" in tags:
                creds = instance.get("credentials") or {}
                if creds.get("host") or creds.get("hostname"):
                    return parse(_hana_url(creds), "VCAP_SERVICES")
    return None


def _k8s_hana(env: Any) -> Target | None:
    root = env.get("SERVICE_BINDING_ROOT")
    if not root or not Path(root).is_dir():
        return None
    for binding in sorted(Path(root).iterdir()):
        kind = binding / "type"
        if binding.is_dir() and kind.is_file() and "hana" in kind.read_text().strip().lower():
            creds = {f.name: f.read_text().strip() for f in binding.iterdir() if f.is_file()}
            return parse(_hana_url(creds), "SERVICE_BINDING_ROOT")
    return None
