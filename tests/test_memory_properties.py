"""Property-based tests of memory: isolation between scopes, and the history invariants."""

from __future__ import annotations

import itertools
import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from langgraph_checkpoint_agent_memory import AgentMemory, create_store
from langgraph_checkpoint_agent_memory.memory import facts as F
from langgraph_checkpoint_agent_memory.memory.model import Fact, FactCandidate, Scope

USERS = ["alice", "bob", "c.d@example.com"]
AGENTS = [None, "support", "sales"]
CITIES = ["Berlin", "Munich", "Paris", "berlin", "Rome"]

scopes = st.builds(
    lambda u, a: Scope(user_id=u, agent_id=a), st.sampled_from(USERS), st.sampled_from(AGENTS)
)


def tag_of(scope: Scope) -> str:
    return re.sub(r"\W", "", scope.key)


def check_history(history: list[Fact], current: list[Fact], chain: bool = True) -> None:
    """At most one current value per single-valued attribute; windows do not overlap."""
    by_attr: dict[str, list[Fact]] = {}
    for f in [*history, *current]:
        by_attr.setdefault(f.attribute, []).append(f)
    for attr, versions in by_attr.items():
        if any(v.multi for v in versions):
            continue
        live = [v for v in versions if v.valid_to is None]
        assert len(live) <= 1, attr
        ordered = sorted(versions, key=lambda v: (v.valid_from, v.valid_to or float("inf")))
        for a, b in itertools.pairwise(ordered):
            assert a.valid_to is not None, "only the last version may be current"
            assert a.valid_to <= b.valid_from
            if chain:  # in one job several values share a timestamp: no order to check
                assert a.superseded_by == b.value


@given(st.lists(st.tuples(st.sampled_from(CITIES), st.booleans()), min_size=1, max_size=30))
def test_merge_keeps_one_current_value_and_disjoint_windows(steps: list[tuple[str, bool]]) -> None:
    current: dict[str, Fact] = {}
    history: list[Fact] = []
    now = 1000.0
    for i, (city, also_language) in enumerate(steps):
        now += 1 + i % 3
        cands = [FactCandidate(attribute="city", value=city, statement=f"lives in {city}")]
        if also_language:
            cands.append(FactCandidate(attribute="languages", value=city[:2], multi=True))
        changes = F.merge(current, cands, episode_key=f"e{i}", now=now)
        current.update(changes.current)
        history += changes.history.values()
    check_history(history, list(current.values()))
    assert current["city"].value.casefold() == steps[-1][0].casefold()
    expected_changes = sum(
        1 for a, b in itertools.pairwise(s[0].casefold() for s in steps) if a != b
    )
    assert len(history) == expected_changes


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    st.lists(
        st.tuples(scopes, st.sampled_from(CITIES), st.sampled_from(["likes", "city"])),
        min_size=1,
        max_size=12,
    )
)
def test_no_scope_sees_another_scopes_memory(
    told: list[tuple[Scope, str, str]],
) -> None:
    memory = AgentMemory(create_store())  # SQLite in memory: the same SQL as a file
    for n, (scope, city, kind) in enumerate(told):
        tag = f"{tag_of(scope)}x{n}"
        text = f"I live in {city}{tag}" if kind == "city" else f"I like {city}{tag}"
        memory.record(scope, [{"role": "user", "content": text}], key=f"e{n}")
    memory.consolidate()
    told_scopes = {s for s, _, _ in told}
    for scope in told_scopes:
        own = tuple(f"{tag_of(scope)}x{n}" for n, (s, _, _) in enumerate(told) if s == scope)
        facts = memory.facts(scope)
        assert facts and all(f.value.endswith(own) for f in facts)
        check_history(memory.history(scope), [], chain=False)
        assert all(e.messages[0]["content"].endswith(own) for e in memory.episodes(scope))
        context = memory.build_context(scope, "where")
        for other in told_scopes - {scope}:
            assert tag_of(other) + "x" not in context
