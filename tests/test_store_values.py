"""One value semantics on every backend: hostile values, keys, namespaces and filters get the
same outcome in memory, on SQLite and on PostgreSQL: stored and read back equal, or refused
with the same error before anything is written, and a refused item never breaks another."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from langgraph_checkpoint_agent_memory import InvalidValueError, create_store, generate_master_key
from tests.helpers import PACKAGE_ENVIRONMENT, outcome
from tests.pg import SERVER_IDS, PgServers

hostile_text = st.one_of(
    st.text(max_size=8),
    st.sampled_from(["a\\b", "n\nl", "t\tt", 'q"q', "a\x00b", "\x00", "é", "😀", "$.x", ""]),
)
leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    # jsonb keeps numbers as decimals, so a float of 2**53 or more in exponent form reads
    # back as the integer it names: equal in value, not always to the last bit (documented)
    st.floats(allow_nan=True, allow_infinity=True).filter(
        lambda x: not math.isfinite(x) or abs(x) < 2**53
    ),
    hostile_text,
)
json_like = st.recursive(
    leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(hostile_text, inner, max_size=3)
    ),
    max_leaves=6,
)
values = st.one_of(
    st.dictionaries(hostile_text, json_like, max_size=4),
    json_like,  # mostly not a dict: refused
    st.builds(lambda k: {k: b"bytes"}, hostile_text),
    st.builds(lambda: {1: "int key"}),
)
keys = st.one_of(hostile_text.filter(bool), st.sampled_from(["k" * 1024, "k" * 1025]))
labels = st.one_of(
    st.sampled_from(["u", "x" * 1030, "a\x00b", "é"]),
    st.text(alphabet=st.characters(blacklist_characters="."), min_size=1, max_size=6),
)


@pytest.fixture(scope="module")
def stores(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[dict[str, Any]]:
    path: Path = tmp_path_factory.mktemp("values")
    key = generate_master_key()
    with pytest.MonkeyPatch.context() as env:  # memory means memory, whatever the shell says
        for name in PACKAGE_ENVIRONMENT:
            env.delenv(name, raising=False)
        plain_memory, sealed_memory = create_store(None), create_store(None, encryption=key)
    opened = {"memory": plain_memory}
    opened["sqlite"] = create_store(f"sqlite:///{path / 'v.db'}")
    servers: PgServers = request.getfixturevalue("pg_servers")
    for sid in SERVER_IDS:  # every PostgreSQL server of the session
        opened[f"postgres-{sid}"] = create_store(servers.fresh_database(sid))
    # and with encryption on: values sealed, filters decided on decrypted values
    opened["memory-encrypted"] = sealed_memory
    opened["sqlite-encrypted"] = create_store(f"sqlite:///{path / 'e.db'}", encryption=key)
    for sid in SERVER_IDS:
        opened[f"postgres-{sid}-encrypted"] = create_store(
            servers.fresh_database(sid), encryption=key
        )
    yield opened
    for store in opened.values():
        store.close()


def _normal(value: Any) -> Any:
    """A value as JSON gives it back: tuples become lists."""
    if isinstance(value, dict):
        return {k: _normal(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_normal(v) for v in value]
    return value


counter = iter(range(10**9))


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(value=values.filter(lambda v: v is not None), key=keys, label=labels)
def test_put_then_get_agrees_on_every_backend(
    stores: dict[str, Any], value: Any, key: str, label: str
) -> None:
    namespace = ("v", f"n{next(counter)}", label)
    outcomes = {}
    for name, store in stores.items():
        put = outcome(lambda s=store: s.put(namespace, key, value))
        got = outcome(lambda s=store: getattr(s.get(namespace, key), "value", None))
        listed = outcome(lambda s=store: [i.value for i in s.search(namespace[:2])])
        outcomes[name] = (put[0], got, listed)
    first = outcomes["memory"]
    assert all(o == first for o in outcomes.values()), outcomes  # key order aside (jsonb)
    put_result, got, _ = outcomes["memory"]
    if put_result == "ok":
        assert got == ("ok", _normal(value))
    else:
        assert got == ("ok", None) or got[0] == "refused"  # nothing was written


filter_values = st.one_of(
    st.integers(-(2**70), 2**70),
    st.floats(-(2**53), 2**53, allow_nan=False),
    hostile_text,
    st.booleans(),
    st.none(),
)


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    items=st.lists(
        st.dictionaries(hostile_text, filter_values, max_size=3), min_size=1, max_size=5
    ),
    pick=st.integers(0, 10),
    op=st.sampled_from(["$eq", "$ne", "$gt", "$lt"]),
    probe=filter_values,
)
def test_filters_with_hostile_keys_agree_on_every_backend(
    stores: dict[str, Any], items: list[dict[str, Any]], pick: int, op: str, probe: Any
) -> None:
    namespace = ("f", f"n{next(counter)}")
    every_key = sorted({k for item in items for k in item}) or ["absent"]
    key = every_key[pick % len(every_key)]
    if "." in key:  # a dot is a path separator in filters, as in LangGraph's
        key = key.replace(".", "")
    flt = {key: {op: probe}} if key else {"absent": probe}
    results = {}
    for name, store in stores.items():
        for i, item in enumerate(items):
            outcome(lambda s=store, i=i, item=item: s.put(namespace, f"k{i}", item))
        results[name] = outcome(
            lambda s=store: sorted(it.key for it in s.search(namespace, filter=flt, limit=50))
        )
    assert all(r == results["memory"] for r in results.values()), (flt, results)
    assert results["memory"][0] != "error", results  # ok, or refused everywhere


def test_a_bad_value_is_refused_before_anything_is_written(stores: dict[str, Any]) -> None:
    for store in stores.values():
        store.put(("shared",), "good", {"n": 1})
        for bad in ({"n": math.nan}, {"n": math.inf}, "str", [1, 2], {"s": "a\x00b"}):
            with pytest.raises(InvalidValueError):
                store.put(("shared",), "bad", bad)
        assert store.get(("shared",), "bad") is None
        assert [i.key for i in store.search(("shared",), filter={"n": 1})] == ["good"]
