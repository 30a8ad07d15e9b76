"""create_checkpointer(): which saver, which TTL, which errors."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

from langgraph_checkpoint_agent_memory import (
    ConfigurationError,
    TimedInMemorySaver,
    agent_config,
    create_checkpointer,
    factory,
    settings,
)
from langgraph_checkpoint_agent_memory.checkpoint.in_memory import CheckedInMemorySaver
from tests.helpers import config_for, make_checkpoint, present, timed_contents


@pytest.mark.parametrize("ttl", [None, 0])
def test_no_ttl_gives_in_memory_saver(ttl: Any) -> None:
    saver = create_checkpointer(ttl)
    assert type(saver) is CheckedInMemorySaver and isinstance(saver, InMemorySaver)


def test_positive_ttl_gives_timed_saver_with_options() -> None:
    saver = create_checkpointer(120, sweep_interval_seconds=2)
    assert isinstance(saver, TimedInMemorySaver)
    assert (saver.ttl_seconds, saver.sweep_interval_seconds) == (120, 2)


@pytest.mark.parametrize(
    "bad", [-1, 1.5, True, "60", float("nan"), 2**31, 10**400], ids=lambda v: repr(v)[:12]
)
@pytest.mark.parametrize("url", [None, "sqlite"])
def test_invalid_ttl_names_the_argument(bad: Any, url: str | None, tmp_path: Path) -> None:
    where = None if url is None else f"sqlite:///{tmp_path / 'c.db'}"
    with pytest.raises(ConfigurationError, match="ttl_seconds"):
        create_checkpointer(bad, url=where)
    with pytest.raises(ConfigurationError, match="sweep_interval_seconds"):
        create_checkpointer(60, url=where, sweep_interval_seconds=-1)
    with pytest.raises(ConfigurationError, match="sweep_interval_seconds"):
        create_checkpointer(60, url=where, sweep_interval_seconds=float("inf"))


def test_a_url_passed_as_the_ttl_says_where_a_url_goes() -> None:
    with pytest.raises(ConfigurationError, match=r"a database URL goes in url=") as refused:
        create_checkpointer("sqlite:///agent.db")  # type: ignore[arg-type]
    assert "'sqlite:///agent.db'" in str(refused.value)
    with pytest.raises(ConfigurationError) as plain:
        create_checkpointer("60")  # type: ignore[arg-type]
    assert "url=" not in str(plain.value)


def test_an_unknown_option_names_ttl_seconds_among_the_known() -> None:
    with pytest.raises(TypeError, match="known: ttl_seconds, url, clock"):
        create_checkpointer(ttl=-1)


@pytest.mark.parametrize(
    ("url", "saver", "own"),
    [
        ("sqlite:///{tmp}/c.db", "SqliteSaver (sqlite)", "durability"),
        ("postgresql://nobody@127.0.0.1:1/agents", "PostgresSaver (postgresql)", "schema"),
        ("hana://user:secret@hana.invalid:443", "HanaSaver (hana)", "pool_size"),
    ],
)
def test_an_unknown_option_with_a_url_is_named_with_the_savers_own(
    url: str, saver: str, own: str, tmp_path: Path
) -> None:
    where = url.format(tmp=tmp_path)
    with pytest.raises(TypeError) as refused:
        create_checkpointer(url=where, ttl=60)
    message = str(refused.value)
    assert f"unknown option(s) ttl for the {saver}; known: ttl_seconds, url, " in message
    assert f" {own}," in message or message.endswith(f" {own}")
    assert not (tmp_path / "c.db").exists()  # refused before anything was opened


def test_unknown_option_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="sweep_every"):
        create_checkpointer(10, sweep_every=3)


def test_ttl_only_options_are_ignored_when_ttl_is_off() -> None:
    assert type(create_checkpointer(0, sweep_interval_seconds=3)) is CheckedInMemorySaver


def test_custom_serde_reaches_both_savers() -> None:
    serde = EncryptedSerializer.from_pycryptodome_aes(key=b"k" * 16) if _has_crypto() else None
    if serde is None:
        pytest.skip("pycryptodome is not installed")
    for ttl in (None, 60):
        saver = create_checkpointer(ttl, serde=serde)
        stored = saver.put(config_for("t"), make_checkpoint({"a": "secret"}), {}, {"a": 1})
        held: Mapping[Any, tuple[str, bytes]]
        if ttl is None:
            assert isinstance(saver, InMemorySaver)
            held = saver.blobs
        else:
            assert isinstance(saver, TimedInMemorySaver)
            held = timed_contents(saver).blobs
        raw = next(iter(held.values()))
        assert raw[0].endswith("+aes") and b"secret" not in raw[1]
        assert present(saver.get_tuple(stored)).checkpoint["channel_values"] == {"a": "secret"}


def _has_crypto() -> bool:
    try:
        import Crypto  # noqa: F401
    except ImportError:
        return False
    return True


def ttl_of(saver: BaseCheckpointSaver[str]) -> int:
    """The TTL of a saver the test expects to be a ``TimedInMemorySaver``."""
    assert isinstance(saver, TimedInMemorySaver)
    assert saver.ttl_seconds is not None
    return saver.ttl_seconds


def test_ttl_comes_from_declared_agent_config(monkeypatch: pytest.MonkeyPatch) -> None:
    assert type(create_checkpointer()) is CheckedInMemorySaver  # nothing declared

    @agent_config(factory.TTL_CONFIG_KEY, "Thread TTL", "Idle seconds before a thread expires")
    def ttl() -> int:
        return 900

    saver = create_checkpointer()
    assert isinstance(saver, TimedInMemorySaver) and saver.ttl_seconds == 900
    monkeypatch.setenv("CONFIG__CHECKPOINTER__TTL_SECONDS", "30")
    assert ttl_of(create_checkpointer()) == 30
    with settings.overrides({factory.TTL_CONFIG_KEY: 0}):
        assert type(create_checkpointer()) is CheckedInMemorySaver
    assert ttl_of(create_checkpointer(5)) == 5  # an explicit argument wins
    monkeypatch.setenv("CONFIG__CHECKPOINTER__TTL_SECONDS", "-4")
    with pytest.raises(ValueError, match=r"config\.checkpointer\.ttl_seconds"):
        create_checkpointer()
    monkeypatch.setenv("CONFIG__CHECKPOINTER__TTL_SECONDS", str(2**31))  # over 68 years
    with pytest.raises(ConfigurationError, match=r"config\.checkpointer\.ttl_seconds"):
        create_checkpointer()


def test_volatile_warning_is_logged_once(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(factory, "_announced", set())
    with caplog.at_level(logging.WARNING, logger=factory.__name__):
        create_checkpointer()
        create_checkpointer(60)
    warnings = [r for r in caplog.records if "does not survive" in r.getMessage()]
    assert len(warnings) == 1


def test_the_factory_names_the_master_key_variable_as_the_cipher_does() -> None:
    """The factory tells "no encryption" without loading the cipher, by the variable's name."""
    from langgraph_checkpoint_agent_memory.crypto.config import MASTER_KEY_ENV

    assert factory.MASTER_KEY_ENV == MASTER_KEY_ENV
