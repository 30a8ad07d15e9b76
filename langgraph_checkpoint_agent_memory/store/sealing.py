"""Encryption at rest for the store: what is sealed, under which key, and how plans find keys
(``docs/internals/encryption-design.md`` says what is sealed and what it reveals).

Every item is sealed under the data key of its shard key, the row's identity as associated
data: its value, each vector, and each term of the lexical index as its keyed hash.

Plans find keys without I/O of their own: the keyring's cache first; then, when the key store
is the store's own database, the keyring's plans inside the store's plan; else the plan stops
with :class:`KeysNeeded`, and the store's call fetches the keys and runs it again (reads only:
every plan writes last). Keys found during one call are kept for it (a context variable).

Equality filters on the fields marked *filterable* are narrowed in the database: per item, a
*mark* per field, ``HMAC("field")``, and for a JSON scalar value ``HMAC("field" + value)``. An
``$eq`` or ``$in`` reads the items holding a hash asked for or lacking the mark (never fewer
than the filter keeps); every condition is still decided on the decrypted values.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

from langgraph_checkpoint_agent_memory.crypto.cipher import (
    DataKey,
    aad,
    is_sealed_text,
    key_id_of,
    plaintext_refused,
    store_owner,
    text_bytes,
)
from langgraph_checkpoint_agent_memory.crypto.config import checked_fields
from langgraph_checkpoint_agent_memory.crypto.keyring import Keyring, KeysNeeded
from langgraph_checkpoint_agent_memory.db.database import Batch, Plan, Stmt
from langgraph_checkpoint_agent_memory.db.store import (
    HASHED_EQUALITY,
    MAX_PREFILTER,
    SEALED_VALUE,
    FieldVectorRow,
    PlainItem,
    Prefilter,
    StoreStatements,
)
from langgraph_checkpoint_agent_memory.db.term_index import (
    encode_terms,
    halves,
    high_parts,
    listed_form,
    term_id,
    unlisted_terms,
)
from langgraph_checkpoint_agent_memory.errors import KeyMissingError
from langgraph_checkpoint_agent_memory.store.index import merged_plan
from langgraph_checkpoint_agent_memory.store.search import MISSING, lookup, text_leaves
from langgraph_checkpoint_agent_memory.store.values import encode_value
from langgraph_checkpoint_agent_memory.text import date_words, tokens

T = TypeVar("T")

#: Associated-data kinds of the store's sealed rows.
ITEM, VECTOR = "store_item", "store_vector"
#: How many times in a row one call runs its plan again for keys it loaded already (no
#: progress) before giving up; rounds that load new keys are not counted.
MAX_ROUNDS = 3
#: Keyed term hashes a sealer remembers.
TERM_CACHE = 100_000


class _Call:
    """Keys found during one call of the store."""

    def __init__(self) -> None:
        self.owners: dict[str, DataKey | None] = {}
        self.ids: dict[str, DataKey] = {}
        #: keys the key store lacks: raised inside the plan that asks again, as locally
        self.missing: dict[str, KeyMissingError] = {}


_CALL: ContextVar[_Call | None] = ContextVar("agent_memory_store_keys", default=None)


@contextmanager
def _calling() -> Iterator[_Call]:
    """The keys found during the current call (a new call unless one is under way)."""
    call = _CALL.get()
    if call is not None:
        yield call
        return
    token = _CALL.set(call := _Call())
    try:
        yield call
    finally:
        _CALL.reset(token)


def _stalled(call: _Call, need: KeysNeeded, stalls: int) -> int:
    """The rounds in a row without progress, ``need`` counted; raised past :data:`MAX_ROUNDS`."""
    known = all(o in call.owners for o in need.owners) and all(
        i in call.ids or i in call.missing for i in need.ids
    )
    stalls = stalls + 1 if known else 0
    if stalls > MAX_ROUNDS:
        raise need
    return stalls


class Sealer:
    """Seals and opens one store's rows, with the data keys of one keyring.

    Args:
        keyring: The keyring (its key store, provider, ``allow_plaintext``).
        local: Whether the key store is the store's own database (keys are then read
            inside the store's plans, with no second transaction).
        shard: The store's shard-key rule (namespace as kept -> shard key).

    Example:
        ```python
        from langgraph_checkpoint_agent_memory import create_store, generate_master_key

        with create_store("sqlite:///memory.db", encryption=generate_master_key()) as store:
            store.put(("users", "alice"), "prefs", {"food": "ramen"})
            assert store.keyring is not None
        ```
    """

    def __init__(
        self,
        keyring: Keyring,
        *,
        local: bool,
        shard: Callable[[str], str],
        filterable: Iterable[str] = (),
    ) -> None:
        self.keyring = keyring
        self.local = local
        self.shard = shard
        #: Fields whose values are kept as keyed hashes for equality filters.
        self.filterable = checked_fields(filterable)
        self._paths = [(name, name.split(".")) for name in self.filterable]
        #: (key id, term) -> keyed hash: an HMAC per posting is most of what sealing adds to
        #: a put, and words repeat. Emptied when full.
        self._terms: dict[tuple[str, str], str] = {}

    def call(
        self, run: Callable[[Plan[T]], T], make: Callable[[], Plan[T]], owners: Iterable[str] = ()
    ) -> T:
        """Run ``make``'s plan, again after loading the keys it asks for (``owners``' first)."""
        with _calling() as call:
            call.owners.update({owner: self.keyring.key(owner) for owner in owners})
            stalls = 0
            while True:
                try:
                    return run(make())
                except KeysNeeded as need:
                    stalls = _stalled(call, need, stalls)
                    find = self.keyring.key if need.create else self.keyring.find
                    for owner in need.owners:
                        call.owners[owner] = find(owner)
                    for key_id in need.ids:
                        try:
                            call.ids[key_id] = self.keyring.by_id(key_id)
                        except KeyMissingError as missing:
                            call.missing[key_id] = missing

    async def acall(
        self, run: Callable[[Plan[T]], Any], make: Callable[[], Plan[T]], owners: Iterable[str] = ()
    ) -> T:
        """Async :meth:`call` (``run`` is awaited)."""
        with _calling() as call:
            for owner in owners:
                call.owners[owner] = await self.keyring.akey(owner)
            stalls = 0
            while True:
                try:
                    result: T = await run(make())
                    return result
                except KeysNeeded as need:
                    stalls = _stalled(call, need, stalls)
                    afind = self.keyring.akey if need.create else self.keyring.afind
                    for owner in need.owners:
                        call.owners[owner] = await afind(owner)
                    for key_id in need.ids:
                        try:
                            call.ids[key_id] = await self.keyring.aby_id(key_id)
                        except KeyMissingError as missing:
                            call.missing[key_id] = missing

    def owner_key_plan(self, shard: str, *, create: bool) -> Plan[DataKey | None]:
        """The data key of ``shard`` (created when ``create``, else ``None`` for none)."""
        owner = store_owner(shard)
        if (found := self.keyring.cached(owner)) is not None:
            return found
        call = _CALL.get()
        if call is not None and owner in call.owners and (call.owners[owner] or not create):
            return call.owners[owner]
        if not self.local:
            raise KeysNeeded(owners=[owner], create=create)
        key = yield from self.keyring.key_plan(owner, create=create)
        if call is not None:
            call.owners[owner] = key
        return key

    def preload_plan(self, shards: Iterable[str]) -> Plan[None]:
        """Find or create the data keys of ``shards`` (from another key store, in one round)."""
        missing = []
        for shard in shards:
            try:
                yield from self.owner_key_plan(shard, create=True)
            except KeysNeeded:
                missing.append(store_owner(shard))
        if missing:
            raise KeysNeeded(owners=missing, create=True)

    def ids_plan(self, sealed: Iterable[bytes | None]) -> Plan[None]:
        """Load the keys the ``sealed`` values name (``KeyMissingError`` for one missing)."""
        call = _CALL.get()
        named = {key_id_of(s) for s in sealed if s is not None}
        for key_id in sorted(named):
            if call is not None and key_id in call.missing:
                raise call.missing[key_id]
        missing = {
            key_id
            for key_id in named
            if (call is None or key_id not in call.ids) and self.keyring.cached_id(key_id) is None
        }
        if missing and not self.local:
            raise KeysNeeded(ids=sorted(missing))
        for key_id in sorted(missing):
            key = yield from self.keyring.by_id_plan(key_id)
            if call is not None:
                call.ids[key_id] = key

    def text_ids_plan(self, texts: Iterable[str | None]) -> Plan[None]:
        """:meth:`ids_plan` of text columns (plaintext ones name no key)."""
        yield from self.ids_plan(text_bytes(t) for t in texts if t and is_sealed_text(t))

    def _by_id(self, key_id: str) -> DataKey:
        call = _CALL.get()
        if call is not None and key_id in call.ids:
            return call.ids[key_id]
        if call is not None and key_id in call.missing:
            raise call.missing[key_id]
        if (found := self.keyring.cached_id(key_id)) is None:
            raise KeysNeeded(ids=[key_id])
        if call is not None:  # the rest of this call finds it without the keyring's lock
            call.ids[key_id] = found
        return found

    def seal_value(self, key: DataKey, prefix: str, item_key: str, text: str) -> bytes:
        """An item's JSON text sealed for its row."""
        return key.seal(text.encode("utf-8"), aad(ITEM, self.shard(prefix), prefix, item_key))

    def open_value(self, prefix: str, item_key: str, value: Any, sealed: bytes | None) -> Any:
        """An item row's value as a dict; a plaintext row only with ``allow_plaintext``."""
        if sealed is None:
            if not self.keyring.allow_plaintext:
                raise plaintext_refused(f"store item {prefix!r} / {item_key!r}")
            return value if isinstance(value, dict) else json.loads(value)
        key = self._by_id(key_id_of(sealed))
        return json.loads(key.open(sealed, aad(ITEM, self.shard(prefix), prefix, item_key)))

    def seal_vector(
        self, key: DataKey, prefix: str, item_key: str, field: str, vector: bytes
    ) -> bytes:
        """One embedded field's float32 vector sealed for its row."""
        return key.seal(vector, aad(VECTOR, self.shard(prefix), prefix, item_key, field))

    def open_vector(
        self, prefix: str, item_key: str, field: str, vector: bytes, plain: bool
    ) -> bytes:
        """A vector row's float32 bytes (``plain`` only with ``allow_plaintext``)."""
        if plain:
            if not self.keyring.allow_plaintext:
                raise plaintext_refused(f"the vector of store item {prefix!r} / {item_key!r}")
            return bytes(vector)
        data = bytes(vector)
        key = self._by_id(key_id_of(data))
        return key.open(data, aad(VECTOR, self.shard(prefix), prefix, item_key, field))

    def seal_text(self, key: DataKey, text: str, *identity: str) -> str:
        """``text`` sealed for a text column, ``identity`` (kind and key) its associated data."""
        return key.seal_text(text.encode("utf-8"), aad(*identity))

    def open_text(self, text: str, *identity: str) -> str:
        """A text column's value opened; a plaintext one only with ``allow_plaintext``."""
        if not is_sealed_text(text):
            if not self.keyring.allow_plaintext:
                raise plaintext_refused(f"{identity[0]} of {identity[1:]!r}")
            return text
        return self._by_id(key_id_of(text_bytes(text))).open_text(text, aad(*identity)).decode()

    def forget(self) -> None:
        """Drop what this sealer remembers of terms (after keys were destroyed)."""
        self._terms.clear()

    def term_of(self, key: DataKey) -> Callable[[str], str]:
        """``key``'s keyed hash of a term, remembered."""
        cache = self._terms

        def term(word: str) -> str:
            if (found := cache.get((key.key_id, word))) is None:
                if len(cache) >= TERM_CACHE:
                    cache.clear()
                found = cache[(key.key_id, word)] = key.term(word)
            return found

        return term

    def filter_terms(self, key: DataKey, text: str) -> list[str]:
        """What an item of JSON ``text`` keeps for the filterable fields (see the module): each
        field's mark, and its value's hash when a scalar (from the JSON a reader decodes)."""
        if not self._paths:
            return []
        term, value = self.term_of(key), json.loads(text)
        out: list[str] = []
        for name, path in self._paths:
            out.append(term(_MARK + name))
            form = scalar_form(found) if (found := lookup(value, path)) is not MISSING else None
            if form is not None:
                out.append(term(_MARK + name + _VALUE + form))
        return out

    def _usable(
        self, conds: Sequence[tuple[list[str], str, Any]]
    ) -> Iterator[tuple[int, str, list[str]]]:
        """``(index, field, value forms)`` of each ``$eq``/``$in`` of scalars on a field."""
        for i, (path, op, expected) in enumerate(conds):
            name = ".".join(path)
            if op not in ("$eq", "$in") or name not in self.filterable:
                continue
            values = [expected] if op == "$eq" else list(expected)
            forms = {scalar_form(v) for v in values}
            if forms and None not in forms:
                yield i, name, sorted(f for f in forms if f is not None)

    def prefilter_plan(
        self,
        statements: StoreStatements,
        conds: list[tuple[list[str], str, Any]],
        base: dict[str, Any],
    ) -> Plan[tuple[Prefilter, dict[str, Any]]]:
        """The pre-filter (and its parameters) of ``conds``' ``$eq`` and ``$in`` conditions on
        filterable fields, as keyed hashes under each shard key searched."""
        if not (usable := list(self._usable(conds))[:MAX_PREFILTER]):
            return (), {}
        shards = yield from self.shards_plan(statements, base)
        if len(shards) > MAX_SHARDS:
            return (), {}
        keys = yield from self.keys_plan(statements, shards)
        if not keys:  # nothing under the prefix was sealed
            return (), {}
        hashes = [self.term_of(k) for k in keys]
        parts: list[tuple[str, Any]] = []
        params: dict[str, Any] = {}
        for i, name, forms in usable:
            if len(hashes) * (len(forms) + 1) > MAX_HASHES:
                continue  # decided on decrypted values only
            prefix = f"h{i}"
            found = _padded([h(_MARK + name + _VALUE + f) for h in hashes for f in forms])
            marks = _padded([h(_MARK + name) for h in hashes])
            params.update({f"{prefix}_v{j}": t for j, t in enumerate(found)})
            params.update({f"{prefix}_m{j}": t for j, t in enumerate(marks)})
            parts.append((prefix, (HASHED_EQUALITY, len(found), len(marks))))
        return tuple(parts), params

    def shards_plan(self, statements: StoreStatements, base: dict[str, Any]) -> Plan[list[str]]:
        """The shard keys a search under ``base`` hashes terms for: its own, or its items'."""
        if "shard" in base:
            return [base["shard"]]
        [rows] = yield Batch([Stmt(statements.shards_under(), base, fetch=True)])
        return [str(r[0]) for r in rows]

    def keys_plan(self, statements: StoreStatements, shards: Iterable[str]) -> Plan[list[DataKey]]:
        """The data keys of ``shards`` that have one; a shard with sealed items and no key
        (destroyed) raises :class:`KeyMissingError`, as reading one of its items does."""
        keys, needed, keyless = list[DataKey](), list[str](), list[str]()
        for shard in sorted(set(shards)):
            try:
                key = yield from self.owner_key_plan(shard, create=False)
            except KeysNeeded as need:
                needed.extend(need.owners)
                continue
            if key is None:
                keyless.append(shard)
            else:
                keys.append(key)
        if needed:
            raise KeysNeeded(owners=needed)
        for shard in keyless:
            [rows] = yield Batch([Stmt(statements.sealed_in_shard(), {"shard": shard}, fetch=True)])
            if rows:
                self.keyring.forget([store_owner(shard)])
                yield from self.ids_plan(bytes(r[0]) for r in rows)
        return keys

    def term_forms_plan(
        self, statements: StoreStatements, terms: list[str], shards: Iterable[str]
    ) -> Plan[list[list[str]]]:
        """Per query term, its keyed hash under each of ``shards``' keys (and itself, if plain)."""
        keys = yield from self.keys_plan(statements, shards)
        plain = self.keyring.allow_plaintext
        hashes = [self.term_of(k) for k in keys]
        return [[h(t) for h in hashes] + ([t] if plain else []) for t in terms]


