"""The store's spans (see :mod:`..telemetry.tracing`): one per batch, named after what it
does (``search am_store_items``, ``put``, ``get``, ``delete``, ``list_namespaces``); a batch of
several operations is ``BATCH put``, or ``BATCH`` when it mixes them, as the conventions name
batches."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langgraph.store.base import GetOp, ListNamespacesOp, Op, PutOp, SearchOp

from langgraph_checkpoint_agent_memory.db.database import Database
from langgraph_checkpoint_agent_memory.telemetry.tracing import IDLE, db_operation, live, target_of

KINDS = {SearchOp: "search", GetOp: "get", ListNamespacesOp: "list_namespaces"}


def _kind(op: Op) -> str:
    if isinstance(op, PutOp):
        return "put" if op.value is not None else "delete"
    return KINDS.get(type(op), "batch")


def _namespace(op: Op) -> tuple[str, ...] | None:
    if isinstance(op, SearchOp):
        return op.namespace_prefix
    if isinstance(op, (GetOp, PutOp)):
        return op.namespace
    return None


def batch_span(database: Database[Any], ops: Sequence[Op], *, sealed: bool) -> Any:
    """The span of a batch of ``ops`` on a store in ``database``; the namespace is left out
    when the store is ``sealed`` (encryption on: namespaces may name users), and so is an
    exception's message."""
    if not live():
        return IDLE
    kinds = {_kind(op) for op in ops}
    kind = kinds.pop() if len(kinds) == 1 else ""
    single = len(ops) == 1
    name = kind if single else f"BATCH {kind}".strip()
    spaces = {_namespace(op) for op in ops} - {None}
    namespace = None if sealed or len(spaces) != 1 else ".".join(spaces.pop() or ())
    size = None if single else len(ops)  # the conventions' size of a batch
    return db_operation(
        f"store.{name}",
        target_of(database),
        "am_store_items",
        {"agent_memory.namespace": namespace, "db.operation.batch.size": size},
        sealed=sealed,
    )


def told(op: Any, ops: Sequence[Op], results: Sequence[Any]) -> None:
    """Tell a batch's span how many items its reads returned (``db.response.returned_rows``:
    a ``get`` found or not, a search's or a listing's length)."""
    if not op.recording:
        return
    found = 0
    for request, result in zip(ops, results, strict=False):
        if isinstance(request, PutOp):
            continue
        found += len(result) if isinstance(result, list) else int(result is not None)
    op.set("db.response.returned_rows", found)
