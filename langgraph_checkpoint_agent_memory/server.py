"""This package's checkpointer and store in LangGraph's Agent Server.

The server applies the ``ttl`` of its ``"checkpointer"`` and ``"store"`` sections to nothing
of a custom checkpointer or store, so the factories here read them and run the package's own
expiry (the user guide's "LangGraph's Agent Server" maps them field by field). Every bad
value raises :class:`ConfigurationError` naming the variable and the field, at startup.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import json
import logging
import math
import os
import sys
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.store.base import TTLConfig

from langgraph_checkpoint_agent_memory.checkpoint.saver import SQLSaver
from langgraph_checkpoint_agent_memory.crypto.config import from_langgraph_aes_key
from langgraph_checkpoint_agent_memory.db import url as urls
from langgraph_checkpoint_agent_memory.db.schema import MAX_TTL_SECONDS
from langgraph_checkpoint_agent_memory.errors import ConfigurationError
from langgraph_checkpoint_agent_memory.factory import create_checkpointer, create_store
from langgraph_checkpoint_agent_memory.store.embed import DEFAULT_DIMS, default_embeddings
from langgraph_checkpoint_agent_memory.store.store import AgentMemoryStore

__all__ = [
    "CHECKPOINTER_ENV",
    "STORE_ENV",
    "THREAD_TTL_ENV",
    "checkpointer",
    "offline_embeddings",
    "store",
]

logger = logging.getLogger(__name__)

#: The server's ``langgraph.json`` ``"checkpointer"`` section, as JSON.
CHECKPOINTER_ENV = "LANGGRAPH_CHECKPOINTER"
#: The server's ``langgraph.json`` ``"store"`` section, as JSON.
STORE_ENV = "LANGGRAPH_STORE"
#: The server's thread TTL override: minutes, or the ``ttl`` object as JSON.
THREAD_TTL_ENV = "LANGGRAPH_THREAD_TTL"

_THREAD_TTL_KEYS = (
    "default_ttl",
    "refresh_on_read",
    "strategy",
    "sweep_interval_minutes",
    "sweep_limit",
)
_STORE_TTL_KEYS = ("default_ttl", "omit_expired", "refresh_on_read", "sweep_interval_minutes")
_INDEX_KEYS = ("dims", "embed", "fields")
_SERDE_KEYS = ("allowed_json_modules", "pickle_fallback")
#: Top-level keys this module reads or only the server uses.
_CHECKPOINTER_KEYS = ("backend", "path", "serde", "ttl", "uri")
_STORE_KEYS = ("index", "path", "ttl")


@asynccontextmanager
async def checkpointer() -> AsyncIterator[SQLSaver]:
    """The server's checkpointer: this package's SQL saver, with the ``langgraph.json`` TTL.

    The server calls it with no arguments. It reads ``LANGGRAPH_CHECKPOINTER`` (the
    ``"checkpointer"`` section: ``ttl`` with ``strategy``, ``default_ttl`` in
    minutes, ``sweep_interval_minutes``, ``sweep_limit``, ``refresh_on_read``; and
    ``serde``), ``LANGGRAPH_THREAD_TTL`` when set, ``AGENT_MEMORY_URL``, and the
    encryption variables (``AGENT_MEMORY_MASTER_KEY``, else ``LANGGRAPH_AES_KEY``).

    Yields:
        A :class:`SqliteSaver`, :class:`PostgresSaver` or :class:`HanaSaver` whose schema is
        set up and whose sweeper runs when a TTL is set; closed on exit.

    Raises:
        ConfigurationError: A variable is not valid JSON, or a field has a bad value (the
            message names both).

    Example:
        ``langgraph.json``: ``"checkpointer": {"path": "./backends.py:checkpointer", "ttl":
        {"strategy": "delete", "default_ttl": 60}}`` with ``backends.py`` re-exporting this
        function. In Python, as the server uses it:

        ```python
        import asyncio
        import json
        import os

        from langgraph_checkpoint_agent_memory.server import checkpointer

        os.environ["AGENT_MEMORY_URL"] = "sqlite:///server-checkpoints.db"
        os.environ["LANGGRAPH_CHECKPOINTER"] = json.dumps({"ttl": {"default_ttl": 60}})


        async def main() -> None:
            async with checkpointer() as saver:
                assert saver.ttl_seconds == 3600 and saver.sweeper_running


        asyncio.run(main())
        ```
    """
    options = _checkpointer_options(os.environ)
    saver = create_checkpointer(
        url=_memory_url(os.environ), encryption=from_langgraph_aes_key(os.environ), **options
    )
    assert isinstance(saver, SQLSaver)  # a URL always gives a SQL saver
    async with saver:
        await saver.asetup()
        if saver.ttl_seconds:
            saver.start_async_sweeper()
        logger.info("Agent Server checkpointer: %r", saver)
        yield saver


@asynccontextmanager
async def store() -> AsyncIterator[AgentMemoryStore]:
    """The server's long-term memory store: an :class:`AgentMemoryStore` with the
    ``langgraph.json`` TTL and index.

    The server calls it with no arguments. It reads ``LANGGRAPH_STORE`` (the ``"store"`` section:
    ``ttl`` with ``default_ttl`` in minutes, ``refresh_on_read`` and ``sweep_interval_minutes``;
    ``index`` with ``dims``, ``embed`` and ``fields``), ``AGENT_MEMORY_URL`` and the encryption
    variables (``AGENT_MEMORY_MASTER_KEY``, else ``LANGGRAPH_AES_KEY``).

    Yields:
        The store, its schema set up and its TTL sweeper running when the ``ttl`` section
        sets ``default_ttl`` or ``sweep_interval_minutes``; closed on exit.

    Raises:
        ConfigurationError: A variable is not valid JSON, a field has a bad value, or the
            ``embed`` model cannot be loaded (the message names the variable and field).

    Example:
        ```python
        import asyncio
        import json
        import os

        from langgraph_checkpoint_agent_memory.server import store

        os.environ["AGENT_MEMORY_URL"] = "sqlite:///server-store.db"
        os.environ["LANGGRAPH_STORE"] = json.dumps(
            {"ttl": {"default_ttl": 60, "sweep_interval_minutes": 5}}
        )


        async def main() -> None:
            async with store() as memories:
                await memories.aput(("users", "alice"), "food", {"likes": "ramen"})
                assert (await memories.aget(("users", "alice"), "food")).value["likes"]


        asyncio.run(main())
        ```
    """
    section = _Fields(STORE_ENV, _read_object(os.environ, STORE_ENV))
    section.warn_unknown(_STORE_KEYS)
    index = _index(section.section("index"))
    ttl = _store_ttl(section.section("ttl"))
    opened = create_store(
        _memory_url(os.environ), index=index, ttl=ttl, encryption=from_langgraph_aes_key(os.environ)
    )
    async with opened:  # its close joins the sweeper thread off the event loop
        await opened.asetup()
        if ttl and (ttl.get("default_ttl") or ttl.get("sweep_interval_minutes")):
            # a thread start takes a lock: not on the server's event loop
            await asyncio.to_thread(opened.start_ttl_sweeper)
        logger.info("Agent Server store: %r, ttl=%s", opened, ttl)
        yield opened


def offline_embeddings(texts: Sequence[str]) -> list[list[float]]:
    """The package's offline embedder (all-MiniLM-L6-v2, 384 dimensions) as an embedding
    function, for ``"index": {"embed": ...}`` in ``langgraph.json``.

    The server resolves ``embed`` itself and accepts only a LangChain identifier (which
    needs ``langchain``) or ``"./file.py:name"``; re-export this function from such a file
    and name it there. Needs the ``embed`` extra; nothing is downloaded.

    Args:
        texts: The texts to embed.

    Returns:
        One 384-dimensional vector per text.

    Example:
        ``backends.py``: ``from langgraph_checkpoint_agent_memory.server import checkpointer,
        offline_embeddings, store``; ``langgraph.json``: ``"store": {"path": "./backends.py:store",
        "index": {"dims": 384, "embed": "./backends.py:offline_embeddings"}}``.

        ```python
        from langgraph_checkpoint_agent_memory.server import offline_embeddings

        [vector] = offline_embeddings(["spicy ramen"])
        assert len(vector) == 384
        ```
    """
    return _offline_model().embed_documents(list(texts))


_offline_model = functools.cache(default_embeddings)


def _memory_url(environ: Mapping[str, str]) -> str:
    """``AGENT_MEMORY_URL``, else a SAP HANA service binding, else the embedded default."""
    raw = (environ.get(urls.URL_ENV) or "").strip()
    if not raw:
        target = urls.resolve(None, environ=dict(environ))
        return target.url if target is not None else urls.default_url()
    return urls.as_url(raw, urls.URL_ENV)


def _read_object(environ: Mapping[str, str], variable: str) -> dict[str, Any]:
    raw = environ.get(variable)
    if raw is None or not raw.strip():
        return {}
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigurationError(
            f"{variable} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigurationError(
            f"{variable} must be a JSON object (the langgraph.json section), got "
            f"{type(data).__name__} {data!r}"
        )
    return data


class _Fields:
    """One JSON object of a variable; every error names the variable and the field."""

    def __init__(self, variable: str, data: Mapping[str, Any], prefix: str = "") -> None:
        self.variable, self.data, self.prefix = variable, data, prefix

    def name(self, key: str) -> str:
        return f"{self.variable} field {self.prefix}{key}"

    def fail(self, key: str, expected: str) -> ConfigurationError:
        return ConfigurationError(f"{self.name(key)} must be {expected}, got {self.data[key]!r}")

    def value(self, key: str, valid: Callable[[Any], bool], expected: str) -> Any:
        """The field ``key`` (``None`` when absent or null), refused unless ``valid``."""
        value = self.data.get(key)
        if value is not None and not valid(value):
            raise self.fail(key, expected)
        return value

    def section(self, key: str) -> _Fields | None:
        value = self.value(key, lambda v: isinstance(v, dict), "a JSON object")
        return None if value is None else _Fields(self.variable, value, f"{self.prefix}{key}.")

    def only(self, known: Sequence[str]) -> None:
        """Refuse keys this section does not have: a misspelt TTL would silently keep data."""
        if unknown := sorted(set(self.data) - set(known)):
            raise ConfigurationError(
                f"{self.name(unknown[0])} is not a setting this package knows; known: "
                f"{', '.join(known)}"
            )

    def warn_unknown(self, known: Sequence[str]) -> None:
        """Top-level keys may be the server's own (newer) settings: say so, do not fail."""
        for key in sorted(set(self.data) - set(known)):
            logger.warning("%s is not read by this package; ignored", self.name(key))

    def number(self, key: str, bounded: bool = True) -> float | None:
        """Minutes, ``bounded`` by the package's longest TTL (2**31 - 1 s, about 68 years)."""
        self.value(key, lambda v: type(v) in (int, float), "a number of minutes")
        positive = "a number of minutes > 0 (or null)"
        value = self.value(key, lambda v: math.isfinite(v) and v > 0, positive)
        if bounded and value is not None and value * 60 > MAX_TTL_SECONDS:
            raise self.fail(key, f"at most {MAX_TTL_SECONDS // 60} minutes (about 68 years)")
        return None if value is None else float(value)

    def count(self, key: str) -> int | None:
        value = self.value(key, lambda v: type(v) is int and v >= 1, "a whole number >= 1")
        return None if value is None else int(value)

    def flag(self, key: str, default: bool) -> bool:
        value = self.value(key, lambda v: isinstance(v, bool), "true or false")
        return default if value is None else bool(value)

    def choice(self, key: str, choices: Sequence[str], default: str) -> str:
        value = self.value(key, lambda v: v in choices, " or ".join(repr(c) for c in choices))
        return default if value is None else str(value)


