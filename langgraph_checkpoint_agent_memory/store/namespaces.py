"""``list_namespaces`` as a plan."""

from __future__ import annotations

from typing import Any

from langgraph.store.base import ListNamespacesOp

from langgraph_checkpoint_agent_memory.db.database import Batch, Plan, Stmt
from langgraph_checkpoint_agent_memory.db.store import StoreStatements, scoped


def namespaces_plan(
    statements: StoreStatements, op: ListNamespacesOp, now: float
) -> Plan[list[tuple[str, ...]]]:
    literal: list[str] = []
    for condition in op.match_conditions or ():
        if condition.match_type == "prefix":
            for label in condition.path:
                if label == "*":
                    break
                literal.append(label)
            break
    params: dict[str, Any] = {"now": now, **(statements.prefix_params(literal) if literal else {})}
    # one shard when the literal labels cover the shard key; otherwise every shard
    query = statements.namespaces(bool(literal), scoped(params))
    [rows] = yield Batch([Stmt(query, params, fetch=True)])
    found: set[tuple[str, ...]] = set()
    for (prefix,) in rows:
        ns = tuple(prefix.split("."))
        if not all(_matches_condition(ns, c) for c in op.match_conditions or ()):
            continue
        found.add(ns[: op.max_depth] if op.max_depth is not None else ns)
    ordered = sorted(found)
    return ordered[op.offset : op.offset + op.limit]


def _matches_condition(ns: tuple[str, ...], condition: Any) -> bool:
    path = tuple(condition.path)
    if len(ns) < len(path):
        return False
    part = ns[: len(path)] if condition.match_type == "prefix" else ns[len(ns) - len(path) :]
    return all(p == "*" or p == n for p, n in zip(path, part, strict=True))
