"""Pseudo-relevance feedback of the store's lexical ranking (``store/feedback.py``): a
query expanded with the terms of its first matches, on memory, SQLite and PostgreSQL, plain
and encrypted (the term index then holds keyed hashes, which feedback uses as they are);
the store's ``feedback=`` and the ``config.store.feedback`` field that set it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from langgraph_checkpoint_agent_memory import (
    AgentMemoryStore,
    ConfigurationError,
    Feedback,
    agent_config,
    create_store,
)
from langgraph_checkpoint_agent_memory.store.feedback import Posting, Term, expansion

LEXICAL = {"weights": (1.0, 0.0)}


def keys(items: Any) -> list[str]:
    return [i.key for i in items]


def _adoption(store: AgentMemoryStore, ns: tuple[str, ...]) -> None:
    store.put(ns, "said", {"text": "Caroline researched adoption agencies last week"})
    store.put(ns, "list", {"text": "adoption agencies: Hope House and Bright Futures"})
    for i, text in enumerate(["Melanie painted a sunset", "a walk by the lake", "pottery class"]):
        store.put(ns, f"other{i}", {"text": text})


def _recalled(store: AgentMemoryStore, ns: tuple[str, ...], query: str) -> list[str]:
    """Keys as agent memory's recall ranks them (one namespace, exactly)."""
    return [key for key, _ in store.run_plan(store.ranker.rank_keys_plan(ns, query, None, 5, 0.0))]


