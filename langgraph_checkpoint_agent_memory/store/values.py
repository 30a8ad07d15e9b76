"""What the store accepts, the same on every backend, checked before anything is written (the
user guide's "What an item may hold"), each refusal an :class:`InvalidValueError` saying where.

Each rule stops what some backend would fail on later: PostgreSQL's ``jsonb`` takes a bare
string, then fails every read of the namespace; ``NaN``, infinities, NUL and lone surrogates
fail PostgreSQL or SQLite's JSON functions; SQLite would take what the others refuse. Values
are walked without recursion: any depth is refused, never a ``RecursionError``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from langgraph.store.base import (
    GetOp,
    InvalidNamespaceError,
    ListNamespacesOp,
    NotProvided,
    Op,
    PutOp,
    SearchOp,
    TTLConfig,
    validate_op_namespace,
)

from langgraph_checkpoint_agent_memory.db.schema import MAX_TTL_SECONDS
from langgraph_checkpoint_agent_memory.db.store import ns_text
from langgraph_checkpoint_agent_memory.errors import (
    ConfigurationError,
    InvalidNamespaceValueError,
    InvalidValueError,
)
from langgraph_checkpoint_agent_memory.text import unstorable

#: The longest namespace (labels joined by ".") and key, in characters.
MAX_NAMESPACE = 1024
MAX_KEY = 1024
#: How deep dicts and lists may nest in a value (``{"a": {"b": 1}}`` is 2 levels): far below
#: SQLite's JSON limit (1000 levels, beyond which every filtered search over the item fails)
#: and Python's recursion limit (which ``json`` needs to encode and decode).
MAX_DEPTH = 200
#: The longest TTL in minutes: :data:`MAX_TTL_SECONDS` (about 68 years), so that every
#: backend can keep ``now + ttl * 60``.
MAX_TTL_MINUTES = MAX_TTL_SECONDS / 60
#: The largest search or ``list_namespaces`` limit, offset and depth: a 4-byte INTEGER, which
#: every backend's ``LIMIT`` holds.
MAX_COUNT = 2**31 - 1


def check_namespace_type(namespace: Any, name: str = "namespace") -> None:
    """Refuse a namespace that is not a tuple (or list) of labels: a bare string would be
    read as one label per character."""
    if not isinstance(namespace, (tuple, list)):
        hint = f": write ({namespace!r},)" if isinstance(namespace, str) else ""
        raise InvalidNamespaceValueError(
            f"{name} must be a tuple of strings, got {type(namespace).__name__} {namespace!r}{hint}"
        )


def check_count(value: Any, name: str, least: int = 0) -> None:
    """A limit, offset or depth: a whole number from ``least`` to :data:`MAX_COUNT`."""
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= MAX_COUNT:
        raise InvalidValueError(
            f"{name} must be a whole number from {least} to {MAX_COUNT}, got {value!r}"
        )


def check_namespace(namespace: Sequence[Any] | None) -> None:
    """Refuse a namespace a backend could not store or find (``InvalidNamespaceValueError``)."""
    namespace = namespace or ()
    try:
        for label in namespace:
            if not isinstance(label, str):
                raise InvalidValueError(
                    f"namespace labels must be strings, got {type(label).__name__} {label!r}"
                )
            _check_text(label, f"namespace label {label!r}")
    except InvalidValueError as exc:
        raise InvalidNamespaceValueError(str(exc)) from None
    joined = sum(len(label) for label in namespace) + max(len(namespace) - 1, 0)
    if joined > MAX_NAMESPACE:
        raise InvalidNamespaceValueError(
            f"namespace is {joined} characters joined with dots; at most {MAX_NAMESPACE}"
        )


@contextmanager
def namespace_errors() -> Iterator[None]:
    """LangGraph's ``InvalidNamespaceError`` raised as :class:`InvalidNamespaceValueError`
    (both that and the package's ``InvalidValueError``)."""
    try:
        yield
    except InvalidNamespaceValueError:
        raise
    except InvalidNamespaceError as exc:
        raise InvalidNamespaceValueError(str(exc)) from None


def check_key(key: Any) -> None:
    if not isinstance(key, str):
        raise InvalidValueError(f"keys must be strings, got {type(key).__name__} {key!r}")
    _check_text(key, f"key {key!r}")
    if len(key) > MAX_KEY:
        raise InvalidValueError(f"key is {len(key)} characters; at most {MAX_KEY}")


def check_value(value: Any) -> None:
    """Refuse a value that would not read back equal on every backend."""
    if not isinstance(value, dict):
        raise InvalidValueError(
            f"store values must be dicts, got {type(value).__name__}: wrap it, e.g. "
            "{'value': ...}"
        )
    _check(value, "value")


def check_filter(filter: Mapping[str, Any] | None) -> None:
    """Refuse filter strings no stored value can hold (PostgreSQL would fail on them), numbers
    that are not finite (backends order them differently), and operands nested too deep."""
    if filter is None:
        return
    if not isinstance(filter, Mapping):
        raise InvalidValueError(
            f"search filter must be a dict such as {{'rating': {{'$gte': 4}}}}, got "
            f"{type(filter).__name__} {filter!r}"
        )
    for key, spec in filter.items():
        if isinstance(key, str):
            _check_text(key, f"filter key {key!r}")
        where = f"filter value for {key!r}"
        stack: list[tuple[Any, int]] = [(spec, 1)]
        while stack:
            node, depth = stack.pop()
            if isinstance(node, str):
                _check_text(node, where)
            elif isinstance(node, float) and not math.isfinite(node):
                raise InvalidValueError(
                    f"{where} holds {node!r}: filters compare finite numbers only (no stored "
                    "value is NaN or infinite)"
                )
            elif isinstance(node, (Mapping, list, tuple, set, frozenset)):
                if depth > MAX_DEPTH:
                    raise InvalidValueError(f"{where} nests more than {MAX_DEPTH} levels deep")
                items = node.values() if isinstance(node, Mapping) else node
                stack.extend((item, depth + 1) for item in items)


def encode_value(value: Mapping[str, Any]) -> str:
    """The stored JSON text of a value :func:`check_value` accepted."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _check_text(text: str, where: str) -> None:
    if why := unstorable(text):
        raise InvalidValueError(f"{where} {why}")


def _check(value: Any, where: str) -> None:
    stack: list[tuple[Any, str, int]] = [(value, where, 1)]
    while stack:
        node, at, depth = stack.pop()
        if isinstance(node, float) and not math.isfinite(node):
            raise InvalidValueError(f"{at} is {node!r}, which JSON cannot hold")
        if node is None or isinstance(node, (bool, int, float)):
            continue
        if isinstance(node, str):
            _check_text(node, at)
        elif not isinstance(node, (dict, list, tuple)):
            raise InvalidValueError(
                f"{at} is a {type(node).__name__}, which JSON cannot hold: store strings, "
                "numbers, booleans, None, lists and dicts"
            )
        elif depth > MAX_DEPTH:
            raise InvalidValueError(
                f"{where} nests dicts and lists more than {MAX_DEPTH} levels deep"
            )
        elif isinstance(node, dict):
            for key, item in node.items():
                if not isinstance(key, str):
                    raise InvalidValueError(
                        f"{at} has a {type(key).__name__} key {key!r}; JSON keys are strings"
                    )
                _check_text(key, f"{at} key {key!r}")
                stack.append((item, f"{at}[{key!r}]", depth + 1))
        else:
            stack.extend((item, f"{at}[{i}]", depth + 1) for i, item in enumerate(node))


def checked_batch(ops: Iterable[Op]) -> tuple[list[Op], dict[tuple[str, str], PutOp]]:
    """Check every operation of a batch before anything runs (a bad one fails the whole
    batch); return the operations and the puts by item, the last put of a key winning."""
    ops = list(ops)
    puts: dict[tuple[str, str], PutOp] = {}
    last: tuple[type, Any] | None = None  # a batch's ops mostly share one namespace
    for op in ops:
        namespace = _namespace_of(op)
        if (type(op), namespace) != last:
            with namespace_errors():
                validate_op_namespace(op)
            check_namespace(namespace)
            # a listing's conditions are its own: each is checked
            last = None if isinstance(op, ListNamespacesOp) else (type(op), namespace)
        if isinstance(op, (GetOp, PutOp)):
            check_key(op.key)
        if isinstance(op, PutOp):
            if not op.namespace:
                raise ConfigurationError("a namespace needs at least one label")
            if op.value is not None:
                check_value(op.value)
            if op.ttl is not None and not isinstance(op.ttl, NotProvided):
                check_minutes(op.ttl, "put ttl")
            puts[(ns_text(op.namespace), op.key)] = op
        elif isinstance(op, SearchOp):
            _check_search(op)
    return ops, puts


def _namespace_of(op: Op) -> Any:
    """The namespace (prefix) of ``op``, its container and counts checked (a bare string
    would be read as one label per character)."""
    if isinstance(op, ListNamespacesOp):
        for condition in op.match_conditions or ():
            check_namespace_type(condition.path, f"list_namespaces {condition.match_type}")
        check_count(op.limit, "list_namespaces limit")
        check_count(op.offset, "list_namespaces offset")
        if op.max_depth is not None:
            check_count(op.max_depth, "list_namespaces max_depth", 1)
        return ()
    if isinstance(op, SearchOp):
        check_namespace_type(op.namespace_prefix, "search namespace_prefix")
        return op.namespace_prefix
    namespace = getattr(op, "namespace", ())
    check_namespace_type(namespace)
    return namespace


def _check_search(op: SearchOp) -> None:
    check_count(op.limit, "search limit")
    check_count(op.offset, "search offset")
    if op.query is not None and not isinstance(op.query, str):
        raise InvalidValueError(
            f"search query must be a string or None, got {type(op.query).__name__} {op.query!r}"
        )
    check_filter(op.filter)


def put_ttl(op: PutOp, config: Mapping[str, Any] | None) -> float | None:
    """A put's TTL in minutes: its own (not ``NOT_PROVIDED``), else ``default_ttl``."""
    return (config or {}).get("default_ttl") if isinstance(op.ttl, NotProvided) else op.ttl


#: The keys of LangGraph's ``TTLConfig``.
TTL_KEYS = ("default_ttl", "omit_expired", "refresh_on_read", "sweep_interval_minutes")


def check_minutes(value: Any, name: str) -> None:
    """A TTL in minutes: a number above zero and at most :data:`MAX_TTL_MINUTES`."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigurationError(f"{name} must be a number of minutes, not {value!r}")
    if not 0 < value <= MAX_TTL_MINUTES:  # NaN fails both; an int of any size compares
        raise ConfigurationError(
            f"{name} must be a number of minutes above 0 and at most {MAX_TTL_MINUTES:.0f} "
            f"(about 68 years), not {value!r}"
        )


def checked_keys(value: Any, name: str, keys: Sequence[str], form: str) -> None:
    """Refuse a ``value`` that is not a mapping (``form`` says what it must be) or that holds a
    key not in ``keys`` (a misspelt one would be ignored without a word)."""
    if not isinstance(value, Mapping):
        raise ConfigurationError(f"{name} must be {form}, not {value!r}")
    if unknown := sorted(set(value) - set(keys)):
        raise ConfigurationError(
            f"unknown {name} keys: {', '.join(unknown)} (known: {', '.join(keys)})"
        )


def checked_ttl_config(ttl: TTLConfig | None) -> TTLConfig | None:
    """LangGraph's ``TTLConfig``, checked: known keys only (a misspelt ``default_ttl`` would keep
    items forever). ``omit_expired`` changes nothing: no backend reads an expired item."""
    if ttl is None:
        return None
    checked_keys(ttl, "ttl", TTL_KEYS, 'a TTLConfig mapping such as {"default_ttl": 60} (minutes)')
    for name in ("default_ttl", "sweep_interval_minutes"):
        if ttl.get(name) is not None:
            check_minutes(ttl.get(name), f"ttl {name}")
    for flag in ("refresh_on_read", "omit_expired"):
        if not isinstance(ttl.get(flag, True), bool):
            raise ConfigurationError(f"ttl {flag} must be true or false")
    return ttl


def checked_ranking(weights: Any, rrf_k: Any, candidates: Any) -> tuple[float, float, int, int]:
    """The fusion settings, checked (the errors say the rules)."""
    if (
        not isinstance(weights, Sequence)
        or isinstance(weights, str)
        or len(weights) != 2
        or not all(
            isinstance(w, (int, float)) and not isinstance(w, bool) and math.isfinite(w) and w >= 0
            for w in weights
        )
        or not any(weights)
    ):
        raise ConfigurationError(
            f"weights must be (lexical, vector): two numbers >= 0, not both 0, not {weights!r}"
        )
    for name, value, least in (("rrf_k", rrf_k, 0), ("candidates", candidates, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ConfigurationError(f"{name} must be a whole number >= {least}, not {value!r}")
    return float(weights[0]), float(weights[1]), rrf_k, candidates


def checked_time_field(time_field: Any) -> str | None:
    """``time_field``, checked: ``None``, or the name of what dates an item (``created_at``,
    ``updated_at``, or a field of the value): a non-empty string that is no operator.

    Example:
        >>> checked_time_field("occurred_at")
        'occurred_at'
    """
    if time_field is None:
        return None
    if not isinstance(time_field, str) or not time_field.strip() or time_field.startswith("$"):
        raise ConfigurationError(
            "time_field must be 'created_at', 'updated_at' or the name of a field of the "
            f"value holding seconds since the epoch, not {time_field!r}"
        )
    return time_field