def _checkpointer_options(environ: Mapping[str, str]) -> dict[str, Any]:
    section = _Fields(CHECKPOINTER_ENV, _read_object(environ, CHECKPOINTER_ENV))
    section.warn_unknown(_CHECKPOINTER_KEYS)
    options: dict[str, Any] = {}
    ttl = _thread_ttl_override(environ) or section.section("ttl")
    if ttl is not None:
        ttl.only(_THREAD_TTL_KEYS)
        if (minutes := ttl.number("default_ttl")) is not None:
            # whole seconds, rounded up; round() first so that 0.1 min is 6 s, not 7
            options["ttl_seconds"] = max(1, math.ceil(round(minutes * 60, 6)))
        options["strategy"] = ttl.choice("strategy", ("delete", "keep_latest"), "delete")
        options["refresh_on_read"] = ttl.flag("refresh_on_read", False)
        if (interval := ttl.number("sweep_interval_minutes", bounded=False)) is not None:
            options["sweep_interval_seconds"] = interval * 60
        if (limit := ttl.count("sweep_limit")) is not None:
            options["sweep_batch"] = limit
    if (serde := section.section("serde")) is not None:
        options["serde"] = _serde(serde)
    return options


def _thread_ttl_override(environ: Mapping[str, str]) -> _Fields | None:
    """``LANGGRAPH_THREAD_TTL``, which wins over the checkpointer section's ``ttl``."""
    raw = (environ.get(THREAD_TTL_ENV) or "").strip()
    if not raw:
        return None
    if raw.startswith("{"):
        return _Fields(THREAD_TTL_ENV, _read_object(environ, THREAD_TTL_ENV))
    try:
        minutes = float(raw)
    except ValueError:
        raise ConfigurationError(
            f"{THREAD_TTL_ENV} must be a number of minutes or a JSON object, got {raw!r}"
        ) from None
    return _Fields(THREAD_TTL_ENV, {"strategy": "delete", "default_ttl": minutes})