def test_feedback_finds_what_the_first_match_names(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    """ "list" shares no word with the question; the first match's rarer words find it."""
    on, off = make_store(**LEXICAL, feedback=True), make_store(**LEXICAL)
    query = "What did Caroline research?"
    for store in (on, off):
        _adoption(store, ("u", "caroline"))
    assert keys(off.search(("u", "caroline"), query=query)) == ["said"]  # off by default
    found = on.search(("u", "caroline"), query=query)
    assert keys(found) == ["said", "list"]
    assert found[0].score is not None and found[1].score is not None
    assert found[0].score > found[1].score > 0


def test_the_option_sets_search_and_recall(make_store: Callable[..., AgentMemoryStore]) -> None:
    """``None``: recall only; ``True`` or a ``Feedback``: both; ``False``: neither."""
    query = "Caroline research"
    expected = {
        None: (["said"], ["said", "list"]),
        True: (["said", "list"], ["said", "list"]),
        Feedback(terms=3): (["said", "list"], ["said", "list"]),
        False: (["said"], ["said"]),
    }
    for setting, (searched, recalled) in expected.items():
        store = make_store(**LEXICAL, feedback=setting)
        _adoption(store, ("m",))
        assert keys(store.search(("m",), query=query)) == searched, setting
        assert _recalled(store, ("m",), query) == recalled, setting


def test_the_settings_shape_the_expansion(make_store: Callable[..., AgentMemoryStore]) -> None:
    """Terms come from the first ``docs`` matches only: with one, the second match's words
    ("pottery") are never added."""
    ns = ("u", "p")
    one = make_store(**LEXICAL, feedback=Feedback(docs=1))
    two = make_store(**LEXICAL, feedback=Feedback(docs=2))
    for store in (one, two):
        store.put(ns, "a", {"text": "Melanie signed up for a class"})
        store.put(ns, "b", {"text": "Melanie took a class in pottery"})
        store.put(ns, "c", {"text": "pottery glazes and kilns"})
        store.put(ns, "d", {"text": "a walk by the lake"})
    assert "c" not in keys(one.search(ns, query="Melanie signed class"))
    assert "c" in keys(two.search(ns, query="Melanie signed class"))


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"docs": 0}, "docs must be a whole number >= 1, not 0"),
        ({"terms": 2.5}, "terms must be a whole number >= 1, not 2.5"),
        ({"docs": True}, "docs must be a whole number >= 1, not True"),
        ({"weight": 0.0}, "weight must be a number above 0, not 0.0"),
        ({"weight": float("nan")}, "weight must be a number above 0, not nan"),
        ({"weight": "0.5"}, "weight must be a number above 0, not '0.5'"),
    ],
)
def test_bad_settings_are_refused(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        Feedback(**settings)


def test_a_bad_option_is_refused_before_anything_is_written(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path / 'refused.db'}"
    for bad in ("yes", 1, {"docs": 2}):
        with pytest.raises(ConfigurationError, match="feedback must be True, False, None or"):
            create_store(url, feedback=bad)
    assert not (tmp_path / "refused.db").exists()


def test_agent_config_turns_it_on(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """An operator's ``config.store.feedback`` turns it on for ``search`` when the code
    leaves it out (false keeps the default: recall's on); the argument wins."""

    @agent_config("config.store.feedback", "Query expansion", "Search")
    def feedback() -> bool:
        return False

    url = f"sqlite:///{tmp_path / 'config.db'}"
    query = "Caroline research"
    with create_store(url, weights=(1.0, 0.0)) as store:
        _adoption(store, ("m",))
        assert store.ranker.feedback is None and store.ranker.recall_feedback is not None
        assert keys(store.search(("m",), query=query)) == ["said"]
        assert _recalled(store, ("m",), query) == ["said", "list"]
    monkeypatch.setenv("CONFIG__STORE__FEEDBACK", "true")
    with create_store(url, weights=(1.0, 0.0)) as store:
        assert keys(store.search(("m",), query=query)) == ["said", "list"]
    with create_store(url, weights=(1.0, 0.0), feedback=False) as store:
        assert keys(store.search(("m",), query=query)) == ["said"]
        assert _recalled(store, ("m",), query) == ["said"]
    monkeypatch.setenv("CONFIG__STORE__FEEDBACK", "sometimes")
    with pytest.raises(ConfigurationError, match="CONFIG__STORE__FEEDBACK"):
        create_store(url)


def test_feedback_keeps_to_the_namespace_and_the_filter(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    store = make_store(**LEXICAL, feedback=True)
    _adoption(store, ("u", "a"))
    store.put(("u", "b"), "elsewhere", {"text": "adoption agencies in another namespace"})
    store.put(("u", "a"), "kept", {"text": "agencies for adoption", "kind": "note"})
    found = store.search(("u", "a"), query="Caroline research", limit=10)
    assert "elsewhere" not in keys(found) and {"said", "list", "kept"} <= set(keys(found))
    filtered = store.search(("u", "a"), query="Caroline research", filter={"kind": "note"})
    assert keys(filtered) == []  # the only match the filter keeps has no query term ...
    store.put(("u", "a"), "said", {"text": "Caroline researched adoption", "kind": "note"})
    filtered = store.search(("u", "a"), query="Caroline research", filter={"kind": "note"})
    assert keys(filtered) == ["said", "kept"]  # ... until a kept one leads to it


def test_off_and_on_agree_when_nothing_is_added(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    """Matches whose words are all query words add nothing: the ranking is plain BM25."""
    on, off = make_store(**LEXICAL, feedback=True), make_store(**LEXICAL, feedback=False)
    for store in (on, off):
        store.put(("t",), "a", {"text": "munich munich"})
        store.put(("t",), "b", {"text": "munich"})
    ranked = [(i.key, i.score) for i in on.search(("t",), query="munich")]
    assert [(i.key, i.score) for i in off.search(("t",), query="munich")] == ranked


TERMS = st.tuples(st.integers(-8, 8), st.none())  # a term as feedback weighs it
POSTINGS = st.lists(
    st.builds(
        Posting,
        st.sampled_from(["p"]),
        st.sampled_from("xyz"),
        TERMS,
        st.integers(1, 5),
        st.integers(1, 20),
    ),
    max_size=30,
)


@given(
    POSTINGS,
    st.lists(TERMS, max_size=4),
    st.integers(1, 6),
    st.floats(0.05, 1.0),
    st.dictionaries(st.sampled_from("xyz"), st.floats(0.0, 10.0)),
)
@example(  # a match's share of the best too small for a float: its term weighed 0
    [Posting("p", "x", (1, None), 1, 1), Posting("p", "z", (0, None), 1, 1)],
    [],
    2,
    1.0,
    {"x": 1.0, "z": 5e-324},
)
def test_expansion_is_bounded(
    postings: list[Posting],
    query: list[Term],
    terms: int,
    weight: float,
    scores: dict[str, float],
) -> None:
    """At most ``terms`` terms, none of the query's, each of the matches' terms, weighted
    in (0, ``weight``] with the best at ``weight``."""
    added = expansion(
        postings,
        {("p", k): s for k, s in scores.items()},
        lambda t: 1.0 + abs(t[0]),
        query,
        Feedback(terms=terms, weight=weight),
    )
    assert len(added) <= terms
    assert not set(added) & set(query)
    assert set(added) <= {p.term for p in postings}
    assert all(0 < w <= weight * (1 + 1e-9) for w in added.values())
    if added:
        assert max(added.values()) == weight
