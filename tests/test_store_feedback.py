"""Pseudo-relevance feedback of the store's lexical ranking (``store/feedback.py``): a
query expanded with the terms of its first matches, on memory, SQLite and PostgreSQL, plain
and encrypted (the term index then holds keyed hashes, which feedback uses as they are)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from langgraph_checkpoint_agent_memory import AgentMemoryStore
from langgraph_checkpoint_agent_memory.store.feedback import Feedback, Posting, expansion

LEXICAL = {"weights": (1.0, 0.0)}


def keys(items: Any) -> list[str]:
    return [i.key for i in items]


def _adoption(store: AgentMemoryStore, ns: tuple[str, ...]) -> None:
    store.put(ns, "said", {"text": "Caroline researched adoption agencies last week"})
    store.put(ns, "list", {"text": "adoption agencies: Hope House and Bright Futures"})
    for i, text in enumerate(["Melanie painted a sunset", "a walk by the lake", "pottery class"]):
        store.put(ns, f"other{i}", {"text": text})


def test_feedback_finds_what_the_first_match_names(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    """ "list" shares no word with the question; the first match's rarer words find it."""
    store = make_store(**LEXICAL)
    _adoption(store, ("u", "caroline"))
    query = "What did Caroline research?"
    assert keys(store.search(("u", "caroline"), query=query)) == ["said"]  # off by default
    store.ranker.feedback = Feedback()
    found = store.search(("u", "caroline"), query=query)
    assert keys(found) == ["said", "list"]
    assert found[0].score is not None and found[1].score is not None
    assert found[0].score > found[1].score > 0
    store.ranker.feedback = None
    assert keys(store.search(("u", "caroline"), query=query)) == ["said"]


def test_feedback_keeps_to_the_namespace_and_the_filter(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    store = make_store(**LEXICAL)
    store.ranker.feedback = Feedback()
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
    store = make_store(**LEXICAL)
    store.ranker.feedback = Feedback()
    store.put(("t",), "a", {"text": "munich munich"})
    store.put(("t",), "b", {"text": "munich"})
    on = [(i.key, i.score) for i in store.search(("t",), query="munich")]
    store.ranker.feedback = None
    assert [(i.key, i.score) for i in store.search(("t",), query="munich")] == on


def test_recall_ranks_keys_with_feedback(make_store: Callable[..., AgentMemoryStore]) -> None:
    store = make_store(**LEXICAL)
    _adoption(store, ("m",))
    plan = store.ranker.rank_keys_plan(("m",), "Caroline research", None, 5, 0.0)
    assert [key for key, _ in store.run_plan(plan)] == ["said", "list"]  # on by default
    store.ranker.recall_feedback = None
    plan = store.ranker.rank_keys_plan(("m",), "Caroline research", None, 5, 0.0)
    assert [key for key, _ in store.run_plan(plan)] == ["said"]


TERMS = st.text("abcdef", min_size=1, max_size=3)
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
def test_expansion_is_bounded(
    postings: list[Posting], query: list[str], terms: int, weight: float, scores: dict[str, float]
) -> None:
    """At most ``terms`` terms, none of the query's, each of the matches' terms, weighted
    in (0, ``weight``] with the best at ``weight``."""
    added = expansion(
        postings,
        {("p", k): s for k, s in scores.items()},
        lambda t: 1.0 + len(t),
        query,
        Feedback(terms=terms, weight=weight),
    )
    assert len(added) <= terms
    assert not set(added) & set(query)
    assert set(added) <= {p.term for p in postings}
    assert all(0 < w <= weight * (1 + 1e-9) for w in added.values())
    if added:
        assert max(added.values()) == weight