def _keyed_terms(
    value: Any, text: str, terms: bytes | None, listed: bool, keyed: Callable[[str], str]
) -> dict[str, int] | None:
    """An unsealed item's terms under keyed hashes: each plain term id given back its word
    from the words of the item's value (its strings, numbers, keys and the dates of its
    numbers), which its indexed text was made of; ``None``: nothing indexed."""
    if terms is None:
        return None
    decoded = json.loads(text) if isinstance(value, str) else value
    leaves = [*text_leaves(decoded), *_keys_of(decoded)]
    leaves += [date_words(float(x)) for x in leaves if _epoch(x)]
    words = Counter(tokens("\n".join(leaves)))
    if listed:  # the frequencies left with the lists: counted again in the value's words
        word_of = {halves(term_id(w))[0]: w for w in words}
        his = high_parts(bytes(terms)).tolist()
        pairs = [(hi, words[word_of.get(hi, "")] or 1) for hi in his]
    else:
        ids, tfs = unlisted_terms(bytes(terms))
        word_of = {term_id(w): w for w in words}
        pairs = list(zip(ids.tolist(), tfs.tolist(), strict=True))
    out: dict[str, int] = {}
    for plain, tf in pairs:
        if (word := word_of.get(plain)) is not None:
            stored = keyed(word)
            out[stored] = out.get(stored, 0) + tf
    return out


