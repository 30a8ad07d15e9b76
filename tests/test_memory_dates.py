"""A fact's date (the day it became true) and an episode's (the day it happened) are in
their lexical text, as words a question says, and not in the text their vectors are
embedded from; the memory migration 5 indexes facts and episodes stored before with their
dates, on every backend and on an encrypted store, leaving their vectors as they were."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from langgraph_checkpoint_agent_memory import (
    AgentMemory,
    AgentMemoryStore,
    Encryption,
    EncryptionError,
    generate_master_key,
)
from langgraph_checkpoint_agent_memory.db.row_migrations import _memory_doc
from langgraph_checkpoint_agent_memory.memory import (
    CallableExtractor,
    Episode,
    Fact,
    MemoryTools,
    lexical_text,
    model,
)
from tests import test_encryption_memory
from tests.pg import backend_params
from tests.test_memory_fact_search import ConceptEmbeddings, _forget_migration
from tests.test_migrations import ledger, query

U = {"user_id": "alice"}
NOV_20 = 1668945600.0  # 2022-11-20 12:00 UTC
MAY_7 = 1683460800.0  # 2023-05-07 12:00 UTC
DATE_WORDS = ("2022", "2023", "November", "May", "7th", "20th")
ANSWERS = [
    '{"episode": {"summary": "Alice talked about her work"}, "facts": ['
    '{"attribute": "employer", "value": "ACME", "statement": "Alice works at ACME"}, '
    '{"attribute": "home_city", "value": "Berlin", "statement": "Alice lives in Berlin"}]}',
    '{"episode": {"summary": "Alice got a cat"}, "facts": ['
    '{"attribute": "pet", "value": "cat", "statement": "Alice has a cat"}, '
    '{"attribute": "home_city", "value": "Lyon", "statement": "Alice lives in Lyon"}]}',
]


class RecordingEmbeddings(ConceptEmbeddings):
    """:class:`ConceptEmbeddings` that keeps every document text it embeds."""

    def __init__(self) -> None:
        super().__init__(64)
        self.documents: list[str] = []

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.documents += texts
        return super().embed_documents(texts)


def learn(memory: AgentMemory[Any]) -> None:
    """Work and Berlin said on 2022-11-20; a cat and Lyon on 2023-05-07 (Berlin is history)."""
    answers = iter(ANSWERS)
    memory.extractor = CallableExtractor(lambda prompt: next(answers))
    for key, when, said in (("e1", NOV_20, "I work at ACME"), ("e2", MAY_7, "I got a cat")):
        memory.record(U, [{"role": "user", "content": said}], key=key, occurred_at=when)
        assert memory.consolidate().completed == 1


def keys(store: AgentMemoryStore, namespace: tuple[str, ...], question: str) -> set[str]:
    return {re.split("[#@]", i.key)[0] for i in store.search(namespace, query=question)}


def assert_found_by_date(store: AgentMemoryStore, memory: AgentMemory[Any]) -> None:
    """Questions naming a month, a day or a year find what became true or happened then."""
    facts, history = memory.namespace(U, "facts"), memory.namespace(U, "history")
    episodes = memory.namespace(U, "episodes")
    assert keys(store, facts, "what changed in May 2023?") == {"pet", "home_city"}
    assert keys(store, facts, "November 2022") == {"employer"}
    assert keys(store, history, "where in 2022") == {"home_city"}  # Berlin, true from then
    assert keys(store, episodes, "what happened on 7 May") == {"e2"}
    assert keys(store, episodes, "May 7th") == {"e2"}
    assert keys(store, episodes, "2022-11-20") == {"e1"}


def test_a_question_naming_the_date_finds_facts_and_episodes_lexically(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    store = make_store()  # lexical only: no embedder
    memory = AgentMemory(store)
    learn(memory)
    assert_found_by_date(store, memory)
    [berlin] = memory.history(U, "home_city")[:1]
    assert (berlin.value, berlin.valid_from) == ("Berlin", NOV_20)


def test_vectors_are_embedded_from_the_text_without_its_date(
    make_store: Callable[..., AgentMemoryStore],
) -> None:
    embed = RecordingEmbeddings()
    store = make_store(index={"dims": 64, "embed": embed})
    memory = AgentMemory(store, clock=lambda: MAY_7)
    learn(memory)
    tools = MemoryTools(memory)
    tools.remember("hobby", "chess", "Alice plays chess", config={"configurable": U})
    facts = memory.facts(U)
    episodes = memory.episodes(U)
    expected = {f.search_text() for f in facts} | {e.text() for e in episodes}
    assert expected <= set(embed.documents)
    assert not [t for t in embed.documents if any(w in t for w in DATE_WORDS)]
    # the lexical text has the date the vector's lacks
    assert all(lexical_text(f).startswith(f.search_text() + "\n") for f in facts)
    assert keys(store, memory.namespace(U, "facts"), "May 2023") >= {"pet", "hobby"}


def test_the_migration_builds_the_text_memory_writes() -> None:
    fact = Fact("pet#1", "pet", "cat", "Alice has a cat", multi=True, valid_from=MAY_7)
    episode = Episode(
        "e2", [{"role": "user", "content": "I got a cat"}], MAY_7, summary="Alice got a cat"
    )
    assert _memory_doc("memory.user=alice.facts", fact.to_value()) == lexical_text(fact)
    assert _memory_doc("memory.user=alice.history", fact.to_value()) == lexical_text(fact)
    assert _memory_doc("memory.user=alice.episodes", episode.to_value()) == lexical_text(episode)
    assert lexical_text(episode) == "Alice got a cat\nuser: I got a cat\nMay 7 7th 2023-05-07"
    assert _memory_doc("memory.user=alice.episodes", fact.to_value()) is None  # not its kind
    assert _memory_doc("notes.facts", {"kind": "note"}) is None
    undated = Fact("city", "city", "Lyon", "")
    assert lexical_text(undated) == undated.search_text() == "city: Lyon"


# -- the migration -------------------------------------------------------------------------

stores = test_encryption_memory.stores  # the fixture: stores opened by a test, closed after


@pytest.fixture(params=backend_params("sqlite", "postgres", "citus"))
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def learn_the_old_way(store: AgentMemoryStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """What versions before memory 5 wrote: the lexical text without the date."""
    with monkeypatch.context() as old_code:
        old_code.setattr(model, "dated_text", lambda text, when: text)
        learn(AgentMemory(store))


VECTORS = "SELECT prefix, key, field, vector FROM am_store_vectors ORDER BY 1, 2, 3"
DOCS = "SELECT prefix, key, doc, doc_len, updated_at FROM am_store_items ORDER BY 1, 2"


def test_the_migration_indexes_stored_facts_and_episodes_with_their_dates(
    database_url: str,
    stores: Callable[..., AgentMemoryStore],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On SQLite, PostgreSQL and Citus: facts, past facts and episodes written without
    their dates are found by them once memory 5 runs; their vectors and the items that are
    not memory's stay as they were, and a second setup changes nothing."""
    index = {"dims": 64, "embed": ConceptEmbeddings()}
    store = stores(database_url, index=index)
    learn_the_old_way(store, monkeypatch)
    store.put(("notes", "episodes"), "n1", {"text": "a note of May 2023"})
    store.close()
    lexical = stores(database_url)
    facts = AgentMemory(lexical).namespace(U, "facts")
    assert lexical.search(facts, query="May 2023") == []  # as stored
    lexical.close()
    vectors = query(database_url, VECTORS)
    note = "SELECT doc, doc_len FROM am_store_items WHERE prefix = 'notes.episodes'"
    written = query(database_url, note)
    _forget_migration(database_url, 3005)

    lexical = stores(database_url)
    memory = AgentMemory(lexical)
    memory.setup()
    assert 3005 in ledger(database_url)
    assert_found_by_date(lexical, memory)
    assert query(database_url, VECTORS) == vectors
    assert query(database_url, note) == written
    before = query(database_url, DOCS)
    memory.setup()
    assert query(database_url, DOCS) == before


