"""BM25 over posting blocks: the plans of a query of common words (``store/blocks.py``
tells how it stays exact), and of building a block.

A query's plan reads its terms' blocks and the postings no block holds in one statement,
builds the blocks its common terms call for (then reads again), ranks here, reads its
candidates' keys and true scores, and returns the answer only when it is settled; ``None``
sends the query to the postings, as before blocks.
"""

from __future__ import annotations

import logging
import secrets
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from langgraph_checkpoint_agent_memory.db.database import Batch, Plan, Stmt
from langgraph_checkpoint_agent_memory.db.store import StoreStatements
from langgraph_checkpoint_agent_memory.store import blocks as limits
from langgraph_checkpoint_agent_memory.store.blocks import (
    ENTRY,
    Block,
    BlockCache,
    BlockKey,
    Fresh,
    Source,
    Weights,
    candidates,
    pack,
    settled,
)

logger = logging.getLogger(__name__)

#: The most blocks one query builds (the next queries build the rest).
BUILDS_PER_QUERY = 4
#: The parameters naming the namespace searched (``prefix_params``, and ``now``).
NAMESPACE_PARAMS = ("ns", "ns_dot", "ns_len", "ns_end", "shard", "now")
#: Where a block is: its term, shard key and namespace.
BlockId = tuple[str, str, str]
#: A ranked item: ``((prefix, key), score)``.
Scored = tuple[tuple[str, str], float]


def build_plan(st: StoreStatements, term: str, shard: str, prefix: str) -> Plan[int]:
    """Build (or rebuild) the block of ``term``'s postings in the namespace ``prefix``, in
    one transaction; returns its entries."""
    built = secrets.randbits(62)
    one = {"term": term, "shard": shard, "prefix": prefix}
    empty = {**one, "built": built, "entries": 0, "postings": b"", "keys": b""}
    _, _, rows = yield Batch(
        [
            Stmt(st.blocks_claim(), empty),
            Stmt(st.blocks_mark(), one),
            Stmt(st.blocks_postings(), one, fetch=True),
        ],
        write=True,
        lock=True,
        hold=True,
    )
    block = pack(prefix, [(str(k), int(tf), int(dl)) for k, tf, dl in rows])
    filled = {**one, "built": built, **block._asdict()}
    yield Batch([Stmt(st.blocks_fill(), filled)], write=True)
    return block.entries


def blocked_plan(
    st: StoreStatements,
    cache: BlockCache,
    flat: Sequence[str],
    df: dict[str, int],
    params: dict[str, Any],
    *,
    exact: bool,
    scoped: bool,
) -> Plan[list[Scored] | None]:
    """BM25's best ``:n`` items for the stored terms ``flat`` from blocks (their content
    from ``cache`` when this process read it before), or ``None``: the postings must
    answer. ``df``: each term's document frequency under the namespace; ``params``: the
    lexical statement's (the namespace's, ``:t<j>``, ``:w<j>``, ``:k_base``, ``:k_len``).

    A query that cannot use blocks there (its words' postings spread over namespaces too
    small for them, too many ties, or a database that refuses: a read-only one, a locked
    SQLite file, a schema before blocks) says so and leaves that query's words to the
    postings for a minute, rather than finding it out again each time."""
    if sum(df.get(f, 0) for f in flat) < limits.MIN_POSTINGS:
        return None
    common = tuple(sorted(f for f in flat if df.get(f, 0) >= limits.MIN_DF))
    where = (params["ns"], exact, common)
    # a distributed database reads a query above the shard key one shard at a time, each
    # in a snapshot of its own: blocks only for a query within one shard key there
    if not common or cache.declines(where) or (st.d.distributed and not scoped):
        return None
    try:
        found = yield from _blocked_plan(st, cache, flat, set(common), params, exact, scoped)
    except MoreBuildsDue:
        return None
    except Exception as exc:
        logger.warning("lexical search reads postings, not blocks, for a minute: %r", exc)
        found = None
    if found is None:
        cache.decline(where)
        return None
    return found


