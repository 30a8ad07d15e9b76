"""``schema=``: the package's tables in a PostgreSQL schema of their own, named in every
statement (no ``search_path``), so several apps or tenants share one database, through a
transaction pooler too."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.graph import START, MessagesState, StateGraph

from langgraph_checkpoint_agent_memory import (
    AgentMemory,
    ConfigurationError,
    create_checkpointer,
    create_store,
)
from tests.helpers import sql_checkpointer
from tests.pg import backend_params, libpq_url, pg_database


@pytest.fixture(params=backend_params("postgres", "pgbouncer", "citus"))
def url(request: pytest.FixtureRequest) -> str:
    return pg_database(request, str(request.param))


def _graph(saver: Any) -> Any:
    builder = StateGraph(MessagesState)
    builder.add_node("agent", lambda s: {"messages": [("ai", f"reply {len(s['messages'])}")]})
    builder.add_edge(START, "agent")
    return builder.compile(checkpointer=saver)


def _tables(url: str) -> dict[str, set[str]]:
    conninfo, kwargs = libpq_url(url)
    with psycopg.connect(conninfo, **kwargs) as conn:
        rows = conn.execute(
            "SELECT table_schema, table_name FROM information_schema.tables "
            "WHERE table_name LIKE 'am\\_%'"
        ).fetchall()
    found: dict[str, set[str]] = {}
    for schema, table in rows:
        found.setdefault(schema, set()).add(table)
    return found


def _with(url: str, **params: str) -> str:
    extra = "&".join(f"{k}={v}" for k, v in params.items())
    return f"{url}{'&' if '?' in url else '?'}{extra}"


def test_two_apps_share_a_database_each_in_its_schema(url: str) -> None:
    config: RunnableConfig = {"configurable": {"thread_id": "t"}}
    for app in ("app_one", "app_two"):
        with sql_checkpointer(url, schema=app) as saver:
            graph = _graph(saver)
            for _ in range(2 if app == "app_one" else 1):
                graph.invoke({"messages": [("user", f"hi from {app}")]}, config)
        store = create_store(_with(url, schema=app))  # the URL form
        memory = AgentMemory(store)
        store.put(("users", "alice"), "prefs", {"text": f"{app} likes ramen"})
        memory.record("user=alice", [{"role": "user", "content": f"I use {app}"}])
        store.close()
    tables = _tables(url)
    assert set(tables) == {"app_one", "app_two"}  # nothing in public
    assert tables["app_one"] == tables["app_two"]
    assert {"am_checkpoints", "am_store_items", "am_memory_pending"} <= tables["app_one"]
    with sql_checkpointer(url, schema="app_one") as one:
        assert len(_graph(one).get_state(config).values["messages"]) == 4
    with sql_checkpointer(url, schema="app_two") as two:
        assert len(_graph(two).get_state(config).values["messages"]) == 2
    for app in ("app_one", "app_two"):
        store = create_store(url, schema=app)
        found = store.search(("users", "alice"), query="ramen")
        assert [i.value["text"] for i in found] == [f"{app} likes ramen"]
        episodes = AgentMemory(store).episodes("user=alice")
        assert [e.text() for e in episodes] == [f"user: I use {app}"]
        store.close()


@pytest.mark.parametrize(
    "bad", ["", "1app", "app-one", 'app"; DROP TABLE x; --', "a" * 64, "public.app"]
)
def test_a_schema_that_is_not_a_plain_identifier_is_refused(url: str, bad: str) -> None:
    with pytest.raises(ConfigurationError, match="schema must be"):
        create_checkpointer(url=url, schema=bad)


def test_a_url_and_an_argument_that_disagree_are_refused(url: str) -> None:
    with pytest.raises(ConfigurationError, match="give one of them"):
        create_store(_with(url, schema="app_one"), schema="app_two")


def test_the_vector_index_is_found_in_the_schema(pg_server: Any) -> None:
    """pgvector's HNSW index lives in the tables' schema; setup and a store without setup
    both find it there."""
    from tests.helpers import WordEmbeddings

    if not (pg_server.binaries and pg_server.binaries.pgvector):
        pytest.skip("pgvector is not installed on this server")
    url = pg_server.fresh_database()
    index = {"dims": 64, "embed": WordEmbeddings(64)}
    store = create_store(url, schema="app_one", index=index)
    store.put(("docs", "alice"), "k", {"text": "ramen"})
    assert store.ranker.vector_index is not None
    store.close()
    plain = create_store(url, schema="app_one", index=index, auto_setup=False)
    assert plain.search(("docs", "alice"), query="ramen")
    assert plain.ranker.vector_index is not None
    plain.close()
    with psycopg.connect(url) as conn:
        found = conn.execute(
            "SELECT count(*) FROM pg_indexes WHERE schemaname = 'app_one' "
            "AND indexname LIKE 'am_store_vectors_vector_%'"
        ).fetchone()
    assert found == (1,)
    pg_server.drop(url)