@pytest.mark.parametrize("keystore", ["same database", "its own database"])
def test_the_migration_indexes_sealed_facts_and_episodes_with_their_keys(
    tmp_path: Path,
    stores: Callable[..., AgentMemoryStore],
    monkeypatch: pytest.MonkeyPatch,
    keystore: str,
) -> None:
    """An encrypted store: memory 5 marks the sealed items, and the setup of a store with
    the keys indexes them (term hashes under their shard key's data key); a setup without
    the keys is refused (the database is encrypted), and migrates nothing."""
    master = generate_master_key()
    setting: Any = master
    if keystore != "same database":
        setting = Encryption(master_keys=[master], keystore_url=f"sqlite:///{tmp_path / 'k.db'}")
    url = f"sqlite:///{tmp_path / 'sealed.db'}"
    store = stores(url, encryption=setting, index={"dims": 64, "embed": ConceptEmbeddings()})
    learn_the_old_way(store, monkeypatch)
    store.close()
    vectors = query(url, VECTORS)
    _forget_migration(url, 3005)

    with pytest.raises(EncryptionError):  # no keys: refused, nothing migrated
        AgentMemory(stores(url, encryption=False)).setup()
    assert 3005 not in ledger(url)
    pending = "SELECT COUNT(*) FROM am_store_items WHERE sealed IS NOT NULL AND doc_len IS NULL"
    sealed = stores(url, encryption=setting)
    memory = AgentMemory(sealed)
    memory.setup()
    assert query(url, pending) == [(0,)]
    assert query(url, "SELECT COUNT(*) FROM am_store_items WHERE doc IS NOT NULL") == [(0,)]
    assert_found_by_date(sealed, memory)
    assert query(url, VECTORS) == vectors
    with sqlite3.connect(tmp_path / "sealed.db") as conn:
        terms = {t for (t,) in conn.execute("SELECT term FROM am_store_terms")}
    assert not terms & {"may", "2023", "cat"}  # keyed hashes only


