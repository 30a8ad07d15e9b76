"""@agent_config: registry, the four sources in order, coercion and its errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal, Optional

import pytest

from langgraph_checkpoint_agent_memory import (
    ConfigurationError,
    ConfigValue,
    ConfigValueError,
    agent_config,
    settings,
)


def declare_ttl() -> ConfigValue[int]:
    @agent_config("config.checkpointer.ttl_seconds", "Thread TTL", "Idle seconds", unit="s")
    def ttl() -> int:
        return 3600

    return ttl


def test_env_var_name() -> None:
    assert settings.env_var_name("config.checkpointer.ttl_seconds") == (
        "CONFIG__CHECKPOINTER__TTL_SECONDS"
    )
    assert settings.env_var_name("config.llm-model.name") == "CONFIG__LLM_MODEL__NAME"


def test_default_then_file_then_env_then_override(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ttl = declare_ttl()
    assert ttl() == 3600
    assert ttl.config_field.resolve() == (3600, "default")

    nested = tmp_path / "nested.json"
    nested.write_text(json.dumps({"config": {"checkpointer": {"ttl_seconds": 120}}}))
    monkeypatch.setenv("AGENT_CONFIG_FILE", str(nested))
    assert ttl.config_field.resolve() == (120, "file")

    flat = tmp_path / "flat.json"
    flat.write_text(json.dumps({"config.checkpointer.ttl_seconds": "90"}))
    monkeypatch.setenv("AGENT_CONFIG_FILE", str(flat))
    assert ttl() == 90

    monkeypatch.setenv("CONFIG__CHECKPOINTER__TTL_SECONDS", " 45 ")
    assert ttl.config_field.resolve() == (45, "env")

    with settings.overrides({"config.checkpointer.ttl_seconds": 5}):
        assert ttl.config_field.resolve() == (5, "override")
    assert ttl() == 45
    settings.set_override("config.checkpointer.ttl_seconds", "7")
    assert ttl() == 7
    settings.clear_override("config.checkpointer.ttl_seconds")
    assert ttl() == 45


def test_file_changes_are_picked_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ttl = declare_ttl()
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"config.checkpointer.ttl_seconds": 1}))
    monkeypatch.setenv("AGENT_CONFIG_FILE", str(path))
    assert ttl() == 1
    path.write_text(json.dumps({"config.checkpointer.ttl_seconds": 2, "other": True}))
    import os

    os.utime(path, (1, 1))  # a different mtime, whatever the file system's resolution
    assert ttl() == 2


@pytest.mark.parametrize(
    ("raw", "source"),
    [("an hour", "environment variable CONFIG__CHECKPOINTER__TTL_SECONDS"), ("3.5", "environment")],
)
def test_bad_env_value_names_key_and_source(
    raw: str, source: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ttl = declare_ttl()
    monkeypatch.setenv("CONFIG__CHECKPOINTER__TTL_SECONDS", raw)
    with pytest.raises(ConfigValueError) as info:
        ttl()
    assert "config.checkpointer.ttl_seconds" in str(info.value)
    assert source in str(info.value)


def test_bad_file_value_and_bad_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ttl = declare_ttl()
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"config.checkpointer.ttl_seconds": True}))
    monkeypatch.setenv("AGENT_CONFIG_FILE", str(path))
    with pytest.raises(ConfigValueError, match=r"AGENT_CONFIG_FILE file .*c\.json"):
        ttl()
    path.write_text("{not json")
    with pytest.raises(ConfigValueError, match="not valid JSON"):
        ttl()
    monkeypatch.setenv("AGENT_CONFIG_FILE", str(tmp_path / "missing.json"))
    with pytest.raises(ConfigValueError, match="cannot be read"):
        ttl()


def test_bad_override_is_reported() -> None:
    ttl = declare_ttl()
    with (
        settings.overrides({"config.checkpointer.ttl_seconds": [1]}),
        pytest.raises(ConfigValueError, match="an override"),
    ):
        ttl()


@pytest.mark.parametrize("key", ["", "   ", None])
def test_empty_key_raises_at_decoration(key: object) -> None:
    with pytest.raises(ConfigurationError, match="non-empty"):
        agent_config(key, "label", "description")  # type: ignore[arg-type]  # bad keys, on purpose


def test_two_functions_with_one_key_raise() -> None:
    declare_ttl()
    declare_ttl()  # the same function declared again (a re-import) is fine

    with pytest.raises(ConfigurationError, match="declared twice"):

        @agent_config("config.checkpointer.ttl_seconds", "Other", "Other")
        def other() -> int:
            return 1


def test_types_are_coerced(monkeypatch: pytest.MonkeyPatch) -> None:
    @agent_config("config.t.flag", "Flag", "A flag")
    def flag() -> bool:
        return False

    @agent_config("config.t.ratio", "Ratio", "A ratio")
    def ratio() -> float:
        return 0.5

    @agent_config("config.t.maybe", "Maybe", "Optional int")
    def maybe() -> Optional[int]:  # noqa: UP045 - the old spelling must work too
        return None

    @agent_config("config.t.mode", "Mode", "A choice")
    def mode() -> Literal["delete", "keep_latest"]:
        return "delete"

    @agent_config("config.t.tags", "Tags", "A list")
    def tags() -> list[str]:
        return []

    monkeypatch.setenv("CONFIG__T__FLAG", "yes")
    monkeypatch.setenv("CONFIG__T__RATIO", "0.25")
    monkeypatch.setenv("CONFIG__T__MAYBE", "none")
    monkeypatch.setenv("CONFIG__T__MODE", "keep_latest")
    monkeypatch.setenv("CONFIG__T__TAGS", '["a", "b"]')
    assert (flag(), ratio(), maybe(), mode(), tags()) == (
        True,
        0.25,
        None,
        "keep_latest",
        ["a", "b"],
    )
    monkeypatch.setenv("CONFIG__T__MAYBE", "12")
    assert maybe() == 12
    monkeypatch.setenv("CONFIG__T__MODE", "everything")
    with pytest.raises(ConfigValueError, match=r"config\.t\.mode"):
        mode()
    monkeypatch.setenv("CONFIG__T__FLAG", "perhaps")
    with pytest.raises(ConfigValueError, match="valid boolean"):
        flag()


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("2", 2), ("1", 1), ("none", None), ("", None), ("null", None)],
)
def test_env_text_may_be_json_or_null(
    raw: str, expected: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    @agent_config("config.t.level", "Level", "A numbered choice")
    def level() -> Optional[Literal[1, 2]]:  # noqa: UP045 - the old spelling must work too
        return 1

    monkeypatch.setenv("CONFIG__T__LEVEL", raw)
    assert level() == expected


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (True, "got a boolean"),  # pydantic alone would read 1
        (2.5, "fractional part"),
        ("an hour", "unable to parse"),
    ],
)
def test_a_bad_number_names_key_value_and_reason(value: object, reason: str) -> None:
    ttl = declare_ttl()
    with (
        settings.overrides({"config.checkpointer.ttl_seconds": value}),
        pytest.raises(ConfigValueError) as info,
    ):
        ttl()
    message = str(info.value)
    assert "\n" not in message
    assert "'config.checkpointer.ttl_seconds'" in message and repr(value) in message
    assert reason in message


def test_text_fields_take_numbers_and_keep_an_empty_string(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    @agent_config("config.t.name", "Name", "A name")
    def name() -> str:
        return "x"

    with settings.overrides({"config.t.name": 5}):
        assert name() == "5"
    monkeypatch.setenv("CONFIG__T__NAME", "")
    assert name() == ""  # not null: the field does not admit None


def test_registry_lists_and_exports_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    declare_ttl()
    monkeypatch.setenv("CONFIG__CHECKPOINTER__TTL_SECONDS", "60")
    exported = json.loads(settings.export_json())
    entry = next(e for e in exported if e["key"] == "config.checkpointer.ttl_seconds")
    assert entry == {
        "key": "config.checkpointer.ttl_seconds",
        "label": "Thread TTL",
        "description": "Idle seconds",
        "type": "int",
        "default": 3600,
        "value": 60,
        "source": "env",
        "env_var": "CONFIG__CHECKPOINTER__TTL_SECONDS",
        "extra": {"unit": "s"},
    }
    assert "config.checkpointer.ttl_seconds" in [f.key for f in settings.fields()]


class Host:
    """A class of the application's own, built from the text of a setting."""

    def __init__(self, name: str) -> None:
        self.name = name


