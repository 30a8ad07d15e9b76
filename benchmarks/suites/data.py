"""Shared benchmark payloads: a realistic conversation state, and text whose word
frequencies follow Zipf's law as natural language does."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6


def messages(n: int = 20) -> list[Any]:
    out: list[Any] = []
    for i in range(n // 2):
        out.append(
            HumanMessage(f"Question {i}: what is the status of purchase order 45000{i}? " * 3)
        )
        out.append(AIMessage(f"Purchase order 45000{i} is approved and ships on day {i}. " * 4))
    return out


class CheckpointFactory:
    """Successive checkpoints of one thread, as a graph step would write them."""

    def __init__(self, n_messages: int = 20) -> None:
        self.messages = messages(n_messages)
        self.version = 0

    def next(self) -> tuple[Any, dict[str, Any], dict[str, Any]]:
        self.version += 1
        checkpoint = empty_checkpoint()
        checkpoint["id"] = str(uuid6(clock_seq=self.version))
        checkpoint["channel_values"] = {"messages": self.messages, "counter": self.version}
        versions = {"messages": self.version, "counter": self.version}
        checkpoint["channel_versions"] = versions
        metadata = {"source": "loop", "step": self.version, "parents": {}}
        return checkpoint, metadata, dict(versions)


#: The most frequent words of English conversation come first, as in real text.
COMMON = [
    "the",
    "to",
    "and",
    "a",
    "of",
    "i",
    "in",
    "you",
    "it",
    "that",
    "is",
    "for",
    "my",
    "was",
    "on",
    "with",
    "me",
    "have",
    "so",
    "but",
    "be",
    "at",
    "this",
    "what",
    "we",
    "just",
    "like",
    "do",
    "are",
    "your",
    "not",
]
_SYLLABLES = [
    "ka",
    "lo",
    "mi",
    "ter",
    "san",
    "po",
    "ri",
    "ven",
    "dal",
    "ku",
    "ne",
    "sor",
    "fi",
    "ba",
    "gel",
    "mon",
    "tra",
    "pe",
]


class ZipfText:
    """Sentences of 8-40 words from a 20,000-word vocabulary with Zipf-distributed
    frequencies (exponent 1.07, the common words first), and queries as people type them:
    two common words and three content words drawn with the same frequencies."""

    def __init__(self, seed: int = 7, vocabulary: int = 20_000) -> None:
        pick = random.Random(seed)
        words: set[str] = set()
        while len(words) < vocabulary:
            words.add("".join(pick.choice(_SYLLABLES) for _ in range(pick.randint(2, 4))))
        self.vocab = COMMON + sorted(words)
        ranks = np.arange(1, len(self.vocab) + 1)
        p = 1 / ranks**1.07
        self.p = p / p.sum()
        content = self.p[len(COMMON) :]
        self.content_p = content / content.sum()
        self.rng = np.random.default_rng(seed)

    def sentence(self) -> str:
        n = int(self.rng.integers(8, 40))
        return " ".join(self.vocab[j] for j in self.rng.choice(len(self.vocab), n, p=self.p))

    def query(self) -> str:
        common = self.rng.choice(COMMON[:10], 2).tolist()
        picks = self.rng.choice(len(self.vocab) - len(COMMON), 3, p=self.content_p)
        return " ".join(common + [self.vocab[len(COMMON) + j] for j in picks])


class ClusteredVectors:
    """Seeded synthetic embeddings shaped like real ones: clusters (topics) around random
    centers, each point spread along a shared low-dimensional subspace (real embeddings
    vary along few directions) plus a little isotropic noise. Nearest-neighbour recall on
    such data behaves like on text embeddings; on uniform random vectors, where every point
    is about equally far from every other, approximate indexes look worse than they are.

    Args:
        dims: Vector length.
        clusters: How many centers.
        rank: Dimensions of the subspace points vary along.
        seed: Everything drawn follows from it.
    """

    def __init__(self, dims: int = 256, clusters: int = 1000, rank: int = 24, seed: int = 7):
        self.dims = dims
        self.rng = np.random.default_rng(seed)
        self.centers = self.rng.normal(size=(clusters, dims)).astype(np.float32)
        self.basis = (self.rng.normal(size=(rank, dims)) / np.sqrt(dims)).astype(np.float32)

    def points(self, n: int) -> Any:
        """``n`` vectors (float32 rows), in chunks so a million stays within memory."""
        out = np.empty((n, self.dims), dtype=np.float32)
        for start in range(0, n, 100_000):
            m = min(100_000, n - start)
            picks = self.rng.integers(0, len(self.centers), m)
            spread = self.rng.normal(size=(m, len(self.basis))).astype(np.float32) * 2.0
            noise = self.rng.normal(size=(m, self.dims)).astype(np.float32) * 0.3
            out[start : start + m] = self.centers[picks] + spread @ self.basis + noise
        return out


#: Ten English stopwords, one per decimal digit: a query text made of them has no search
#: terms, so a search by it runs the vector ranking alone.
DIGIT_WORDS = ("the", "a", "an", "of", "to", "in", "on", "at", "by", "for")


def query_text(j: int) -> str:
    """The text that :class:`TableEmbeddings` embeds as query ``j``: stopwords only."""
    return " ".join(DIGIT_WORDS[int(d)] for d in str(j))


class TableEmbeddings(Embeddings):
    """LangChain ``Embeddings`` over precomputed vectors: the text ``v<i>`` embeds as row
    ``i`` of ``documents``, :func:`query_text` ``(j)`` as row ``j`` of ``queries`` (no model
    in the loop, so a benchmark times the store, not an embedder)."""

    def __init__(self, documents: Any, queries: Any) -> None:
        self.documents = documents
        self.queries = queries

    def embed_documents(self, texts: list[str]) -> list[Any]:  # type: ignore[override]
        return [self.documents[int(t[1:])] for t in texts]

    def embed_query(self, text: str) -> Any:
        return self.queries[int("".join(str(DIGIT_WORDS.index(w)) for w in text.split()))]

    async def aembed_documents(self, texts: list[str]) -> list[Any]:
        return self.embed_documents(texts)

    async def aembed_query(self, text: str) -> Any:
        return self.embed_query(text)
