"""One outcome for one input on every backend, at the bounds: TTLs, identifier lengths,
value depth, filter size and non-finite filter numbers, namespace errors, ``omit_expired``.

Each test runs on memory, SQLite and every PostgreSQL server; an input is either accepted
and works (read back, searched, consolidated) or refused with the package's error before
anything is written.
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import HumanMessage
from langchain_core.prompt_values import ChatPromptValue
from langgraph.store.base import InvalidNamespaceError, PutOp

from langgraph_checkpoint_agent_memory import (
    AgentMemory,
    ConfigurationError,
    InvalidNamespaceValueError,
    InvalidValueError,
    create_checkpointer,
)
from langgraph_checkpoint_agent_memory.db.schema import MAX_TTL_SECONDS
from langgraph_checkpoint_agent_memory.memory.model import (
    EARLIEST_SECONDS,
    LATEST_SECONDS,
    MAX_EPISODE_KEY,
    MAX_THREAD_ID,
)
from langgraph_checkpoint_agent_memory.store.values import MAX_DEPTH, MAX_TTL_MINUTES
from tests.helpers import FakeClock, make_checkpoint
from tests.pg import backend_params, is_postgres, pg_database

SLOW = settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
counter = iter(range(10**9))


@pytest.fixture(params=backend_params("memory", "sqlite", "postgres"))
def saver_url(request: pytest.FixtureRequest, tmp_path: Path) -> str | None:
    """``None`` (the in-memory saver), a SQLite file, or a fresh PostgreSQL database."""
    backend = str(request.param)
    if backend == "memory":
        return None
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'ttl.db'}"
    assert is_postgres(backend)
    return pg_database(request, backend)


@pytest.fixture
def open_saver(saver_url: str | None) -> Iterator[Callable[[int], Any]]:
    opened: list[Any] = []

    def make(ttl_seconds: int) -> Any:
        saver = create_checkpointer(ttl_seconds, url=saver_url)
        opened.append(saver)
        return saver

    yield make
    for saver in opened:
        saver.close()


# -- 1. TTLs ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "ttl", [2**31, 2**63, 10**400, -1, 1.5], ids=["2**31", "2**63", "10**400", "-1", "1.5"]
)
def test_a_ttl_out_of_range_is_refused_when_given(open_saver: Any, ttl: Any) -> None:
    with pytest.raises(ConfigurationError, match="ttl_seconds"):
        open_saver(ttl)


@SLOW
@given(
    ttl=st.one_of(
        st.integers(1, MAX_TTL_SECONDS),
        st.integers(MAX_TTL_SECONDS + 1, 10**400),
        st.sampled_from([MAX_TTL_SECONDS, MAX_TTL_SECONDS + 1]),
    )
)
def test_the_longest_ttl_works_and_a_longer_is_refused_per_thread_too(
    open_saver: Any, ttl: int
) -> None:
    saver = open_saver(60)
    config: dict[str, Any] = {
        "configurable": {"thread_id": f"t{next(counter)}", "checkpoint_ns": "", "ttl_seconds": ttl}
    }
    if ttl > MAX_TTL_SECONDS:
        with pytest.raises(ConfigurationError, match="ttl_seconds"):
            saver.put(config, make_checkpoint({"x": [1]}), {}, {"x": 1})
        del config["configurable"]["ttl_seconds"]
        assert saver.get_tuple(config) is None  # nothing was written
        return
    stored = saver.put(config, make_checkpoint({"x": [1]}), {}, {"x": 1})
    assert saver.get_tuple(stored).checkpoint["channel_values"] == {"x": [1]}


def test_the_longest_ttl_serves_a_whole_thread(open_saver: Any) -> None:
    saver = open_saver(MAX_TTL_SECONDS)
    config = {"configurable": {"thread_id": "long-lived", "checkpoint_ns": ""}}
    stored = saver.put(config, make_checkpoint({"x": [1]}), {}, {"x": 1})
    assert saver.get_tuple(stored) is not None
    assert [t.config["configurable"]["thread_id"] for t in saver.list(config)] == ["long-lived"]


@SLOW
@given(
    minutes=st.one_of(
        st.floats(0.001, MAX_TTL_MINUTES),
        st.floats(MAX_TTL_MINUTES, 1e300).filter(lambda m: m > MAX_TTL_MINUTES),
        st.sampled_from([10**30, math.inf, math.nan, MAX_TTL_MINUTES, 0, -1]),
    )
)
def test_store_ttls_have_one_range_everywhere(make_store: Any, minutes: float) -> None:
    store = make_store()
    ns = ("ttl", f"n{next(counter)}")
    if 0 < minutes <= MAX_TTL_MINUTES:
        store.put(ns, "k", {"v": 1}, ttl=minutes)
        assert store.get(ns, "k").value == {"v": 1}
        return
    with pytest.raises(ConfigurationError, match="ttl"):
        store.put(ns, "k", {"v": 1}, ttl=minutes)
    assert store.get(ns, "k") is None
    with pytest.raises(ConfigurationError, match="default_ttl"):
        make_store(ttl={"default_ttl": minutes})


@pytest.mark.parametrize("omit", [True, False])
def test_omit_expired_is_accepted_and_expired_items_stay_hidden(
    make_store: Any, omit: bool
) -> None:
    clock = FakeClock(time.time())
    store = make_store(ttl={"default_ttl": 1, "omit_expired": omit}, clock=clock)
    store.put(("o",), "k", {"v": 1})
    assert store.get(("o",), "k") is not None
    clock.advance(120)
    assert store.get(("o",), "k") is None
    assert store.search(("o",)) == []
    with pytest.raises(ConfigurationError, match="omit_expired"):
        make_store(ttl={"omit_expired": "yes"})


# -- 3, 4, 5, 6. values, filters, namespaces ------------------------------------------------


def nested(depth: int, as_list: bool) -> dict[str, Any]:
    """A value whose dicts (or lists, below the top dict) nest ``depth`` levels."""
    inner: Any = 1
    for _ in range(depth - 1):
        inner = [inner] if as_list else {"a": inner}
    return {"a": inner}


@SLOW
@given(
    depth=st.one_of(st.integers(1, 2 * MAX_DEPTH), st.sampled_from([MAX_DEPTH, MAX_DEPTH + 1])),
    as_list=st.booleans(),
)
def test_values_deeper_than_the_bound_are_refused_everywhere(
    make_store: Any, depth: int, as_list: bool
) -> None:
    store = make_store()
    ns = ("deep", f"n{next(counter)}")
    store.put(ns, "flat", {"n": 1})
    if depth <= MAX_DEPTH:
        store.put(ns, "deep", nested(depth, as_list))
        assert store.get(ns, "deep").value == nested(depth, as_list)
    else:
        with pytest.raises(InvalidValueError, match="levels deep"):
            store.put(ns, "deep", nested(depth, as_list))
        assert store.get(ns, "deep") is None
    assert [i.key for i in store.search(ns, filter={"n": 1})] == ["flat"]


def test_a_value_far_too_deep_is_refused_without_recursion(make_store: Any) -> None:
    with pytest.raises(InvalidValueError, match="levels deep"):
        make_store().put(("deep",), "k", nested(50_000, as_list=False))


@SLOW
@given(keys=st.integers(1, 1200), differ=st.integers(0, 1199))
def test_filters_of_any_size_give_the_same_results_everywhere(
    make_store: Any, keys: int, differ: int
) -> None:
    store = make_store()
    ns = ("wide", f"n{next(counter)}")
    every = {f"k{i}": i for i in range(keys)}
    store.put(ns, "all", every)
    store.put(ns, "one-off", {**every, f"k{differ % keys}": -1})
    store.put(ns, "other", {"z": 1})
    found = [i.key for i in store.search(ns, filter=every)]
    assert found == ["all"]
    ranges = {k: {"$gte": v} for k, v in every.items()}
    assert sorted(i.key for i in store.search(ns, filter=ranges)) == ["all"]


@pytest.mark.parametrize(
    "flt",
    [
        {"x": {"$lt": math.inf}},
        {"x": {"$gt": -math.inf}},
        {"x": math.nan},
        {"x": {"$ne": math.nan}},
        {"x": {"$in": [1, math.nan]}},
        {"x": math.inf},
    ],
)
def test_non_finite_filter_numbers_are_refused_everywhere(
    make_store: Any, flt: dict[str, Any]
) -> None:
    store = make_store()
    store.put(("nf",), "k", {"x": 5})
    with pytest.raises(InvalidValueError, match="finite"):
        store.search(("nf",), filter=flt)


@pytest.mark.parametrize("namespace", [("a\x00b",), ("ok", "x\x00"), ("a.b",), ("",)])
def test_a_bad_namespace_is_both_errors_everywhere(
    make_store: Any, namespace: tuple[str, ...]
) -> None:
    store = make_store()

    def put() -> None:
        store.put(namespace, "k", {"v": 1})

    def batch() -> None:
        store.batch([PutOp(namespace, "k", {"v": 1})])

    def aput() -> None:
        asyncio.run(store.aput(namespace, "k", {"v": 1}))

    for write in (put, batch, aput):
        with pytest.raises(InvalidNamespaceValueError) as caught:
            write()
        assert isinstance(caught.value, InvalidValueError)
        assert isinstance(caught.value, InvalidNamespaceError)
    assert store.search(("ok",)) == []


# -- 2. memory identifiers ----------------------------------------------------------------


def said(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


@SLOW
@given(
    thread_len=st.sampled_from([1, MAX_THREAD_ID, MAX_THREAD_ID + 1, 300]),
    key_len=st.sampled_from([0, 1, MAX_EPISODE_KEY, MAX_EPISODE_KEY + 1, 1100]),
    user_len=st.sampled_from([20, 900, 1003, 1004, 1100]),
)
def test_record_refuses_what_some_backend_cannot_store_and_consolidates_the_rest(
    make_store: Any, thread_len: int, key_len: int, user_len: int
) -> None:
    memory = AgentMemory(make_store())
    step = f"{next(counter)}-"
    user = (step + "u" * user_len)[:user_len]  # a scope of its own
    thread = "t" * thread_len
    key = (step + "k" * key_len)[:key_len] if key_len else None
    namespace_len = len("memory.user=") + len(user) + len(".episodes")
    fits = thread_len <= MAX_THREAD_ID and key_len <= MAX_EPISODE_KEY and namespace_len <= 1024

    def call() -> str | None:
        return memory.record({"user_id": user}, said("I live in Berlin"), thread_id=thread, key=key)

    if not fits:
        with pytest.raises(InvalidValueError):
            call()
        if namespace_len <= 1024:
            assert memory.episodes({"user_id": user}) == []  # nothing was written
        return
    got = call()
    assert got is not None and (key is None or got == key)
    report = memory.consolidate({"user_id": user})
    assert report.completed == 1 and report.failed == 0


def test_a_scope_that_is_not_unicode_is_refused(make_store: Any) -> None:
    memory = AgentMemory(make_store())
    with pytest.raises(InvalidValueError, match="Unicode"):
        memory.record({"user_id": "a\ud800"}, said("hi"))


def test_budget_and_counts_are_refused_below_one(make_store: Any) -> None:
    store = make_store()
    with pytest.raises(ConfigurationError, match="budget_tokens"):
        AgentMemory(store, budget_tokens=-5)
    with pytest.raises(ConfigurationError, match="budget_tokens"):
        AgentMemory(store, budget_tokens=0)
    with pytest.raises(ConfigurationError, match="max_attempts"):
        AgentMemory(store, max_attempts=0)
    with pytest.raises(ConfigurationError, match="consolidate_every_seconds"):
        AgentMemory(store, consolidate_every_seconds=0)
    with pytest.raises(ConfigurationError, match="budget_tokens"):
        AgentMemory(store).recall("user=alice", "where?", budget_tokens=-1)


# -- 3. what record() takes ------------------------------------------------------------------

UTC = timezone.utc
moments = st.one_of(
    st.floats(),  # NaN and the infinities too
    st.integers(-(10**13), 10**13),
    st.sampled_from(
        [EARLIEST_SECONDS, EARLIEST_SECONDS - 1, LATEST_SECONDS, LATEST_SECONDS + 1, 1e300, -1e300]
    ),
    st.datetimes(timezones=st.sampled_from([UTC, timezone(timedelta(hours=5))])),
    st.datetimes(),  # naive: which moment depends on the machine's zone
)


def _seconds(moment: Any) -> float | None:
    """The seconds since the epoch ``record`` stores for ``moment``, ``None`` if refused."""
    if isinstance(moment, datetime):
        if moment.tzinfo is None:
            return None
        moment = moment.timestamp()
    if not math.isfinite(moment) or not EARLIEST_SECONDS <= moment <= LATEST_SECONDS:
        return None
    return float(moment)


@SLOW
@given(moment=moments)
def test_occurred_at_is_refused_at_the_door_or_recorded_consolidated_and_recalled(
    make_store: Any, moment: Any
) -> None:
    store = make_store()
    try:
        _record_at(AgentMemory(store), moment)
    finally:
        store.close()  # one pool per example at most


def _record_at(memory: AgentMemory[Any], moment: Any) -> None:
    scope = {"user_id": f"when-{next(counter)}"}
    expected = _seconds(moment)
    if expected is None:
        with pytest.raises(InvalidValueError, match="occurred_at"):
            memory.record(scope, said("I live in Berlin"), occurred_at=moment)
        with pytest.raises(InvalidValueError, match="occurred_at"):
            asyncio.run(memory.arecord(scope, said("I live in Berlin"), occurred_at=moment))
        assert memory.episodes(scope) == []  # nothing was written
        moment = expected = 1_700_000_000.0  # the scope's later good episode is not held up
    memory.record(scope, said("I live in Berlin"), occurred_at=moment)
    [episode] = memory.episodes(scope)
    assert episode.occurred_at == expected
    report = memory.consolidate(scope)
    assert (report.completed, report.failed) == (1, 0)
    assert "Berlin" in memory.recall(scope, "where do I live?").text


def test_a_moment_recalled_outside_the_years_1_to_9999_is_refused(make_store: Any) -> None:
    memory = AgentMemory(make_store())
    memory.record("user=alice", said("I live in Berlin"), occurred_at=1_700_000_000)
    for moment in (EARLIEST_SECONDS - 1, LATEST_SECONDS + 1):
        with pytest.raises(ConfigurationError, match="as_of"):
            memory.recall("user=alice", "where do I live?", as_of=moment)
        with pytest.raises(ConfigurationError, match="known_at"):
            memory.facts("user=alice", known_at=moment)


GOOD_MESSAGES: list[Any] = [
    [("user", "I live in Berlin")],
    ["I live in Berlin"],
    [HumanMessage("I live in Berlin")],
    [{"role": "user", "content": "I live in Berlin"}],
    [{"type": "human", "content": [{"type": "text", "text": "I live in Berlin"}]}],
    ({"role": "user", "content": "I live in Berlin"},),
    ChatPromptValue(messages=[HumanMessage("I live in Berlin")]),
]
BAD_MESSAGES: list[Any] = [
    "user=a",
    "I live in Berlin",
    b"I live in Berlin",
    {"role": "user", "content": "I live in Berlin"},
    HumanMessage("I live in Berlin"),
    42,
    None,
    [{"role": "user", "content": 1}],
    [{"role": "user", "content": {"city": "Berlin"}}],
    [{"content": "I live in Berlin"}],
    [{"role": "robot", "content": "I live in Berlin"}],
    [("user", "I live in Berlin"), 7],
    [("user",)],
]


@pytest.mark.parametrize("messages", GOOD_MESSAGES, ids=lambda m: type(m).__name__)
def test_record_takes_what_langchain_reads_as_messages(make_store: Any, messages: Any) -> None:
    memory = AgentMemory(make_store())
    for i, record in enumerate((memory.record, memory.arecord)):
        scope = {"user_id": f"reads-{i}"}
        recorded = record(scope, messages)
        if asyncio.iscoroutine(recorded):
            recorded = asyncio.run(recorded)
        assert recorded is not None
        [episode] = memory.episodes(scope)
        assert episode.messages == said("I live in Berlin")


def test_record_reads_an_iterator_of_messages_once(make_store: Any) -> None:
    memory = AgentMemory(make_store())
    scope = {"user_id": "iterated"}
    memory.record(scope, iter(said("I live in Berlin")))
    assert [e.messages for e in memory.episodes(scope)] == [said("I live in Berlin")]


@pytest.mark.parametrize("messages", BAD_MESSAGES, ids=repr)
def test_record_refuses_what_is_not_a_list_of_messages(make_store: Any, messages: Any) -> None:
    memory = AgentMemory(make_store())
    scope = {"user_id": "refused"}
    with pytest.raises(InvalidValueError, match="messages"):
        memory.record(scope, messages)
    with pytest.raises(InvalidValueError, match="messages"):
        asyncio.run(memory.arecord(scope, messages))
    assert memory.episodes(scope) == []


# -- store arguments of the wrong type ---------------------------------------------------------


def test_a_namespace_that_is_a_bare_string_is_refused_everywhere(make_store: Any) -> None:
    store = make_store()
    calls: list[Callable[[], object]] = [
        lambda: store.put("users", "k", {"a": 1}),
        lambda: asyncio.run(store.aput("users", "k", {"a": 1})),
        lambda: store.batch([PutOp("users", "k", {"a": 1})]),  # type: ignore[arg-type]
        lambda: store.search("users"),
        lambda: store.list_namespaces(prefix="users"),
        lambda: store.put(5, "k", {"a": 1}),
    ]
    for call in calls:
        with pytest.raises(InvalidNamespaceValueError, match="must be a tuple of strings"):
            call()
    with pytest.raises(InvalidNamespaceValueError, match=r"got str 'users': write \('users',\)"):
        store.put("users", "k", {"a": 1})
    store.put(["users"], "k", {"a": 1})
    assert store.list_namespaces() == [("users",)]


@pytest.mark.parametrize("key", [None, 5, b"k"], ids=["None", "int", "bytes"])
def test_a_key_that_is_not_a_string_is_refused_everywhere(make_store: Any, key: Any) -> None:
    store = make_store()
    with pytest.raises(InvalidValueError, match=f"keys must be strings, got {type(key).__name__}"):
        store.put(("n",), key, {"a": 2})
    with pytest.raises(InvalidValueError, match="keys must be strings"):
        asyncio.run(store.aput(("n",), key, {"a": 2}))
    assert store.search(("n",)) == []
    store.put(("n",), str(key), {"a": 3})  # what LangGraph's str(key) would reach
    reads: list[Callable[[], object]] = [
        lambda: store.get(("n",), key),
        lambda: asyncio.run(store.aget(("n",), key)),
        lambda: store.delete(("n",), key),
        lambda: asyncio.run(store.adelete(("n",), key)),
    ]
    for call in reads:
        with pytest.raises(InvalidValueError, match="keys must be strings"):
            call()
    assert store.get(("n",), str(key)) is not None


@pytest.mark.parametrize(
    ("arguments", "words"),
    [
        ({"limit": "3"}, "search limit must be a whole number from 0 to 2147483647, got '3'"),
        ({"limit": None}, "search limit must be a whole number"),
        ({"limit": 1.5}, "search limit must be a whole number"),
        ({"limit": 2**63}, "search limit must be a whole number"),
        ({"limit": -1}, "search limit must be a whole number"),
        ({"offset": 0.5}, "search offset must be a whole number"),
        ({"offset": 2**63}, "search offset must be a whole number"),
        ({"filter": [1]}, "search filter must be a dict"),
        ({"query": 5}, "search query must be a string or None, got int"),
    ],
    ids=str,
)
def test_search_arguments_of_the_wrong_kind_are_refused_everywhere(
    make_store: Any, arguments: dict[str, Any], words: str
) -> None:
    store = make_store()
    store.put(("s",), "k", {"a": 1})
    with pytest.raises(InvalidValueError, match=re.escape(words)):
        store.search(("s",), **arguments)
    with pytest.raises(InvalidValueError, match=re.escape(words)):
        asyncio.run(store.asearch(("s",), **arguments))
    assert [item.key for item in store.search(("s",), limit=2**31 - 1)] == ["k"]


@pytest.mark.parametrize(
    ("arguments", "words"),
    [
        ({"limit": -1}, "list_namespaces limit must be a whole number from 0"),
        ({"offset": -1}, "list_namespaces offset must be a whole number from 0"),
        ({"limit": 2.5}, "list_namespaces limit must be a whole number"),
        ({"max_depth": -1}, "list_namespaces max_depth must be a whole number from 1"),
        ({"max_depth": 0}, "list_namespaces max_depth must be a whole number from 1"),
    ],
    ids=str,
)
def test_list_namespaces_arguments_out_of_range_are_refused_everywhere(
    make_store: Any, arguments: dict[str, Any], words: str
) -> None:
    store = make_store()
    store.put(("a", "b"), "k", {"a": 1})
    with pytest.raises(InvalidValueError, match=words):
        store.list_namespaces(**arguments)
    assert store.list_namespaces(max_depth=None) == [("a", "b")]
    assert store.list_namespaces(max_depth=1) == [("a",)]


def test_the_largest_limit_and_offset_work_with_a_reranker_too(make_store: Any) -> None:
    store = make_store()
    store.put(("r",), "k", {"text": "ramen"})
    most = 2**31 - 1
    assert store.search(("r",), query="ramen", limit=most, offset=most, reranker=len) == []
    hits = store.search(("r",), query="ramen", limit=most, reranker=lambda q, texts: [1.0])
    assert [item.key for item in hits] == ["k"]


def test_the_largest_limit_and_offset_work_with_a_query_and_a_filter(make_store: Any) -> None:
    store = make_store()
    store.put(("r",), "k", {"text": "ramen", "n": 1})
    most = 2**31 - 1
    for query in ("ramen", None):
        for flt in (None, {"n": 1}):
            assert store.search(("r",), query=query, filter=flt, limit=most, offset=most) == []
            found = store.search(("r",), query=query, filter=flt, limit=most)
            assert [item.key for item in found] == ["k"]
