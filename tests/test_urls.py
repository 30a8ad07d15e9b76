"""Backend selection: URLs, AGENT_MEMORY_URL, SAP service bindings, masking."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from langgraph_checkpoint_agent_memory import (
    ConfigurationError,
    DatabaseNotFoundError,
    PostgresSaver,
    ReadOnlyDatabaseError,
    SqliteSaver,
    create_checkpointer,
)
from langgraph_checkpoint_agent_memory.db import url as urls
from langgraph_checkpoint_agent_memory.db.postgres import PostgresDatabase
from tests.helpers import present


@pytest.mark.parametrize(
    ("raw", "kind", "detail"),
    [
        ("sqlite:///rel/memory.db", "sqlite", "rel/memory.db"),
        ("sqlite:////abs/memory.db", "sqlite", "/abs/memory.db"),
        ("postgresql://u:p@h:5/db", "postgresql", "postgresql://u:p@h:5/db"),
        ("postgres://u@h/db", "postgresql", "postgresql://u@h/db"),
        ("host=h dbname=db user=u", "postgresql", "host=h dbname=db user=u"),
        ("hana://u:p%40ss@hana.example:443/?encrypt=true&currentSchema=S", "hana", "hana.example"),
    ],
)
def test_parse(raw: str, kind: str, detail: str) -> None:
    target = urls.parse(raw)
    assert target.kind == kind
    if kind == "sqlite":
        assert target.options["path"] == detail
    elif kind == "postgresql":
        assert target.url == detail
    else:
        assert target.options == {
            "address": detail,
            "port": 443,
            "user": "u",
            "password": "p@ss",
            "encrypt": True,
            "currentSchema": "S",
        }


@pytest.mark.parametrize("raw", ["mysql://x", "", "sqlite://", "sqlite:///:memory:", "hana://"])
def test_bad_urls_are_clear(raw: str) -> None:
    with pytest.raises(ConfigurationError):
        urls.parse(raw)


@pytest.mark.parametrize(
    ("raw", "masked"),
    [
        ("postgresql://u:secret@h/db", "postgresql://u:***@h/db"),
        ("hana://u:secret@h:443/?encrypt=true", "hana://u:***@h:443/?encrypt=true"),
        ("host=h password=secret user=u", "host=h password=*** user=u"),
        ("postgresql://h/db?password=secret&x=1", "postgresql://h/db?password=***&x=1"),
    ],
)
def test_masking(raw: str, masked: str) -> None:
    assert urls.mask_url(raw) == masked


def test_environment_and_vcap_and_k8s(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert urls.resolve(None) is None
    vcap = {
        "hana": [
            {
                "name": "db",
                "tags": ["hana", "database"],
                "credentials": {
                    "host": "abc.hana.ondemand.com",
                    "port": "443",
                    "user": "U1",
                    "password": "pw",
                    "schema": "AGENT",
                },
            }
        ]
    }
    monkeypatch.setenv("VCAP_SERVICES", json.dumps(vcap))
    target = urls.resolve(None)
    assert target is not None and target.kind == "hana" and target.source == "VCAP_SERVICES"
    assert target.options["address"] == "abc.hana.ondemand.com"
    assert target.options["currentSchema"] == "AGENT" and "pw" not in target.masked()
    monkeypatch.delenv("VCAP_SERVICES")

    binding = tmp_path / "bindings" / "hana-db"
    binding.mkdir(parents=True)
    for name, value in {
        "type": "hana",
        "host": "k8s.hana",
        "port": "30015",
        "user": "K",
        "password": "kpw",
    }.items():
        (binding / name).write_text(value + "\n")
    monkeypatch.setenv("SERVICE_BINDING_ROOT", str(tmp_path / "bindings"))
    target = urls.resolve(None)
    assert target is not None and target.source == "SERVICE_BINDING_ROOT"
    assert (target.options["address"], target.options["port"]) == ("k8s.hana", 30015)

    monkeypatch.setenv("AGENT_MEMORY_URL", f"sqlite:///{tmp_path / 'env.db'}")
    target = urls.resolve(None)  # the explicit variable wins over bindings
    assert target is not None and target.source == "AGENT_MEMORY_URL"


def test_factory_uses_url_and_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO):
        saver = create_checkpointer(30, url=f"sqlite:///{tmp_path / 'a.db'}")
    assert isinstance(saver, SqliteSaver) and saver.ttl_seconds == 30
    assert any("sqlite" in r.getMessage() and "argument" in r.getMessage() for r in caplog.records)
    saver.close()
    monkeypatch.setenv("AGENT_MEMORY_URL", "postgresql://agent:topsecret@127.0.0.1:9/x")
    with caplog.at_level(logging.INFO):
        pg = create_checkpointer()
    assert isinstance(pg, PostgresSaver) and pg.ttl_seconds is None
    assert "topsecret" not in repr(pg) and "***" in repr(pg)
    assert all("topsecret" not in r.getMessage() for r in caplog.records)
    with pytest.raises(TypeError, match="bogus"):
        create_checkpointer(url=f"sqlite:///{tmp_path / 'b.db'}", bogus=1)


async def test_async_named_savers_open_their_own_class(tmp_path: Path) -> None:
    from langgraph_checkpoint_agent_memory import AsyncSqliteSaver

    async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "a.db")) as saver:
        assert type(saver) is AsyncSqliteSaver
        assert await saver.aget_tuple({"configurable": {"thread_id": "t"}}) is None
    with SqliteSaver.from_conn_string(f"sqlite:///{tmp_path / 'b.db'}") as saver:
        assert type(saver) is SqliteSaver


# -- prepare_threshold in a PostgreSQL URL ---------------------------------------------------


@pytest.mark.parametrize(
    ("url", "conninfo", "raw"),
    [
        ("postgresql://u:p@h:5/db?prepare_threshold=none", "postgresql://u:p@h:5/db", "none"),
        (
            "postgresql://h/db?sslmode=require&prepare_threshold=None&application_name=a",
            "postgresql://h/db?sslmode=require&application_name=a",
            "None",
        ),
        ("postgresql://h/db?prepare_threshold=7", "postgresql://h/db", "7"),
        ("postgresql://h/db?sslmode=require", "postgresql://h/db?sslmode=require", None),
        ("host=h prepare_threshold=none dbname=db", "host=h dbname=db", "none"),
        ("prepare_threshold = '3' host=h", "host=h", "3"),
    ],
)
def test_prepare_threshold_is_taken_out_of_the_url(
    url: str, conninfo: str, raw: str | None
) -> None:
    assert urls.take_prepare_threshold(url) == (conninfo, raw)


_KEY = st.sampled_from(["sslmode", "application_name", "connect_timeout", "target_session_attrs"])
_VALUE = st.text("abcdefghijklmnopqrstuvwxyz0123456789_-", min_size=1, max_size=8)


@given(
    before=st.lists(st.tuples(_KEY, _VALUE), max_size=3),
    after=st.lists(st.tuples(_KEY, _VALUE), max_size=3),
    value=st.sampled_from(["none", "None", "NONE", "1", "5", "100"]),
)
def test_taking_the_option_leaves_every_other_parameter_as_written(
    before: list[tuple[str, str]], after: list[tuple[str, str]], value: str
) -> None:
    params = [f"{k}={v}" for k, v in before] + [f"{k}={v}" for k, v in after]
    written = [f"{k}={v}" for k, v in before] + [f"prepare_threshold={value}"]
    written += [f"{k}={v}" for k, v in after]
    conninfo, raw = urls.take_prepare_threshold("postgresql://u@h:5/db?" + "&".join(written))
    assert raw == value
    assert conninfo == "postgresql://u@h:5/db" + ("?" + "&".join(params) if params else "")


@pytest.mark.parametrize("bad", ["0", "-1", "abc", "1.5", "true", ""])
def test_a_bad_prepare_threshold_in_a_url_names_the_accepted_values(bad: str) -> None:
    with pytest.raises(ConfigurationError, match=r"none .* or a whole number >= 1") as info:
        PostgresSaver(f"postgresql://agent:s3cret@127.0.0.1:9/db?prepare_threshold={bad}")
    assert "s3cret" not in str(info.value)


@pytest.mark.parametrize("bad", [0, -1, "abc", 1.5, True])
def test_a_bad_prepare_threshold_argument_names_the_accepted_values(bad: object) -> None:
    with pytest.raises(ConfigurationError, match=r"none .* or a whole number >= 1"):
        create_checkpointer(url="postgresql://127.0.0.1:9/db", prepare_threshold=bad)


def test_the_url_and_the_argument_must_agree() -> None:
    url = "postgresql://127.0.0.1:9/db?prepare_threshold=none"
    with pytest.raises(ConfigurationError, match="give one of them"):
        PostgresSaver(url, prepare_threshold=5)
    with pytest.raises(ConfigurationError, match="given 2 times"):
        PostgresSaver(url + "&prepare_threshold=5")
    saver = PostgresSaver(url, prepare_threshold="None")  # the same value, written twice
    assert isinstance(saver.db, PostgresDatabase)
    assert saver.db.options.prepare_threshold is None
    assert "prepare_threshold" not in saver.db.describe()


def test_a_sqlite_url_mode_is_honoured(tmp_path: Path) -> None:
    """``?mode=ro`` reads only and ``?mode=rw`` opens an existing file only, as the ``mode=``
    keyword does (the query was ignored: the file was created and written)."""
    from langgraph_checkpoint_agent_memory import create_store

    missing = tmp_path / "missing.db"
    for mode in ("ro", "rw"):
        with pytest.raises(DatabaseNotFoundError, match="does not exist"):
            create_store(f"sqlite:///{missing}?mode={mode}").get(("a",), "k")
        with pytest.raises(DatabaseNotFoundError, match="does not exist"):
            create_checkpointer(url=f"sqlite:///{missing}?mode={mode}").get_tuple(
                {"configurable": {"thread_id": "t"}}
            )
    assert not missing.exists()
    with create_store(f"sqlite:///{tmp_path / 'x.db'}") as store:
        store.put(("a",), "k", {"v": 1})
    with create_store(f"sqlite:///{tmp_path / 'x.db'}?mode=ro") as store:
        assert present(store.get(("a",), "k")).value == {"v": 1}
        with pytest.raises(ReadOnlyDatabaseError):
            store.put(("a",), "k", {"v": 2})
    stricter = create_store(f"sqlite:///{tmp_path / 'x.db'}?mode=ro", mode="rw")
    with stricter, pytest.raises(ReadOnlyDatabaseError):  # the stricter of the two
        stricter.put(("a",), "k", {"v": 2})
    assert urls.parse("sqlite:///x.db?mode=rw").options == {"path": "x.db", "mode": "rw"}


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ("mode=bogus", r"mode must be rwc, rw or ro, got 'bogus'"),
        ("mode=", r"mode must be rwc, rw or ro, got ''"),
        ("foo=bar", r"unknown SQLite URL option 'foo'; the one known is mode \(rwc, rw, ro\)"),
        ("mode=ro&mode=rw", r"mode is given more than once"),
    ],
)
def test_an_unknown_sqlite_url_option_is_refused(query: str, says: str) -> None:
    with pytest.raises(ConfigurationError, match=says):
        urls.parse(f"sqlite:///cfg.db?{query}")
    with pytest.raises(ConfigurationError, match=says):
        create_checkpointer(url=f"sqlite:///cfg.db?{query}")


@pytest.mark.parametrize("written", ["{dir}/env.db", "file:{dir}/env.db", "file://{dir}/env.db"])
def test_the_environment_takes_a_path_as_the_cli_and_agent_server_do(
    written: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``AGENT_MEMORY_URL=./cfg.db`` or ``file:cfg.db``: what ``--url`` and the Agent Server
    take, ``create_store()`` and ``create_checkpointer()`` refused as an unsupported URL."""
    from langgraph_checkpoint_agent_memory import create_store

    monkeypatch.setenv("AGENT_MEMORY_URL", written.format(dir=tmp_path))
    target = urls.resolve(None)
    assert target is not None and target.kind == "sqlite" and target.source == "AGENT_MEMORY_URL"
    assert target.options["path"] == str(tmp_path / "env.db")
    with create_store() as store:
        store.put(("a",), "k", {"v": 1})
    saver = create_checkpointer()
    assert isinstance(saver, SqliteSaver)
    saver.close()
    assert (tmp_path / "env.db").is_file()
    monkeypatch.setenv("AGENT_MEMORY_URL", f"file:{tmp_path / 'env.db'}?mode=ro")
    assert present(urls.resolve(None)).options["mode"] == "ro"
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("AGENT_MEMORY_URL", "~/env.db")
    assert present(urls.resolve(None)).options["path"] == str(tmp_path / "env.db")


@pytest.mark.parametrize("bad", [5, b"sqlite:///x.db", ["sqlite:///x.db"]])
def test_a_url_that_is_not_a_string_says_so(bad: object) -> None:
    from langgraph_checkpoint_agent_memory import create_store

    says = rf"memory URL from argument must be a string, not {type(bad).__name__}"
    with pytest.raises(ConfigurationError, match=says):
        create_store(url=bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"must be a string"):
        create_checkpointer(url=bad)  # type: ignore[arg-type]
