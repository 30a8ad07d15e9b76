"""Shared benchmark payloads: a realistic conversation state, and text whose word
frequencies follow Zipf's law as natural language does."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
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
