"""The default offline embedder, and how an ``index`` setting becomes an embedder.

Nothing here downloads anything. The default is WordLlama (256 dimensions), whose PyPI wheel
carries its weights: about 2,400 texts per second on one CPU core, no torch. It is an optional
extra (``pip install 'langgraph-checkpoint-agent-memory[embed]'``): without it, search is
lexical, which on long conversations retrieves better than small dense models anyway. Any
LangChain ``Embeddings`` (OpenAI, SAP AI Core, HuggingFace) can be passed instead.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from langchain_core.embeddings import Embeddings

from langgraph_checkpoint_agent_memory.errors import ConfigurationError

DEFAULT_DIMS = 256


class WordLlamaEmbeddings(Embeddings):
    """WordLlama static embeddings, loaded from the installed wheel only (never a hub)."""

    def __init__(self, dims: int = DEFAULT_DIMS) -> None:
        try:
            import wordllama
        except ImportError as exc:
            raise ConfigurationError(
                "the default embedder needs wordllama: "
                "pip install 'langgraph-checkpoint-agent-memory[embed]', or pass any LangChain "
                "Embeddings as index={'dims': ..., 'embed': ...}"
            ) from exc
        self.dims = dims
        self._model: Any = None
        self._lock = threading.Lock()
        self._folder = Path(wordllama.__file__).parent

    def _load(self) -> Any:
        if self._model is None:
            with self._lock:
                if self._model is None:
                    from wordllama import WordLlama

                    # the wheel ships its weights beside the module; refuse any download
                    self._model = WordLlama.load(
                        dim=self.dims, cache_dir=self._folder, disable_download=True
                    )
        return self._model

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        return [row.tolist() for row in self._load().embed(list(texts))]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


def default_index(fields: list[str] | None = None) -> dict[str, Any]:
    """An ``IndexConfig`` using the default offline embedder."""
    config: dict[str, Any] = {"dims": DEFAULT_DIMS, "embed": WordLlamaEmbeddings(DEFAULT_DIMS)}
    if fields is not None:
        config["fields"] = fields
    return config


def resolve_index(index: Any) -> Any:
    """``index="default"`` (or ``{"embed": "default", ...}``) means the offline embedder."""
    if index == "default":
        return default_index()
    if isinstance(index, dict) and index.get("embed") == "default":
        return {
            **default_index(index.get("fields")),
            **{k: v for k, v in index.items() if k not in ("embed", "dims")},
        }
    return index