def _keys_of(value: Any) -> list[str]:
    """Every key of a JSON value's objects."""
    out: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, Mapping):
            out += [str(k) for k in item]
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return out


def _epoch(leaf: str) -> bool:
    """Whether a leaf reads as seconds since the epoch (1973 to 2286): a date indexed."""
    try:
        return 1e8 <= float(leaf) < 1e10
    except ValueError:
        return False


def _padded(hashes: list[str]) -> list[str]:
    """``hashes``, the last repeated up to a power of two, so few statement sizes compile."""
    size = 1 << (len(hashes) - 1).bit_length()
    return hashes + hashes[-1:] * (size - len(hashes))


def encrypt_plaintext_plan(
    st: StoreStatements,
    sealer: Sealer,
    counts: dict[str, int],
    on_progress: Callable[[int, int | None], None] | None = None,
    batch_size: int = 200,
) -> Plan[dict[str, int]]:
    """Seal every plaintext item, its vectors, and re-hash its terms, each item in a transaction
    claimed by sealing its row first (runs may overlap and resume); ``counts`` is added to.
    The namespaces sealed are merged at the end, so their lists keep no word's plain hash."""
    after = {"a_shard": "", "a_prefix": "", "a_key": ""}
    touched: set[tuple[str, str]] = set()
    while True:
        [rows] = yield Batch([Stmt(st.plaintext_items(), {**after, "n": batch_size}, fetch=True)])
        yield from sealer.preload_plan(sorted({PlainItem._make(r).shard for r in rows}))
        for item in map(PlainItem._make, rows):
            key = yield from sealer.owner_key_plan(item.shard, create=True)
            assert key is not None
            text = item.value if isinstance(item.value, str) else encode_value(item.value)
            ident = {"shard": item.shard, "prefix": item.prefix, "key": item.key}
            at = (item.prefix, item.key)
            sealed = sealer.seal_value(key, *at, text)
            claim = [
                Stmt(st.seal_item(), {**ident, "sealed": sealed, "value": SEALED_VALUE}),
                Stmt(st.item_index(), ident, fetch=True),
                Stmt(st.item_vectors(), ident, fetch=True),
            ]
            claimed, indexed, vectors = yield Batch(claim, write=True, lock=True, hold=True)
            if not claimed:
                yield Batch([], write=True)
                continue
            terms, listed = indexed[0] if indexed else (None, None)
            counted = _keyed_terms(item.value, text, terms, listed == 1, sealer.term_of(key))
            tags = [{**ident, "tag": t} for t in sealer.filter_terms(key, text)]
            vector_rows = [
                {**ident, "field": f, "vector": sealer.seal_vector(key, *at, f, bytes(v))}
                for f, v in map(FieldVectorRow._make, vectors)
            ]
            # the words' plain hashes leave the lists at the next merge; until then, retracted
            writes = [Stmt(st.retract(), ident)]
            if counted is not None:
                blob = encode_terms(counted)
                writes.append(Stmt(st.reindex_item(), {**ident, "terms": listed_form(blob)}))
                writes.append(Stmt(st.upsert_unlisted(), {**ident, "terms": blob}))
            if tags:
                writes.append(Stmt(st.insert_tags(), tags, many=True))
            if vector_rows:
                writes.append(Stmt(st.seal_vector(), vector_rows, many=True))
            yield Batch(writes, write=True)
            touched.add((item.shard, item.prefix))
            counts["items"] += 1
            counts["vectors"] += len(vector_rows)
            counts["terms"] += len(counted or ())
            if on_progress is not None:
                on_progress(counts["items"], None)
        if len(rows) < batch_size:
            yield from merged_plan(st, sorted(touched))
            return counts
        last = PlainItem._make(rows[-1])
        after = {"a_shard": last.shard, "a_prefix": last.prefix, "a_key": last.key}


