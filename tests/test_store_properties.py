"""Property: on every backend, search with random filters returns exactly what a plain
Python model of the same items returns, in the same order; the SQL pre-filter never drops a
match and never lets a non-match through."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from langgraph_checkpoint_agent_memory import AgentMemoryStore
from langgraph_checkpoint_agent_memory.store import search as S
from tests.helpers import FakeClock

scalars = st.one_of(
    st.integers(-5, 5),
    st.floats(-5, 5, allow_nan=False, width=32),
    st.sampled_from(["a", "b", "ab", "B", "10", "9"]),
    st.booleans(),
    st.none(),
)
values: st.SearchStrategy[dict[str, Any]] = st.dictionaries(
    st.sampled_from(["n", "s", "x"]),
    st.one_of(scalars, st.dictionaries(st.sampled_from(["n", "s"]), scalars, max_size=2)),
    max_size=3,
)
operators = st.sampled_from(["$eq", "$ne", "$gt", "$gte", "$lt", "$lte"])
filters: st.SearchStrategy[dict[str, Any]] = st.dictionaries(
    st.sampled_from(["n", "s", "x.n", "x.s"]),
    st.one_of(
        scalars,
        st.dictionaries(operators, scalars, min_size=1, max_size=2),
        st.builds(lambda v: {"$in": v}, st.lists(scalars, max_size=3)),
    ),
    max_size=2,
)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(items=st.lists(values, min_size=1, max_size=12), flt=filters)
def test_filters_match_the_model(
    make_store: Callable[..., AgentMemoryStore], items: list[dict[str, Any]], flt: dict[str, Any]
) -> None:
    clock = FakeClock(start=1_800_000_000)
    store = make_store(clock=clock)
    store.delete_namespace(("p",))
    for i, value in enumerate(items):
        clock.advance(1)
        store.put(("p",), f"k{i:02}", value)
    conds = S.conditions(flt)
    expected = [f"k{i:02}" for i in reversed(range(len(items))) if S.matches(items[i], conds)]
    assert [it.key for it in store.search(("p",), filter=flt, limit=100)] == expected


ops_strategy: st.SearchStrategy[list[tuple[Any, ...]]] = st.lists(
    st.one_of(
        st.tuples(
            st.just("put"),
            st.sampled_from([("a",), ("a", "b"), ("c",)]),
            st.sampled_from(["k1", "k2", "k3"]),
            values,
        ),
        st.tuples(
            st.just("delete"),
            st.sampled_from([("a",), ("a", "b"), ("c",)]),
            st.sampled_from(["k1", "k2", "k3"]),
        ),
        st.tuples(
            st.just("get"),
            st.sampled_from([("a",), ("a", "b"), ("c",)]),
            st.sampled_from(["k1", "k2", "k3"]),
        ),
        st.tuples(
            st.just("search"),
            st.sampled_from([("a",), ("c",), ("a", "b")]),
            filters,
            st.integers(0, 3),
            st.integers(0, 2),
        ),
        st.tuples(
            st.just("query"),
            st.sampled_from([("a",), ("c",), ()]),
            st.sampled_from([{}, {"n": {"$gte": 0}}]),
            st.sampled_from(["b", "ab 10", "9 b", "a b ab", "the"]),
            st.integers(1, 4),
        ),
        st.tuples(
            st.just("namespaces"),
            st.sampled_from([None, ("a",), ("*", "b")]),
            st.sampled_from([None, 1]),
        ),
        st.tuples(st.just("drop"), st.sampled_from([("a",), ("c",)])),
    ),
    max_size=25,
)


def _view(result: Any) -> Any:
    if result is None or isinstance(result, int):
        return result
    if isinstance(result, list):
        return [_view(r) for r in result]
    if isinstance(result, tuple):
        return result
    return (tuple(result.namespace), result.key, result.value, result.created_at, result.updated_at)


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(operations=ops_strategy)
def test_backends_answer_like_memory(
    make_store: Callable[..., AgentMemoryStore],
    store_backend: str,
    operations: list[tuple[Any, ...]],
) -> None:
    """Every backend gives the in-memory store's answers to the same operations."""
    from langgraph_checkpoint_agent_memory import create_store

    clock = FakeClock(start=1_800_000_000)
    store = make_store(clock=clock)
    reference = create_store(clock=clock)
    for ns in (("a",), ("c",)):
        store.delete_namespace(ns)
    try:
        for op in operations:
            clock.advance(1)
            kind = op[0]
            results: list[Any]
            if kind == "put":
                for s in (store, reference):
                    s.put(op[1], op[2], op[3])
                results = [None, None]  # put and delete answer nothing
            elif kind == "delete":
                for s in (store, reference):
                    s.delete(op[1], op[2])
                results = [None, None]
            elif kind == "get":
                results = [s.get(op[1], op[2]) for s in (store, reference)]
            elif kind == "search":
                results = [
                    s.search(op[1], filter=op[2], limit=op[3], offset=op[4])
                    for s in (store, reference)
                ]
            elif kind == "query":  # BM25 over the same index: same order, same scores
                results = [
                    [
                        (*_view(item), round(item.score or 0.0, 9))
                        for item in s.search(op[1], query=op[3], filter=op[2], limit=op[4])
                    ]
                    for s in (store, reference)
                ]
            elif kind == "namespaces":
                results = [
                    s.list_namespaces(prefix=op[1], max_depth=op[2]) for s in (store, reference)
                ]
            else:
                results = [s.delete_namespace(op[1]) for s in (store, reference)]
            assert _view(results[0]) == _view(results[1]), op
    finally:
        reference.close()
