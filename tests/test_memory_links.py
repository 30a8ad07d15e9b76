"""Facts and episodes that vouch for each other in recall (``recall.linked``): a fact learned
from one of the first episodes a query finds ranks higher, and so does an episode one of the
first facts was learned from; ``link_weight=0`` turns it off; on every backend, sync and
async."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from langgraph_checkpoint_agent_memory import AgentMemory, AgentMemoryStore, ConfigurationError
from langgraph_checkpoint_agent_memory.memory.recall import LINK_DEPTH, linked

U = "user=alice"
WHEN = datetime(2024, 5, 6, 10, tzinfo=timezone.utc).timestamp()
NOW = WHEN + 86400


def remembering(store: AgentMemoryStore, said: list[str], **options: Any) -> AgentMemory[Any]:
    """A memory of ``said``, each an episode of the same moment (episode ``e<i>`` of thread
    ``t<i>``), consolidated into facts."""
    memory = AgentMemory(store, clock=lambda: NOW, **options)
    for i, text in enumerate(said):
        memory.record(
            U, [{"role": "user", "content": text}], key=f"e{i}", thread_id=f"t{i}", occurred_at=WHEN
        )
    memory.consolidate()
    return memory


def said_in(recalled: Any) -> list[str]:
    return [e.messages[0]["content"] for e in recalled.episodes]


HOTELS = [
    "Lisbon trip hotel plan: I love the Casa Azul hotel rooms",
    "Work was busy. I love the Grand Plaza hotel",
    *(f"The Lisbon trip, day {d}: the hotel breakfast, walks and trams" for d in range(1, 6)),
    "I love long quiet evenings reading old novels by the fireplace in the winter",
]


#: Room for the two hotels, not for the third fact: the facts do not all fit, so the most
#: relevant come first.
BOTH = 45


def test_a_fact_learned_from_a_first_episode_ranks_higher(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    """Both hotels match "hotel"; the shorter line matches better, until the episode the
    other was learned from (the first the question finds) vouches for it."""
    query = "which hotel for the Lisbon trip?"
    store = make_store(feedback=False)  # plain BM25: the scores this test reasons with
    memory = remembering(store, HOTELS)
    unlinked = AgentMemory(store, clock=lambda: NOW, link_weight=0)
    facts = [f.value for f in memory.facts(U)]
    assert len(facts) == 3 and {"the Casa Azul hotel rooms", "the Grand Plaza hotel"} < set(facts)
    ranked = unlinked.recall(U, query, budget_tokens=BOTH).facts
    assert [f.value for f in ranked] == ["the Grand Plaza hotel", "the Casa Azul hotel rooms"]
    ranked = memory.recall(U, query, budget_tokens=BOTH).facts
    assert [f.value for f in ranked] == ["the Casa Azul hotel rooms", "the Grand Plaza hotel"]


CASA = [
    "We booked rooms for the holiday with Anna and Tom. I love Casa Azul",
    "casa azul? casa azul! (the kitchen paint)",
]


def test_an_episode_a_first_fact_was_learned_from_ranks_higher(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    """The kitchen line says the words more often; the episode where the user said they love
    Casa Azul is the one the fact (the first the question finds) was learned from."""
    store = make_store(feedback=False)  # plain BM25: the scores this test reasons with
    memory = remembering(store, CASA)
    unlinked = AgentMemory(store, clock=lambda: NOW, link_weight=0)
    assert said_in(unlinked.recall(U, "Casa Azul"))[0] == CASA[1]
    assert said_in(memory.recall(U, "Casa Azul"))[0] == CASA[0]
    block = memory.build_context(U, "Casa Azul")
    assert block.index("We booked rooms") < block.index("kitchen")


async def test_async_recall_links_as_sync(make_store: Callable[..., AgentMemoryStore]) -> None:
    store = make_store(feedback=False)
    memory = remembering(store, CASA)
    recalled = await memory.arecall(U, "Casa Azul")
    assert said_in(recalled) == said_in(memory.recall(U, "Casa Azul"))
    assert said_in(recalled)[0] == CASA[0]


def test_links_hold_for_a_look_back_and_spare_the_current_thread(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    """As of a moment the hotels held, the same order; and the episode of the thread in the
    prompt (``exclude_thread``, as ``inject_node`` passes) vouches for nothing."""
    query = "which hotel for the Lisbon trip?"
    store = make_store(feedback=False)
    memory = remembering(store, HOTELS)
    then = memory.recall(U, query, budget_tokens=BOTH, as_of=NOW - 60).facts
    assert [f.value for f in then] == ["the Casa Azul hotel rooms", "the Grand Plaza hotel"]
    here = memory.recall(U, query, budget_tokens=BOTH, exclude_thread="t0")
    assert [f.value for f in here.facts] == ["the Grand Plaza hotel", "the Casa Azul hotel rooms"]
    assert "e0" not in [e.key for e in here.episodes]


@pytest.mark.parametrize("bad", [-0.1, float("nan"), float("inf"), True, "0.5"])
def test_a_bad_link_weight_is_refused(
    make_store: Callable[..., AgentMemoryStore], bad: object
) -> None:
    with pytest.raises(ConfigurationError, match="link_weight must be a finite number >= 0"):
        AgentMemory(make_store(), link_weight=bad)


KEYS = st.sampled_from("abcdef")
TARGETS = st.sampled_from("uvwxyz")


@given(
    st.dictionaries(KEYS, st.floats(0, 1)),
    st.dictionaries(KEYS, st.lists(TARGETS, max_size=3)),
    st.lists(TARGETS, unique=True, max_size=6),
    st.floats(0, 2),
    st.integers(0, 60),
)
def test_linked_only_raises_and_by_the_best_link(
    scores: dict[str, float],
    links: dict[str, list[str]],
    first: list[str],
    weight: float,
    k: int,
) -> None:
    """The same keys, none lower; only an item linked to one of the first ``LINK_DEPTH``
    rises, by at most ``weight / (k + 1)``, and by exactly that when it links to the first."""
    raised = linked(scores, links, first, weight, k)
    assert raised.keys() == scores.keys()
    leading = set(first[:LINK_DEPTH])
    for key, score in scores.items():
        rise = raised[key] - score
        assert -1e-12 <= rise <= weight / (k + 1) + 1e-12
        if not leading & set(links.get(key, [])):
            assert rise == 0
        elif first[0] in links[key]:
            assert rise == pytest.approx(weight / (k + 1))