#: The domains of the texts hashed: a field's mark, and its value. The mark names the
#: format of :func:`scalar_form`, so items hashed by another format count as not marked.
_MARK = "\x00field1\x00"
_VALUE = "\x00value\x00"
#: Past these shard keys searched, or hashes (shard keys times values) of one condition,
#: the filter is decided on decrypted values only (too many parameters to bind).
MAX_SHARDS = 64
MAX_HASHES = 512


def scalar_form(value: Any) -> str | None:
    """The text a JSON scalar is hashed as, alike for values filters find equal (``1`` and
    ``1.0``, never ``True`` and ``1``; subclasses as their bases); ``None`` for lists,
    objects, NaN and integers too long to print.

    Example:
        >>> scalar_form(1) == scalar_form(1.0), scalar_form(True) == scalar_form(1)
        (True, False)
    """
    if value is None:
        return "z"
    if isinstance(value, bool):
        return "b1" if value else "b0"
    if isinstance(value, int):
        return _integer(value)
    if isinstance(value, float):
        if math.isnan(value):
            return None
        if math.isfinite(value) and value.is_integer():
            return _integer(int(value))
        return "n" + float.__repr__(value)
    if isinstance(value, str):
        return "s" + str.__str__(value)
    return None


def _integer(value: int) -> str | None:
    try:
        return "n" + int.__repr__(value)
    except ValueError:  # longer than Python prints; no stored JSON number equals it
        return None
