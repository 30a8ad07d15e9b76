"""``@agent_config``: configuration fields declared in code and changed without touching it
(source-compatible with ``sap_cloud_sdk.agent_decorators.agent_config``). The value in force:
an override, else the environment variable named after the key (``config.a.b`` ->
``CONFIG__A__B``), else the JSON file named by ``AGENT_CONFIG_FILE``, else the coded default,
converted to the return annotation by pydantic's lax mode (see the user guide).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import threading
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from langgraph_checkpoint_agent_memory.db import fork
from langgraph_checkpoint_agent_memory.errors import ConfigurationError

if TYPE_CHECKING:
    from pydantic import TypeAdapter

CONFIG_FILE_ENV = "AGENT_CONFIG_FILE"

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
_MISSING: Any = object()


class ConfigValueError(ConfigurationError):
    """A configuration source holds a value that does not convert to the field's type."""


def env_var_name(key: str) -> str:
    """``config.checkpointer.ttl_seconds`` -> ``CONFIG__CHECKPOINTER__TTL_SECONDS``."""
    return "__".join(re.sub(r"[^0-9A-Za-z]", "_", part).upper() for part in key.split("."))


@dataclass
class ConfigField:
    """One declared field: what a UI needs to show it and what the code needs to read it."""

    key: str
    label: str
    description: str
    annotation: Any
    getter: Callable[[], Any] = field(repr=False)
    extra: dict[str, Any] = field(default_factory=dict)
    origin: str = ""

    @property
    def env_var(self) -> str:
        return env_var_name(self.key)

    @property
    def type_name(self) -> str:
        return _type_name(self.annotation)

    def default(self) -> Any:
        """The coded default: the decorated function's own return value."""
        return _coerce(self.getter(), self.annotation, self.key, "the coded default")

    def resolve(self) -> tuple[Any, str]:
        """The effective value and the source it came from."""
        found, source, where = self._found()
        return _coerce(found, self.annotation, self.key, where, text=source == "env"), source

    def _found(self) -> tuple[Any, str, str]:
        """The raw value in force, its source, and how an error names it."""
        with _lock:
            if self.key in _overrides:
                return _overrides[self.key], "override", "an override"
        if (raw := os.environ.get(self.env_var)) is not None:
            return raw, "env", f"environment variable {self.env_var}"
        path = os.environ.get(CONFIG_FILE_ENV)
        found = _file_value(path, self.key) if path else _MISSING
        if found is not _MISSING:
            return found, "file", f"{CONFIG_FILE_ENV} file {path}"
        return self.getter(), "default", "the coded default"

    def value(self) -> Any:
        return self.resolve()[0]

    def describe(self) -> dict[str, Any]:
        """A JSON-ready description, with the effective value and its source."""
        value, source = self.resolve()
        return {
            "key": self.key,
            "label": self.label,
            "description": self.description,
            "type": self.type_name,
            "default": self.default(),
            "value": value,
            "source": source,
            "env_var": self.env_var,
            **({"extra": self.extra} if self.extra else {}),
        }


_lock = fork.module_lock(globals(), "_lock", threading.RLock)


_registry: dict[str, ConfigField] = {}
_overrides: dict[str, Any] = {}


class ConfigValue(Protocol[T_co]):
    """What :func:`agent_config` makes of a function: called, the value in force;
    ``config_field``, the declared :class:`ConfigField`."""

    config_field: ConfigField

    def __call__(self) -> T_co: ...


def agent_config(
    key: str, label: str, description: str, **extra: Any
) -> Callable[[Callable[[], T]], ConfigValue[T]]:
    """Declare a configuration field whose coded default is the decorated function's result;
    calling the decorated function returns the value in force (see the module).

    Args:
        key: The field's dotted name, e.g. ``config.checkpointer.ttl_seconds``;
            ``create_checkpointer`` and ``AgentMemory`` read the ``config.checkpointer.*``
            and ``config.memory.*`` fields.
        label: A short human name, for configuration UIs.
        description: What the value means, for configuration UIs.
        **extra: Anything else to export with the field in the configuration schema.

    Example:
        ```python
        from langgraph_checkpoint_agent_memory import agent_config

        @agent_config(
            "config.checkpointer.ttl_seconds",
            "Thread TTL",
            "Seconds of inactivity after which a conversation is forgotten",
        )
        def checkpointer_ttl() -> int:
            return 3600

        checkpointer_ttl()  # 3600, or CONFIG__CHECKPOINTER__TTL_SECONDS if set
        ```

    Raises:
        ConfigurationError: the key is empty, or another function already declared it.
    """
    if not isinstance(key, str) or not key.strip():
        raise ConfigurationError(f"agent_config key must be a non-empty string, got {key!r}")
    key = key.strip()

    def decorator(fn: Callable[[], T]) -> ConfigValue[T]:
        origin = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"
        try:
            annotation = typing.get_type_hints(fn).get("return", _MISSING)
        except Exception:  # a name only imported for type checkers: values pass as given
            annotation = _MISSING
        declared = ConfigField(key, label, description, annotation, fn, dict(extra), origin)
        with _lock:
            existing = _registry.get(key)
            # The same function declared again (a module re-import) replaces its old entry.
            if existing is not None and existing.origin != origin:
                raise ConfigurationError(
                    f"agent_config key {key!r} is declared twice: by {existing.origin} "
                    f"and by {origin}"
                )
            _registry[key] = declared

        @functools.wraps(fn)
        def effective() -> T:
            return typing.cast(T, declared.value())

        setattr(effective, "config_field", declared)  # noqa: B010 - a function's attribute
        return typing.cast(ConfigValue[T], effective)

    return decorator