def test_the_sealed_pass_passes_over_what_an_erase_made_unreadable(
    tmp_path: Path, stores: Callable[..., AgentMemoryStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A backup of the data restored after an erase (the key store, backed up apart, has no
    key for what was erased): the setup still succeeds; the erased rows stay unreadable and
    are not asked for again, and another user's rows are indexed with their dates."""
    import shutil

    from langgraph_checkpoint_agent_memory import KeyMissingError

    master = generate_master_key()
    setting = Encryption(master_keys=[master], keystore_url=f"sqlite:///{tmp_path / 'k.db'}")
    url = f"sqlite:///{tmp_path / 'sealed.db'}"
    store = stores(url, encryption=setting)
    learn_the_old_way(store, monkeypatch)
    bob = {"user_id": "bob"}
    with monkeypatch.context() as old_code:
        old_code.setattr(model, "dated_text", lambda text, when: text)
        AgentMemory(store).record(bob, [{"role": "user", "content": "hi"}], occurred_at=MAY_7)
    store.close()
    shutil.copy(tmp_path / "sealed.db", tmp_path / "backup.db")
    eraser = stores(url, encryption=setting)
    AgentMemory(eraser).erase(U)  # alice's key destroyed
    eraser.close()
    shutil.copy(tmp_path / "backup.db", tmp_path / "sealed.db")  # last night's backup
    _forget_migration(url, 3005)

    with pytest.raises(EncryptionError):  # no keys: refused, nothing migrated
        AgentMemory(stores(url, encryption=False)).setup()
    pending = "SELECT COUNT(*) FROM am_store_items WHERE sealed IS NOT NULL AND doc_len IS NULL"
    restored = stores(url, encryption=setting)
    memory = AgentMemory(restored)
    memory.setup()
    assert query(url, pending) == [(0,)]
    assert keys(restored, memory.namespace(bob, "episodes"), "May 2023") != set()
    with pytest.raises(KeyMissingError):
        memory.facts(U)
    memory.setup()  # nothing left to ask for


class OfflineSealer:
    """What :func:`index_sealed_dates` asks of a sealer, with no keys: values open as they
    are, terms are hashed by a prefix (enough to see the statements it sends)."""

    def ids_plan(self, sealed: Any) -> Iterator[Any]:
        list(sealed)
        yield from ()

    def key_id(self, sealed: bytes) -> str:
        return "key"

    def owner_key_plan(self, shard: str, *, create: bool) -> Generator[Any, Any, str]:
        yield from ()
        return "key"

    def open_value(self, prefix: str, item_key: str, value: Any, sealed: Any) -> Any:
        return value

    def term_of(self, key: Any) -> Callable[[str], str]:
        return lambda term: f"h:{term}"

    def filter_terms(self, key: Any, text: str) -> list[str]:
        return []


@pytest.mark.parametrize("dialect", ["postgresql", "hana"])
def test_the_migration_statements_offline(dialect: str) -> None:
    """Memory 5's statements compiled for PostgreSQL (checked by its own parser) and SAP
    HANA (sqlalchemy-hana's compiler, checked against HANA's rules), with no server."""
    from langgraph_checkpoint_agent_memory.db.database import Batch, drive
    from langgraph_checkpoint_agent_memory.db.hana import HanaDialect
    from langgraph_checkpoint_agent_memory.db.postgres import PostgresDialect
    from langgraph_checkpoint_agent_memory.db.row_migrations import (
        index_dates,
        index_sealed_dates,
    )
    from tests.test_dialect_sql import HANA_FORBIDDEN

    d = HanaDialect() if dialect == "hana" else PostgresDialect()
    fact = Fact("pet", "pet", "cat", "Alice has a cat", valid_from=MAY_7).to_value()
    prefix = "memory.user=alice.facts"
    seen: list[str] = []
    answered: set[str] = set()

    def execute(batch: Batch) -> list[Any]:
        out: list[Any] = []
        for stmt in batch.statements:
            seen.append(stmt.sql.text)
            if not stmt.fetch:
                out.append(1)
            elif stmt.sql.text in answered:  # each select answers once, then nothing
                out.append([])
            else:
                answered.add(stmt.sql.text)
                upper = stmt.sql.text.upper()
                if "SEALED IS NOT NULL" in upper and "DOC_LEN IS NULL" in upper:
                    out.append([("memory.user=alice", prefix, "pet", fact, b"sealed", 4)])
                elif ".VALUE" in upper:
                    out.append([("memory.user=alice", prefix, "pet", fact, "pet: cat")])
                else:
                    out.append([("memory.user=alice", prefix, "pet")])
        return out

    assert drive(index_dates(d, 2), execute) == 1
    sealer: Any = OfflineSealer()
    assert drive(index_sealed_dates(d, 2, sealer), execute) == 1
    assert any("doc_len" in t and t.upper().startswith("UPDATE") for t in seen)
    if dialect == "hana":
        for text in seen:
            for bad in HANA_FORBIDDEN:
                assert bad not in text.upper(), f"{bad!r} in {text}"
    else:
        pglast = pytest.importorskip("pglast")
        for text in seen:
            pglast.parse_sql(re.sub(r"%\((\w+)\)[sb]", r"$1", text))