def _serde(section: _Fields) -> JsonPlusSerializer:
    section.only(_SERDE_KEYS)
    options: dict[str, Any] = {}
    if "pickle_fallback" in section.data:
        options["pickle_fallback"] = section.flag("pickle_fallback", False)
    allowed = section.data.get("allowed_json_modules")
    if allowed is True:
        options["allowed_json_modules"] = True
    elif allowed is not None:
        if not isinstance(allowed, list) or not all(
            isinstance(path, list) and path and all(isinstance(p, str) for p in path)
            for path in allowed
        ):
            raise section.fail(
                "allowed_json_modules", 'true or a list of module paths, e.g. [["my_pkg", "T"]]'
            )
        options["allowed_json_modules"] = [tuple(path) for path in allowed]
    return JsonPlusSerializer(**options)


def _store_ttl(section: _Fields | None) -> TTLConfig | None:
    if section is None:
        return None
    section.only(_STORE_TTL_KEYS)
    ttl: TTLConfig = {"refresh_on_read": section.flag("refresh_on_read", True)}
    if "omit_expired" in section.data:  # accepted; the store never returns expired items
        ttl["omit_expired"] = section.flag("omit_expired", True)
    if (minutes := section.number("default_ttl")) is not None:
        ttl["default_ttl"] = minutes
    if (interval := section.number("sweep_interval_minutes")) is not None:
        ttl["sweep_interval_minutes"] = interval  # type: ignore[typeddict-item]
    return ttl