def get_field(key: str) -> ConfigField | None:
    with _lock:
        return _registry.get(key)


def fields() -> list[ConfigField]:
    """Every declared field, sorted by key."""
    with _lock:
        return [_registry[k] for k in sorted(_registry)]


def effective_value(key: str, default: Any = None) -> Any:
    """The effective value of a declared field, or ``default`` when nobody declared it."""
    declared = get_field(key)
    return default if declared is None else declared.value()


def export_json(indent: int | None = 2) -> str:
    """The registry as JSON, for tools that show the fields in a UI."""
    return json.dumps([f.describe() for f in fields()], indent=indent, default=str)


def set_override(key: str, value: Any) -> None:
    """Set a programmatic override; it wins over environment, file and default."""
    with _lock:
        _overrides[key] = value


def clear_override(key: str | None = None) -> None:
    """Remove one override, or all of them."""
    with _lock:
        if key is None:
            _overrides.clear()
        else:
            _overrides.pop(key, None)


@contextlib.contextmanager
def overrides(values: Mapping[str, Any]) -> Iterator[None]:
    """Override fields for the duration of a ``with`` block (handy in tests)."""
    with _lock:
        saved = {k: _overrides.get(k, _MISSING) for k in values}
        _overrides.update(values)
    try:
        yield
    finally:
        with _lock:
            for k, old in saved.items():
                if old is _MISSING:
                    _overrides.pop(k, None)
                else:
                    _overrides[k] = old


def _file_value(path: str, key: str) -> Any:
    try:
        mtime = os.stat(path).st_mtime
    except OSError as exc:
        raise ConfigValueError(
            f"{CONFIG_FILE_ENV} names {path!r}, which cannot be read: {exc.strerror}"
        ) from None
    data = _file_data(path, mtime)
    if key in data:
        return data[key]
    node: Any = data
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


@functools.lru_cache(maxsize=16)
def _file_data(path: str, mtime: float) -> dict[str, Any]:
    """The file's JSON object, read again when its modification time changes."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigValueError(
            f"{CONFIG_FILE_ENV} file {path!r} is not valid JSON: {exc}"
        ) from None
    if not isinstance(data, dict):
        raise ConfigValueError(
            f"{CONFIG_FILE_ENV} file {path!r} must hold a JSON object, got {type(data).__name__}"
        )
    return data


def _type_name(annotation: Any) -> str:
    if annotation is _MISSING:
        return "any"
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


@functools.cache
def _adapter(annotation: Any) -> TypeAdapter[Any]:
    # imported here: a process that declares no field (the command line) does without it
    from pydantic import ConfigDict, TypeAdapter

    # a file's 5 for a name is "5"; a class pydantic does not know is checked with isinstance
    config = ConfigDict(coerce_numbers_to_str=True, arbitrary_types_allowed=True)
    return TypeAdapter(annotation, config=config)


def _coerce(value: Any, annotation: Any, key: str, source: str, *, text: bool = False) -> Any:
    if annotation is _MISSING or annotation is Any:
        return value
    from pydantic import PydanticUserError, ValidationError

    try:
        adapter = _adapter(annotation)
    except (PydanticUserError, TypeError):  # a type pydantic cannot build: pass as given
        return value
    try:
        return _validated(adapter, value, text)
    except ValueError as exc:  # pydantic's ValidationError is one
        # a class of the application's own that pydantic only checks with isinstance is built
        # from the value as it always was (not a builtin, whose bool("false") is true)
        if (
            isinstance(annotation, type)
            and annotation.__module__ != "builtins"
            and not isinstance(value, annotation)
        ):
            with contextlib.suppress(TypeError, ValueError):
                return annotation(value)
        reasons = exc.errors() if isinstance(exc, ValidationError) else [{"msg": str(exc)}]
        raise ConfigValueError(
            f"agent_config {key!r}: {source} holds {value!r}, which is not a valid "
            f"{_type_name(annotation)} ({'; '.join(dict.fromkeys(e['msg'] for e in reasons))})"
        ) from None


def _validated(adapter: TypeAdapter[Any], value: Any, text: bool) -> Any:
    """Lax mode; from an environment variable (``text``) ``"none"`` may mean null and what is
    not text (a list, ``2`` for ``Literal[1, 2]``) comes as JSON."""
    from pydantic import ValidationError

    if text and value.strip().lower() in ("", "none", "null"):
        with contextlib.suppress(ValidationError):  # when the type admits null
            adapter.validate_python(None)
            return None
    try:
        return _no_bool_as_number(adapter, value)
    except ValidationError as exc:
        if not text:
            raise
        if value != value.strip():  # a line an environment file or a YAML block ended
            return _validated(adapter, value.strip(), text)
        try:
            parsed = json.loads(value)
        except ValueError:
            raise exc from None  # not JSON either: the error names what was expected
        return _no_bool_as_number(adapter, parsed)


def _no_bool_as_number(adapter: TypeAdapter[Any], value: Any) -> Any:
    found = adapter.validate_python(value)
    # pydantic reads True as 1; a flag given where a number is declared is a mistake
    if isinstance(value, bool) and not isinstance(found, bool):
        raise ValueError("expected a number, got a boolean")
    return found