def test_classes_of_the_application_are_built_from_the_value(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    @agent_config("config.t.host", "Host", "A host")
    def host() -> Host:
        return Host("localhost")

    assert host().name == "localhost"
    monkeypatch.setenv("CONFIG__T__HOST", "db.internal")
    assert isinstance(host(), Host) and host().name == "db.internal"


def test_an_annotation_only_type_checkers_resolve_lets_values_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    namespace: dict[str, object] = {"agent_config": agent_config}
    exec(  # a return type named only under TYPE_CHECKING, as the string annotation keeps it
        "from __future__ import annotations\n"
        "@agent_config('config.t.rate', 'Rate', 'A rate')\n"
        "def rate() -> Decimal | None:\n"
        "    return None\n",
        namespace,
    )
    rate = namespace["rate"]
    assert callable(rate)
    assert rate() is None
    monkeypatch.setenv("CONFIG__T__RATE", "1.5")
    assert rate() == "1.5"


@pytest.mark.parametrize("text", ["true\n", "  true", "yes "])
def test_env_text_around_a_flag_is_trimmed(text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    @agent_config("config.t.trimmed", "Trimmed", "A flag")
    def trimmed() -> bool:
        return False

    monkeypatch.setenv("CONFIG__T__TRIMMED", text)
    assert trimmed() is True


def test_submodules_are_attributes_of_the_package() -> None:
    import langgraph_checkpoint_agent_memory as package

    assert package.settings is settings
    assert package.errors.ConfigurationError is ConfigurationError