def _index(section: _Fields | None) -> Any:
    """``"default"`` stands for the offline embedder, which the store resolves itself."""
    if section is None:
        return None
    section.only(_INDEX_KEYS)
    if section.data.get("embed") is None:
        raise ConfigurationError(f"{section.name('embed')} is required for an index")
    embed = _embeddings(section)
    fields = section.data.get("fields")
    if fields is not None and (
        not isinstance(fields, list) or not all(isinstance(f, str) for f in fields)
    ):
        raise section.fail("fields", 'a list of JSON paths, e.g. ["text", "tags[*]"]')
    if embed == "default":
        index: dict[str, Any] = {"embed": "default"}
        dims = section.data.get("dims")
        if dims is not None and dims != DEFAULT_DIMS:
            raise section.fail("dims", f"{DEFAULT_DIMS} for the offline embedder")
    else:
        dims = section.count("dims")
        if dims is None:
            raise ConfigurationError(f"{section.name('dims')} is required for an index")
        index = {"dims": dims, "embed": embed}
    if fields is not None:
        index["fields"] = fields
    return index


def _embeddings(section: _Fields) -> Any:
    """``embed`` resolved as the server does: a ``.py:`` path, else a LangChain identifier."""
    spec = section.data["embed"]
    if not isinstance(spec, str) or not spec.strip():
        raise section.fail(
            "embed", 'a model such as "openai:text-embedding-3-small" or "./file.py:name"'
        )
    spec = spec.strip()
    if spec == "default":
        return "default"
    if ".py:" in spec:
        found = _load_attribute(spec, section)
        return "default" if found is offline_embeddings else found
    try:
        from langchain.embeddings import init_embeddings
    except ImportError:
        raise ConfigurationError(
            f"{section.name('embed')} is {spec!r}, which needs the langchain package and the "
            f"provider's (pip install langchain langchain-openai, for openai:); or name an "
            f'embedding function in a file, e.g. "./backends.py:offline_embeddings" with '
            f"offline_embeddings re-exported from langgraph_checkpoint_agent_memory.server"
        ) from None
    try:
        return init_embeddings(spec)
    except Exception as exc:
        raise ConfigurationError(
            f"{section.name('embed')}: LangChain cannot load {spec!r}: {exc}"
        ) from exc


def _load_attribute(spec: str, section: _Fields) -> Any:
    """``./file.py:name`` (relative to the working directory, as the server reads it)."""
    path, _, attribute = spec.rpartition(":")
    file = Path(path).expanduser()
    if not file.is_file():
        raise ConfigurationError(f"{section.name('embed')}: no file {str(file)!r} (from {spec!r})")
    # the server's module name for the same file, so a module it loaded is not run twice
    module_name = path.replace("/", "__").replace(".py", "").replace(" ", "_")
    module = sys.modules.get(module_name)
    loaded = getattr(module, "__file__", None)
    if module is None or loaded is None or Path(loaded).resolve() != file.resolve():
        loader = importlib.util.spec_from_file_location(module_name, file)
        if loader is None or loader.loader is None:
            raise ConfigurationError(f"{section.name('embed')}: cannot load {str(file)!r}")
        module = importlib.util.module_from_spec(loader)
        sys.modules[module_name] = module
        try:
            loader.loader.exec_module(module)
        except Exception as exc:
            del sys.modules[module_name]
            raise ConfigurationError(
                f"{section.name('embed')}: importing {str(file)!r} failed: {exc!r}"
            ) from exc
    found = getattr(module, attribute, None)
    if found is None or (not callable(found) and not hasattr(found, "embed_documents")):
        raise ConfigurationError(
            f"{section.name('embed')}: {str(file)!r} has no embeddings or embedding "
            f"function named {attribute!r}"
        )
    return found
