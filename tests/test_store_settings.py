"""The store's settings are checked when it is created, and a put's TTL before anything is
written: a clear ``ConfigurationError`` naming the setting, the same on every backend."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.embeddings import DeterministicFakeEmbedding

from langgraph_checkpoint_agent_memory import (
    AgentMemoryError,
    AgentMemoryStore,
    ConfigurationError,
    create_store,
)
from tests.helpers import present

EMBED = DeterministicFakeEmbedding(size=8)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"rrf_k": -1}, "rrf_k must be a whole number >= 0"),
        ({"rrf_k": 2.5}, "rrf_k must be a whole number >= 0"),
        ({"candidates": 0}, "candidates must be a whole number >= 1"),
        ({"weights": (-1.0, 0.6)}, "weights must be"),
        ({"weights": (0.0, 0.0)}, "not both 0"),
        ({"weights": (1.0,)}, "weights must be"),
        ({"weights": (1.0, math.inf)}, "weights must be"),
        ({"weights": "1,1"}, "weights must be"),
        ({"ttl": 60}, r'TTLConfig mapping such as \{"default_ttl": 60\} \(minutes\), not 60'),
        ({"ttl": {"default_tll": 5}}, "unknown ttl keys: default_tll"),
        ({"ttl": {"default_ttl": -5}}, "default_ttl must be a number of minutes above 0"),
        ({"ttl": {"default_ttl": "5"}}, "default_ttl must be a number of minutes"),
        ({"ttl": {"sweep_interval_minutes": 0}}, "sweep_interval_minutes must be"),
        ({"ttl": {"refresh_on_read": "yes"}}, "refresh_on_read must be true or false"),
        ({"index": "defualt"}, "IndexConfig mapping or 'default', not 'defualt'"),
        ({"index": {"dims": 8}}, "missing: embed"),
        ({"index": {"embed": EMBED}}, "missing: dims"),
        ({"index": {"dims": -3, "embed": EMBED}}, "dims must be a whole number above 0"),
        ({"index": {"dims": 8.5, "embed": EMBED}}, "dims must be a whole number above 0"),
        ({"index": {"dims": "8", "embed": EMBED}}, "dims must be a whole number above 0"),
        ({"index": {"dims": 8, "embed": EMBED, "field": ["text"]}}, "unknown index keys: field"),
        ({"index": {"embed": "default", "dims": 256}}, "leave dims out"),
    ],
)
def test_a_bad_setting_is_refused_when_the_store_is_created(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message) as raised:
        create_store(**options)
    assert isinstance(raised.value, AgentMemoryError)


def test_good_settings_are_kept() -> None:
    store = create_store(
        weights=(0.0, 1.0),
        rrf_k=0,
        candidates=1,
        ttl={"default_ttl": 0.5, "refresh_on_read": False, "sweep_interval_minutes": 1},
        index={"dims": 8, "embed": EMBED, "fields": ["text"]},
    )
    ranking = store.ranker.ranking
    assert (ranking.lexical_weight, ranking.vector_weight, ranking.rrf_k) == (0.0, 1.0, 0)
    assert store.ttl_config == {
        "default_ttl": 0.5,
        "refresh_on_read": False,
        "sweep_interval_minutes": 1,
    }
    store.close()


@pytest.mark.parametrize("ttl", [-1, 0, math.nan, "10", True])
def test_a_put_with_a_bad_ttl_writes_nothing(
    make_store: Callable[..., AgentMemoryStore], ttl: Any
) -> None:
    store = make_store()
    store.put(("n",), "kept", {"v": 1})
    with pytest.raises(ConfigurationError, match="put ttl must be a number of minutes"):
        store.batch(
            [
                _put(("n",), "kept", {"v": 2}, None),
                _put(("n",), "new", {"v": 3}, ttl),
            ]
        )
    assert present(store.get(("n",), "kept")).value == {"v": 1}  # the whole batch refused
    assert store.get(("n",), "new") is None
    store.put(("n",), "new", {"v": 3}, ttl=0.5)  # a good one is taken
    assert present(store.get(("n",), "new")).value == {"v": 3}


def _put(ns: tuple[str, ...], key: str, value: dict[str, Any], ttl: Any) -> Any:
    from langgraph.store.base import PutOp

    return PutOp(ns, key, value, ttl=ttl)


@settings(max_examples=60, deadline=None)
@given(
    st.one_of(
        st.integers(min_value=-5, max_value=5),
        st.floats(allow_nan=True, allow_infinity=True, width=32),
        st.text(max_size=3),
    ),
    st.one_of(
        st.integers(min_value=-5, max_value=5),
        st.floats(allow_nan=True, allow_infinity=True, width=32),
    ),
)
def test_fusion_weights_are_taken_or_refused_never_half_way(a: Any, b: Any) -> None:
    """Any pair of weights is either refused with ConfigurationError or ranks with them."""
    good = (
        all(isinstance(w, (int, float)) and math.isfinite(w) and w >= 0 for w in (a, b))
        and (a or b) != 0
    )
    if not good:
        with pytest.raises(ConfigurationError):
            create_store(weights=(a, b))
        return
    store = create_store(weights=(a, b))
    store.put(("d",), "x", {"text": "alpine hiking"})
    [found] = store.search(("d",), query="hiking")
    assert found.key == "x" and found.score is not None and math.isfinite(found.score)
    store.close()
