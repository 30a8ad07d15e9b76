"""Property: on every backend, search with random filters returns exactly what a plain
Python model of the same items returns, in the same order; the SQL pre-filter never drops a
match and never lets a non-match through."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from langgraph_checkpoint_agent_memory.store import search as S
from tests.helpers import FakeClock

scalars = st.one_of(
    st.integers(-5, 5),
    st.floats(-5, 5, allow_nan=False, width=32),
    st.sampled_from(["a", "b", "ab", "B", "10", "9"]),
    st.booleans(),
    st.none(),
)
values = st.dictionaries(
    st.sampled_from(["n", "s", "x"]),
    st.one_of(scalars, st.dictionaries(st.sampled_from(["n", "s"]), scalars, max_size=2)),
    max_size=3,
)
operators = st.sampled_from(["$eq", "$ne", "$gt", "$gte", "$lt", "$lte"])
filters = st.dictionaries(
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
    make_store: Callable[..., Any], items: list[dict], flt: dict
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
