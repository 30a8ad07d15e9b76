"""Agent memory end to end: a real compiled graph, new processes, real SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableConfig

from langgraph_checkpoint_agent_memory import AgentMemory, create_checkpointer, create_store
from langgraph_checkpoint_agent_memory.errors import InvalidValueError
from langgraph_checkpoint_agent_memory.memory import (
    CallableExtractor,
    RuleBasedExtractor,
    Scope,
    ScopeError,
)
from tests.helpers import WordEmbeddings, present
from tests.pg import backend_params, libpq_url


@pytest.fixture(params=backend_params("sqlite", "postgres", "pgbouncer", "citus"))
def backend(request: pytest.FixtureRequest) -> str:
    """SQLite, each PostgreSQL server, PgBouncer in transaction mode and the Citus cluster
    (tests/pg.py)."""
    return str(request.param)


ROOT = Path(__file__).resolve().parent.parent


def run_app(url: str, *args: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "tests.memory_app", url, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    report: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return report


def extraction(
    *facts: tuple[str, str, str], summary: str = "talked", each: tuple[str, ...] = ()
) -> str:
    """An extractor's answer: the single-summary form for a one-episode job, or with
    ``each``, one entry per episode (the form a job of several episodes needs)."""
    said: dict[str, Any] = (
        {"episodes": [{"episode": n, "summary": s} for n, s in enumerate(each, 1)]}
        if each
        else {"episode": {"summary": summary, "outcome": "ok", "importance": 0.5}}
    )
    return json.dumps(
        {
            **said,
            "facts": [
                {"attribute": a, "value": v, "statement": s, "importance": 0.5} for a, v, s in facts
            ],
        }
    )


def rows_mentioning(url: str, needle: str) -> dict[str, int]:
    """Rows, in every table of the database, whose text or bytes contain ``needle``."""
    found: dict[str, int] = {}
    if url.startswith("sqlite"):
        import sqlite3

        conn = sqlite3.connect(url.removeprefix("sqlite:///"))
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for t in tables:
            for row in conn.execute(f'SELECT * FROM "{t}"'):
                blob = b" ".join(
                    v if isinstance(v, bytes) else str(v).encode() for v in row if v is not None
                )
                if needle.encode() in blob.lower():
                    found[t] = found.get(t, 0) + 1
        conn.close()
    else:
        import psycopg

        conninfo, kwargs = libpq_url(url)
        with psycopg.connect(conninfo, **kwargs) as pg_conn:
            tables = [
                r[0]
                for r in pg_conn.execute(
                    "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
                ).fetchall()
            ]
            for t in tables:
                row = pg_conn.execute(
                    f'SELECT count(*) FROM "{t}" x WHERE lower(x::text) LIKE %s '
                    f"OR position(%s::bytea in convert_to(lower(x::text), 'UTF8')) > 0",
                    (f"%{needle}%", needle.encode()),
                ).fetchone()
                n = present(row)[0]
                if n:
                    found[t] = n
    return found


def test_two_sessions_in_new_processes_supersede_decay_erase(database_url: str) -> None:
    url = database_url
    first = run_app(url, "chat", "alice", "alice-1", "Hi, I live in Berlin and work at ACME.")
    assert first["context"] == ""  # nothing known yet
    fenced = (
        "```json\n"
        + extraction(
            ("city", "Berlin", "Alice lives in Berlin"),
            ("employer", "ACME", "Alice works at ACME"),
        )
        + "\n```"
    )
    report = run_app(url, "consolidate", fenced)
    assert report["completed"] == 1 and report["added"] == 2

    second = run_app(url, "chat", "alice", "alice-2", "Which office is closest to me?")
    assert "Alice lives in Berlin" in second["context"]
    assert "Alice works at ACME" in second["context"]
    assert "Memory (as of " in second["context"]
    bob = run_app(url, "chat", "bob", "bob-1", "Which office is closest to me?")
    assert "Berlin" not in bob["context"] and "ACME" not in bob["context"]

    run_app(url, "chat", "alice", "alice-3", "I moved to Munich last week.")
    report = run_app(
        url,
        "consolidate",
        extraction(  # alice's two pending turns, each summarised
            ("city", "Munich", "Alice lives in Munich"), each=("asked for an office", "moved")
        ),
        extraction(("likes", "chess", "Bob likes chess")),  # bob's
    )
    assert report["completed"] == 2 and report["superseded"] == 1

    store = create_store(url)
    checkpointer = create_checkpointer(url=url)
    memory = AgentMemory(store, checkpointer=checkpointer)
    alice = {"user_id": "alice"}
    summaries = [e.summary for e in memory.episodes(alice)]
    assert summaries == ["talked", "asked for an office", "moved"]
    city = memory.history(alice, "city")
    assert [f.value for f in city] == ["Berlin", "Munich"]
    assert city[0].valid_to is not None and city[0].superseded_by == "Munich"
    assert city[1].valid_to is None and city[1].valid_from >= city[0].valid_to
    current = {f.attribute: f.value for f in memory.facts(alice)}
    assert current == {"city": "Munich", "employer": "ACME"}
    assert "Munich" in memory.build_context(alice, "where do I live")
    assert "Berlin" not in memory.build_context(alice, "where do I live").split("Known facts:")[1]

    # decay: 200 days later every unpinned memory is under the threshold
    assert memory.pin(alice, "employer") == 1
    later = AgentMemory(store, clock=lambda: time.time() + 200 * 86400)
    removed = later.decay(alice)
    assert removed >= 3
    assert [f.attribute for f in later.facts(alice)] == ["employer"]  # pinned survives
    assert later.episodes(alice) == []

    # erase leaves nothing of alice in any table, checkpoints included
    assert rows_mentioning(url, "alice")
    counts = memory.erase(alice)
    assert counts["scopes"] == 1 and counts["threads"] == 3
    store.close()
    checkpointer.stop_sweeper() if hasattr(checkpointer, "stop_sweeper") else None
    assert rows_mentioning(url, "alice") == {}
    assert rows_mentioning(url, "munich") == {}
    assert rows_mentioning(url, "chess")  # bob's memory is untouched
    if url.startswith("sqlite"):  # and the bytes left the files, not only the tables
        path = Path(url.removeprefix("sqlite:///"))
        for file in (path, Path(f"{path}-wal")):
            if file.exists():
                raw = file.read_bytes().lower()
                assert b"alice" not in raw and b"munich" not in raw, file.name


# -- the extractor's bad output ------------------------------------------------------------

GOOD = extraction(("city", "Berlin", "The user lives in Berlin"))


def _raise(prompt: str) -> str:
    raise RuntimeError("model unavailable")


def _slow(prompt: str) -> str:
    time.sleep(3)
    return GOOD


CASES: dict[str, tuple[Any, str | None]] = {
    "fenced json": (lambda p: f"Sure!\n```json\n{GOOD}\n```\nAnything else?", None),
    "chatter around json": (lambda p: f"Here you go: {GOOD} -- hope it helps", None),
    "truncated json": (lambda p: GOOD[: len(GOOD) // 2], "truncated or malformed"),
    "wrong types": (
        lambda p: GOOD.replace('"importance": 0.5}]', '"importance": "very"}]'),
        "does not fit the schema",
    ),
    "empty output": (lambda p: "  ", "empty output"),
    "no json": (lambda p: "I cannot help with that.", "holds no JSON object"),
    "exception": (_raise, "RuntimeError: model unavailable"),
    "timeout": (_slow, "timed out after 0.3s"),
}


#: The cases the servers run too: the ledger's paths (completed, failed then parked, a
#: timeout); the others differ only in what the extractor parses, which SQLite shows.
SERVER_CASES = ("fenced json", "truncated json", "timeout")


def _bad_output_params() -> list[Any]:
    out = []
    for param in backend_params("sqlite", "postgres", "pgbouncer", "citus"):
        backend = str(param.values[0] if hasattr(param, "values") else param)
        marks = getattr(param, "marks", ())
        for case in CASES if backend == "sqlite" else SERVER_CASES:
            out.append(pytest.param(backend, case, marks=marks, id=f"{backend}-{case}"))
    return out


@pytest.mark.parametrize(("backend", "case"), _bad_output_params())
@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_bad_extractor_output_loses_nothing(database_url: str, case: str, mode: str) -> None:
    fn, error = CASES[case]
    store = create_store(database_url)
    try:
        await _bad_output_case(store, fn, error, mode)
    finally:
        await store.aclose()  # an async pool belongs to this test's event loop


async def _bad_output_case(store: Any, fn: Any, error: str | None, mode: str) -> None:
    memory = AgentMemory(
        store,
        extractor=CallableExtractor(fn, timeout=0.3),
        max_attempts=2,
        backoff_seconds=0.0,
    )
    alice = {"user_id": "alice"}
    memory.record(alice, [HumanMessage("I live in Berlin"), AIMessage("ok")], thread_id="t")
    run = memory.consolidate if mode == "sync" else None

    async def consolidate() -> Any:
        return run() if run is not None else await memory.aconsolidate()

    report = await consolidate()
    if error is None:
        assert report.completed == 1
        assert [f.value for f in memory.facts(alice)] == ["Berlin"]
        assert memory.episodes(alice, status="pending") == []
        return
    assert report.completed == 0 and report.jobs[0].status == "failed"
    assert error in (report.jobs[0].error or "")
    assert memory.facts(alice) == []
    assert len(memory.episodes(alice, status="pending")) == 1
    assert memory.scopes()["user=alice"]["pending"] == 1
    # the second failure in a row parks the episode: kept, visible, not retried forever
    report = await consolidate()
    assert report.jobs[0].status == "parked"
    assert memory.scopes()["user=alice"]["parked"] == 1
    assert (await consolidate()).jobs == []
    failed = memory.jobs()
    assert [j["status"] for j in failed] == ["parked", "failed"]
    assert all(error in j["error"] for j in failed)
    # an operator retries with a working extractor: the same episode, consolidated once
    assert memory.retry(alice) == 1
    memory.extractor = CallableExtractor(lambda p: GOOD)
    report = await consolidate()
    assert report.completed == 1 and report.episodes == 1
    assert [f.value for f in memory.facts(alice)] == ["Berlin"]
    assert memory.scopes()["user=alice"]["parked"] == 0


def test_chat_model_extractor_with_a_fake_model(tmp_path: Path) -> None:
    store = create_store(f"sqlite:///{tmp_path / 'm.db'}")
    model = FakeListChatModel(responses=[f"```json\n{GOOD}\n```"])
    memory = AgentMemory(store, extractor=model)
    memory.record({"user_id": "u"}, [HumanMessage("I live in Berlin")])
    assert memory.consolidate().completed == 1
    assert memory.facts({"user_id": "u"})[0].statement == "The user lives in Berlin"
    assert memory.extractor.version.startswith("chat:FakeListChatModel")


# -- many workers --------------------------------------------------------------------------


def test_four_worker_processes_apply_each_fact_once(database_url: str) -> None:
    store = create_store(database_url)
    memory = AgentMemory(store)
    scopes = [{"user_id": f"u{i}"} for i in range(50)]
    for n in range(1000):
        scope = scopes[n % 50]
        memory.record(
            scope,
            [{"role": "user", "content": f"My code{n} is v{n}."}],
            thread_id=f"t{n % 50}",
            key=f"e{n}",
        )
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.memory_app", database_url, "work"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    totals = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
        totals.append(json.loads(out.strip().splitlines()[-1]))
    assert sum(t.get("episodes", 0) for t in totals) == 1000
    assert sum(t.get("failed", 0) for t in totals) == 0
    for i, scope in enumerate(scopes):
        facts = memory.facts(scope)
        assert sorted(f.value for f in facts) == sorted(f"v{n}" for n in range(i, 1000, 50))
        assert all(f.confirmations == 1 for f in facts)  # no episode was applied twice
    stats = memory.scopes()
    assert sum(s["pending"] for s in stats.values()) == 0
    assert sum(s["episodes"] for s in stats.values()) == 1000
    store.close()


def test_a_worker_killed_mid_job_leaves_its_episodes_pending(database_url: str) -> None:
    store = create_store(database_url)
    memory = AgentMemory(store)
    alice = {"user_id": "alice"}
    memory.record(alice, [{"role": "user", "content": "I live in Berlin"}], key="e1")
    out = subprocess.run(
        [sys.executable, "-m", "tests.memory_app", database_url, "die", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 9  # died inside the extractor, holding the scope's lease
    assert len(memory.episodes(alice, status="pending")) == 1
    assert memory.consolidate().jobs == []  # the lease still holds
    time.sleep(1.2)
    report = memory.consolidate()
    assert report.completed == 1
    assert [f.value for f in memory.facts(alice)] == ["Berlin"]
    store.close()


# -- the graph nodes -----------------------------------------------------------------------


def test_recording_a_turn_twice_stores_it_once(tmp_path: Path) -> None:
    memory = AgentMemory(create_store(f"sqlite:///{tmp_path / 'm.db'}"))
    state = {"messages": [HumanMessage("hello", id="h1"), AIMessage("hi", id="a1")]}
    config: RunnableConfig = {"configurable": {"user_id": "alice", "thread_id": "t"}}
    memory.record_node.invoke(state, config)
    memory.record_node.invoke(state, config)
    assert len(memory.episodes({"user_id": "alice"})) == 1
    # the same words in another turn are another episode (identity is not content)
    state2 = {"messages": [*state["messages"], HumanMessage("hello", id="h2"), AIMessage("hi")]}
    memory.record_node.invoke(state2, config)
    assert len(memory.episodes({"user_id": "alice"})) == 2


async def test_nodes_refuse_a_run_without_scope(tmp_path: Path) -> None:
    memory = AgentMemory(create_store(f"sqlite:///{tmp_path / 'm.db'}"))
    state = {"messages": [HumanMessage("hello")]}
    with pytest.raises(ScopeError, match="user_id"):
        memory.inject_node.invoke(state, {"configurable": {"thread_id": "t"}})
    with pytest.raises(ScopeError):
        await memory.record_node.ainvoke(state, {"configurable": {"thread_id": "t"}})
    # a state key of the same name is the fallback
    await memory.record_node.ainvoke({**state, "user_id": "carol"}, {"configurable": {}})
    assert len(await memory.aepisodes({"user_id": "carol"})) == 1


async def test_integer_scope_ids_read_as_their_text_in_graphs_and_the_api(tmp_path: Path) -> None:
    """A graph run with ``user_id=42`` records ``user=42``; the API reaches it with the same
    integer (it refused one, so the episodes could not be listed or erased)."""
    memory = AgentMemory(create_store(f"sqlite:///{tmp_path / 'm.db'}"))
    turn = {"messages": [HumanMessage("I live in Berlin", id="m1")]}
    memory.record_node.invoke(turn, {"configurable": {"user_id": 42, "thread_id": "t"}})
    assert len(memory.episodes({"user_id": 42})) == 1
    assert memory.episodes({"user_id": 42}) == memory.episodes("user=42")
    assert len(await memory.aepisodes({"user_id": "42"})) == 1
    assert Scope.of({"user_id": 42}) == Scope(user_id="42")
    for bad in (True, 4.5, "", b"42", ["42"]):
        with pytest.raises(ScopeError, match=r"user_id must be a non-empty string \(or an int"):
            memory.episodes({"user_id": bad})
        with pytest.raises(ScopeError, match=r"user_id must be a non-empty string \(or an int"):
            memory.record_node.invoke(turn, {"configurable": {"user_id": bad}})
    memory.erase({"user_id": 42})
    assert memory.episodes("user=42") == []


@pytest.mark.parametrize(
    ("keys", "a", "b", "shared"),
    [
        (("user_id",), {"user_id": "u", "agent_id": "x"}, {"user_id": "u", "agent_id": "y"}, True),
        (("agent_id",), {"user_id": "u", "agent_id": "x"}, {"user_id": "v", "agent_id": "x"}, True),
        (
            ("user_id", "agent_id"),
            {"user_id": "u", "agent_id": "x"},
            {"user_id": "u", "agent_id": "y"},
            False,
        ),
        (
            ("user_id", "agent_id", "workflow_id"),
            {"user_id": "u", "agent_id": "x", "workflow_id": "w1"},
            {"user_id": "u", "agent_id": "x", "workflow_id": "w2"},
            False,
        ),
    ],
)
def test_isolation_modes(
    tmp_path: Path, keys: tuple[str, ...], a: dict[str, str], b: dict[str, str], shared: bool
) -> None:
    memory = AgentMemory(create_store(f"sqlite:///{tmp_path / 'm.db'}"), scope_keys=keys)
    turn = {"messages": [HumanMessage("I live in Berlin", id="m1"), AIMessage("ok", id="m2")]}
    memory.record_node.invoke(turn, {"configurable": {**a, "thread_id": "t1"}})
    memory.consolidate()
    out = memory.inject_node.invoke(
        {"messages": [HumanMessage("where do I live?")]}, {"configurable": {**b, "thread_id": "t2"}}
    )
    seen = out["messages"][0].content if out else ""
    assert ("Berlin" in seen) is shared


def test_inject_writes_a_state_key_when_asked(tmp_path: Path) -> None:
    memory = AgentMemory(create_store(f"sqlite:///{tmp_path / 'm.db'}"), context_key="memory")
    memory.record({"user_id": "u"}, [HumanMessage("I live in Berlin")])
    memory.consolidate()
    out = memory.inject_node.invoke(
        {"messages": [HumanMessage("hi")]}, {"configurable": {"user_id": "u"}}
    )
    assert "Berlin" in out["memory"]


# -- facts: confirm, near-duplicates, decay, budget ----------------------------------------


def test_restating_confirms_and_near_duplicates_merge(tmp_path: Path) -> None:
    answers = iter(
        [
            extraction(("city", "Berlin", "The user lives in Berlin")),
            extraction(("city", "berlin", "The user lives in Berlin")),
            extraction(("home_city", "Berlin", "The user lives in Berlin")),
        ]
    )
    memory = AgentMemory(
        create_store(
            f"sqlite:///{tmp_path / 'm.db'}", index={"dims": 64, "embed": WordEmbeddings()}
        ),
        extractor=CallableExtractor(lambda p: next(answers)),
    )
    u = {"user_id": "u"}
    for i in range(3):
        memory.record(u, [HumanMessage(f"turn {i}")], key=f"e{i}")
        assert memory.consolidate().completed == 1
    [fact] = memory.facts(u)
    assert (fact.attribute, fact.value, fact.confirmations) == ("city", "Berlin", 3)
    assert memory.history(u, "city") == [fact]


def test_confirmation_and_recall_reinforce_against_decay(tmp_path: Path) -> None:
    now = [1_800_000_000.0]
    store = create_store(f"sqlite:///{tmp_path / 'm.db'}")
    answers = iter(
        [
            extraction(
                ("city", "Berlin", "u lives in Berlin"),
                ("pet", "cat", "u has a cat"),
                ("sport", "chess", "u plays chess"),
            ),
            extraction(("city", "Berlin", "u lives in Berlin")),
        ]
    )
    memory = AgentMemory(
        store,
        extractor=CallableExtractor(lambda p: next(answers)),
        clock=lambda: now[0],
        decay_rate=0.9,
        decay_threshold=0.1,
        reinforce_every_seconds=0,
    )
    u = {"user_id": "u"}
    memory.record(u, [HumanMessage("a")], key="e1", occurred_at=now[0])
    memory.consolidate()
    now[0] += 10 * 86400  # 0.5 * 0.9**10 = 0.17: all still above 0.1
    memory.record(u, [HumanMessage("b")], key="e2", occurred_at=now[0])
    memory.consolidate()  # confirms the city: its clock restarts
    recalled = memory.recall(u, "chess", budget_tokens=25, reinforce=True)
    assert [f.attribute for f in recalled.facts] == ["sport"]  # only the relevant one fits
    memory.decay()  # flushes the recall's reinforcement first
    now[0] += 8 * 86400  # unreinforced pet: 0.5 * 0.9**18 = 0.075 < 0.1
    db = sqlite3.connect(tmp_path / "m.db")
    for (prefix,) in db.execute("SELECT DISTINCT prefix FROM am_store_items").fetchall():
        store.db.run(store.ranker.merge_plan(prefix))  # listed: none waits to be listed
    [(before,)] = db.execute("SELECT count(*) FROM am_store_items").fetchall()
    decayed = memory.decay()
    [(after,)] = db.execute("SELECT count(*) FROM am_store_items").fetchall()
    assert decayed == before - after >= 1  # the items it deleted
    assert sorted(f.attribute for f in memory.facts(u)) == ["city", "sport"]


def test_scope_strings_round_trip() -> None:
    s = Scope.of({"user_id": "alice@example.com", "agent": "support"})
    assert s.key == "user=alice%40example%2Ecom,agent=support" or "." not in s.key
    assert Scope.parse(s.key) == s
    assert Scope.parse("user=alice, agent=support") == Scope(user_id="alice", agent_id="support")
    with pytest.raises(ScopeError):
        Scope.parse("alice")
    with pytest.raises(ScopeError):
        Scope.of({})


def test_rule_based_extractor_is_deterministic() -> None:
    from langgraph_checkpoint_agent_memory.memory.extract import ExtractionRequest
    from langgraph_checkpoint_agent_memory.memory.model import Episode

    ep = Episode(
        "e",
        [
            {
                "role": "user",
                "content": "My name is Alice. I moved to Munich and I "
                "work at SAP. I like chess. My favorite color is green.",
            }
        ],
        0.0,
    )
    out = RuleBasedExtractor().extract(ExtractionRequest(Scope(user_id="a"), [ep]))
    facts = {(f.attribute, f.value) for f in out.facts}
    assert facts == {
        ("name", "Alice"),
        ("city", "Munich"),
        ("employer", "SAP"),
        ("likes", "chess"),
        ("favorite_color", "green"),
    }


@pytest.mark.parametrize(
    ("said", "value"),
    [
        ("I moved to Lyon last week", "Lyon"),
        ("I moved to New York two years ago.", "New York"),
        ("I live in Paris now", "Paris"),
        ("I work at SAP since 2019", "SAP"),
        ("I moved to Berlin in 2021 and I like it", "Berlin"),
        ("I moved to Nowhere Springs", "Nowhere Springs"),  # a word that starts like one
    ],
)
def test_a_rule_based_value_ends_before_a_time_phrase(said: str, value: str) -> None:
    from langgraph_checkpoint_agent_memory.memory.extract import ExtractionRequest
    from langgraph_checkpoint_agent_memory.memory.model import Episode

    episode = Episode("e", [{"role": "user", "content": said}], 0.0)
    out = RuleBasedExtractor().extract(ExtractionRequest(Scope(user_id="a"), [episode]))
    assert [f.value for f in out.facts if f.attribute in ("city", "employer")] == [value]


def test_agent_memory_needs_our_store() -> None:
    from langgraph.store.memory import InMemoryStore

    from langgraph_checkpoint_agent_memory import ConfigurationError

    with pytest.raises(ConfigurationError, match="AgentMemoryStore"):
        AgentMemory(InMemoryStore())  # type: ignore[type-var]  # the wrong store, on purpose
    with pytest.raises(TypeError, match="unknown setting"):
        AgentMemory(create_store(), decay_speed=2)


def test_settings_come_from_agent_config() -> None:
    from langgraph_checkpoint_agent_memory import agent_config

    @agent_config("config.memory.decay_rate", "Decay", "per day")
    def rate() -> float:
        return 0.5

    os.environ["CONFIG__MEMORY__DECAY_RATE"] = "0.8"
    try:
        assert AgentMemory(create_store()).settings.decay_rate == 0.8
        assert AgentMemory(create_store(), decay_rate=0.7).settings.decay_rate == 0.7
    finally:
        del os.environ["CONFIG__MEMORY__DECAY_RATE"]


async def test_background_worker_as_thread_and_task(tmp_path: Path) -> None:
    memory = AgentMemory(
        create_store(f"sqlite:///{tmp_path / 'm.db'}"),
        consolidate_every_seconds=0.05,
        decay_every_seconds=0.05,
        sweep_every_seconds=0.05,
    )
    u = {"user_id": "u"}
    memory.record(u, [HumanMessage("I live in Oslo")], key="e1")
    worker = memory.start()
    deadline = time.monotonic() + 30
    while not memory.facts(u) and time.monotonic() < deadline:
        time.sleep(0.05)
    memory.stop()
    assert not worker.running and worker.stats.consolidated == 1
    assert worker.stats.errors == []
    memory.record(u, [HumanMessage("I live in Rome")], key="e2")
    worker = await memory.astart()
    while memory.facts(u)[0].value != "Rome" and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    await memory.astop()
    assert not worker.running and worker.stats.consolidated == 2
    assert [f.value for f in memory.history(u, "city")] == ["Oslo", "Rome"]


async def test_chat_model_with_structured_output_is_used_structured(tmp_path: Path) -> None:
    """A model that supports ``with_structured_output`` answers an ``Extraction`` directly."""
    from langchain_core.runnables import RunnableLambda

    from langgraph_checkpoint_agent_memory.memory import ChatModelExtractor, Extraction

    prompts: list[str] = []

    class Structured(FakeListChatModel):
        def with_structured_output(self, schema: Any, **kwargs: Any) -> Any:
            assert schema is Extraction

            def answer(prompt: str) -> Extraction:
                prompts.append(prompt)
                return Extraction.model_validate(json.loads(GOOD))

            return RunnableLambda(answer)

    extractor = ChatModelExtractor(Structured(responses=["unused"]))
    assert extractor.structured
    memory = AgentMemory(create_store(f"sqlite:///{tmp_path / 'm.db'}"), extractor=extractor)
    memory.record({"user_id": "u"}, [HumanMessage("I live in Berlin")])
    assert (await memory.aconsolidate()).completed == 1
    assert [f.value for f in memory.facts({"user_id": "u"})] == ["Berlin"]
    assert "I live in Berlin" in prompts[0] and "Known facts" in prompts[0]


def test_text_no_database_can_store_is_replaced_not_fatal(database_url: str) -> None:
    """A NUL character or a lone surrogate in a user's turn or in an extractor's answer is
    stored as U+FFFD on every backend: the turn is kept, the graph runs on, and the job that
    met it completes alongside the others."""
    store = create_store(database_url)
    answers = {
        "alice": extraction(("city", "Ber\x00lin", "Alice lives in Ber\x00lin"), summary="a\x00b"),
        "bob": extraction(("city", "Paris", "Bob lives in Paris")),
    }
    memory = AgentMemory(
        store, extractor=CallableExtractor(lambda p: answers["alice" if "Alice" in p else "bob"])
    )
    config: RunnableConfig = {"configurable": {"user_id": "alice", "thread_id": "t"}}
    state = {
        "messages": [HumanMessage("I am Alice \x00 from \ud800 Berlin", id="h1"), AIMessage("ok")]
    }
    memory.record_node.invoke(state, config)
    memory.record({"user_id": "bob"}, [HumanMessage("I am Bob from Paris")], thread_id="u")
    [episode] = memory.episodes({"user_id": "alice"})
    assert "I am Alice \ufffd from \ufffd Berlin" in json.dumps(
        episode.messages, ensure_ascii=False
    )
    report = memory.consolidate()
    assert report.completed == 2 and report.failed == 0
    assert [f.value for f in memory.facts({"user_id": "alice"})] == ["Ber\ufffdlin"]
    assert [f.value for f in memory.facts({"user_id": "bob"})] == ["Paris"]
    store.close()


def test_a_consolidation_round_looks_for_scopes_with_work_once(database_url: str) -> None:
    """``consolidate()`` without a scope looks for scopes with pending episodes once (a
    query of every shard, on Citus), then claims each scope's jobs on its own shard, one
    after another while the scope has work; sync and async alike."""
    from tests.helpers import Recorder

    store = create_store(database_url)
    memory = AgentMemory(store, max_episodes_per_job=2)
    log = Recorder(store, also_async=True)

    def record(round_: int) -> None:
        for u in range(4):
            for t in range(3):  # two jobs for each scope
                memory.record(
                    f"user=u{u}", [("user", f"I like tea {round_}.{t}")], key=f"{round_}.{t}"
                )

    def discoveries() -> int:
        return sum(
            "am_memory_pending" in text
            and "s.scope =" not in text
            and "FROM am_memory_scopes" in text
            for text in log.texts
        )

    record(0)
    report = memory.consolidate()
    assert (report.completed, report.episodes) == (8, 12)
    assert discoveries() == 1
    record(1)
    log.texts.clear()
    report = asyncio.run(memory.aconsolidate())
    assert (report.completed, report.episodes) == (8, 12)
    assert discoveries() == 1
    assert memory.consolidate().jobs == []
    for u in range(4):
        assert memory.episodes(f"user=u{u}", status="pending") == []
    store.close()


async def test_a_misspelled_recall_option_is_refused(tmp_path: Path) -> None:
    """``budget=`` for ``budget_tokens=`` would otherwise give a block of the default size
    without a word."""
    memory = AgentMemory(create_store(f"sqlite:///{tmp_path / 'm.db'}"))
    with pytest.raises(TypeError, match=r"unexpected keyword argument.*budget"):
        memory.build_context({"user_id": "alice"}, "where do I live", budget=10)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"unexpected keyword argument.*budget"):
        await memory.abuild_context({"user_id": "alice"}, "q", budget=10)  # type: ignore[call-arg]
    assert memory.build_context(
        {"user_id": "alice"}, "q", budget_tokens=50
    ) == memory.build_context({"user_id": "alice"}, "q", budget_tokens=50)


async def test_a_misspelled_record_option_is_refused(tmp_path: Path) -> None:
    """``occured_at=`` for ``occurred_at=`` would otherwise date the episode now."""
    memory = AgentMemory(create_store(f"sqlite:///{tmp_path / 'm.db'}"))
    turn = [("user", "I live in Paris")]
    known = r"known: thread_id, key, occurred_at"
    with pytest.raises(TypeError, match=rf"unexpected keyword argument.*occured_at; {known}"):
        memory.record({"user_id": "a"}, turn, occured_at=0)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"unexpected keyword argument.*keyy, thread;"):
        await memory.arecord({"user_id": "a"}, turn, thread="t", keyy="k")  # type: ignore[call-arg]
    assert memory.episodes({"user_id": "a"}) == []  # nothing was written
    assert memory.record({"user_id": "a"}, turn, occurred_at=0, thread_id="t", key="k") == "k"


async def test_episode_status_and_pin_attribute_are_checked(tmp_path: Path) -> None:
    """A status the command line refuses is refused here too (it read as "no episodes"), and
    an empty attribute raises the package's error."""
    memory = AgentMemory(create_store(f"sqlite:///{tmp_path / 'm.db'}"))
    memory.record("user=a", [("user", "I live in Paris")])
    with pytest.raises(InvalidValueError, match=r"status must be one of pending, done, parked"):
        memory.episodes("user=a", status="bogus")
    with pytest.raises(InvalidValueError, match=r"status must be one of.*'Pending'"):
        await memory.aepisodes("user=a", status="Pending")
    assert len(memory.episodes("user=a", status="pending")) == 1
    with pytest.raises(InvalidValueError, match=r"attribute needs letters or digits"):
        memory.pin("user=a", "")
    with pytest.raises(InvalidValueError, match=r"attribute needs letters or digits"):
        await memory.apin("user=a", " - ")