class MoreBuildsDue(Exception):
    """A query built as many blocks as one may, and more are due: the postings answer it,
    and the next query builds on."""


def _blocked_plan(
    st: StoreStatements,
    cache: BlockCache,
    flat: Sequence[str],
    common: set[str],
    params: dict[str, Any],
    exact: bool,
    scoped: bool,
    again: bool = True,
) -> Plan[list[Scored] | None]:
    """:func:`blocked_plan`'s work; ``again``: after rebuilding blocks that misled it,
    try once more."""
    want = int(params["n"])
    weights = Weights(
        {t: params[f"w{j}"] for j, t in reversed(list(enumerate(flat)))},
        params["k_base"],
        params["k_len"],
    )
    base = {k: v for k, v in params.items() if k in NAMESPACE_PARAMS}
    read = st.blocks_read(len(flat), exact, scoped)
    terms = {f"t{j}": t for j, t in enumerate(flat)}
    reading = {**base, **terms, "cap": limits.FRESH_CAP + 1}
    heads, fresh = yield from _read_plan(read, reading)
    todo = yield from _todo_plan(st, heads, fresh, common, base, exact, scoped)
    if todo:
        for block in todo[:BUILDS_PER_QUERY]:
            yield from build_plan(st, *block)
        heads, fresh = yield from _read_plan(read, reading)
    if _capped(fresh):
        if len(todo) > BUILDS_PER_QUERY:  # the next queries build the rest
            raise MoreBuildsDue
        return None  # spread over namespaces too small for blocks
    blocks = yield from _blocks_plan(st, cache, list(heads))
    if blocks is None:
        return None
    found = candidates(blocks, fresh, weights, want + want // 4 + 8, cache.items(blocks))
    if found is None:
        return None
    items = [_item(s, blocks, fresh) for s in found.sources]
    scored = yield from _exact_plan(st, items, flat, weights)
    answer = settled(scored, found.bound, want)
    if answer is None:  # entries of items deleted or rewritten since misled: rebuild
        stale = {
            (st.shard(p), p)
            for ((p, _), true), here in zip(scored, found.scores, strict=True)
            if true < here - 1e-9 * abs(here)
        }
        rebuilt = [b for b in blocks if (b.shard, b.prefix) in stale][:BUILDS_PER_QUERY]
        for b in rebuilt:
            yield from build_plan(st, b.term, b.shard, b.prefix)
        if rebuilt and again:
            return (yield from _blocked_plan(st, cache, flat, common, params, exact, scoped, False))
    return answer


def _item(source: Source, blocks: list[Block], fresh: list[Fresh]) -> tuple[str, str, str]:
    """The shard key, namespace and key of the candidate at ``source``."""
    if source.block < 0:
        f = fresh[source.position]
        return f.shard, f.prefix, f.key
    block = blocks[source.block]
    return block.shard, block.prefix, block.key_at(source.position)


def _read_plan(read: Any, params: dict[str, Any]) -> Plan[tuple[dict[BlockKey, int], list[Fresh]]]:
    """The blocks under the namespace (with their entries) and the unpacked postings."""
    [rows] = yield Batch([Stmt(read, params, fetch=True)])
    heads, fresh = {}, []
    for term, shard, prefix, key, tf, dl, built in rows:
        if built is not None:  # a block: ``tf`` is its entries
            heads[(term, shard, prefix, int(built))] = int(tf)
        else:
            fresh.append(Fresh(term, shard, prefix, key, int(tf), int(dl)))
    return heads, fresh


def _blocks_plan(
    st: StoreStatements, cache: BlockCache, heads: list[BlockKey]
) -> Plan[list[Block] | None]:
    """The blocks ``heads`` names, from ``cache`` or read (and cached); ``None`` when one
    was rebuilt since ``heads`` was read."""
    found = {h: cache.get(h) for h in heads}
    missing = [h for h, b in found.items() if b is None]
    for start in range(0, len(missing), 64):
        chunk = missing[start : start + 64]
        n = len(chunk) + (-len(chunk) % 4)
        params: dict[str, Any] = {}
        for j, (term, shard, prefix, _) in enumerate(chunk + chunk[-1:] * (n - len(chunk))):
            params.update({f"bt{j}": term, f"bs{j}": shard, f"bp{j}": prefix})
        [rows] = yield Batch([Stmt(st.blocks_payloads(n), params, fetch=True)])
        for term, shard, prefix, built, entries, postings, keys in rows:
            key = (term, shard, prefix, int(built))
            if key in found and found[key] is None:
                data = np.frombuffer(bytes(postings), dtype=ENTRY, count=int(entries))
                block = Block(term, shard, prefix, int(built), data, bytes(keys))
                cache.put(block)
                found[key] = block
    blocks = [b for b in (found[h] for h in heads) if b is not None]
    return blocks if len(blocks) == len(heads) else None


def _capped(fresh: list[Fresh]) -> bool:
    """Whether the read left postings of a term out (it read one more than the cap)."""
    return max(Counter(f.term for f in fresh).values(), default=0) > limits.FRESH_CAP


def _todo_plan(
    st: StoreStatements,
    heads: dict[BlockKey, int],
    fresh: list[Fresh],
    common: set[str],
    base: dict[str, Any],
    exact: bool,
    scoped: bool,
) -> Plan[list[BlockId]]:
    """The blocks to build, most unpacked postings first: of a common term, where it has as
    many postings no block holds as :func:`~.blocks.build_at` asks for the entries of its
    block (``heads``); counted by the database when there are more than the read returns."""
    entries = {(t, s, p): n for (t, s, p, _), n in heads.items()}
    if _capped(fresh):
        mine = sorted(common)
        counted = {**base, **{f"t{j}": t for j, t in enumerate(mine)}, "at": limits.BUILD_MIN}
        stmt = Stmt(st.blocks_fresh_counts(len(mine), exact, scoped), counted, fetch=True)
        [rows] = yield Batch([stmt])
        counts = {(str(t), str(s), str(p)): int(n) for t, s, p, n in rows}
    else:
        counts = Counter((f.term, f.shard, f.prefix) for f in fresh)
    due = [(-n, b) for b, n in counts.items() if b[0] in common]
    return [b for n, b in sorted(due) if -n >= limits.build_at(entries.get(b, 0))]


def _exact_plan(
    st: StoreStatements,
    items: list[tuple[str, str, str]],
    flat: Sequence[str],
    weights: Weights,
) -> Plan[list[Scored]]:
    """The items' true scores, from their postings of the query's terms (an item without
    one scores 0): one statement per namespace and 256 keys, planned with its keys, never
    prepared: PostgreSQL's generic plan of it, keys in a list or in one array, filters every
    posting of the terms in the namespace by key (20 ms at 10,000 items, not 0.7)."""
    by_ns: dict[tuple[str, str], list[str]] = {}
    for shard, prefix, key in items:
        by_ns.setdefault((shard, prefix), []).append(key)
    terms = {f"t{j}": t for j, t in enumerate(flat)}
    statements = []
    for (shard, prefix), keys in by_ns.items():
        for start in range(0, len(keys), 256):  # within any database's parameter limit
            chunk = keys[start : start + 256]
            params = {**terms, "shard": shard, "prefix": prefix, **st.d.list_params("k", chunk)}
            query = st.blocks_postings_in(len(flat), st.d.list_size(len(chunk)))
            statements.append(Stmt(query, params, fetch=True, prepare=False))
    found = yield Batch(statements)
    scores = {(p, k): 0.0 for _, p, k in items}
    for rows in found:
        for prefix, key, term, tf, dl in rows:
            scores[(prefix, key)] += float(weights.score(term, tf, dl))
    return list(scores.items())
