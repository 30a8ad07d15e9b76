"""Equality filters on an encrypted store, decided in the database.

With encryption on, item values are sealed, so a filter is decided on values decrypted in
the store: a search with a filter that few items pass decrypts every item it reads until
the page is full. Fields the user marks *filterable* (``Encryption(filterable_fields=...)``)
also keep, per item, in the lexical index's table and under the shard key's data key:

* a *mark* per field, ``HMAC("field")``: this item was indexed for the field;
* when the field's value is a JSON scalar (a string, a number, a boolean, null), its keyed
  hash, ``HMAC("field" + value)``; numbers in one form, so ``1`` and ``1.0`` hash alike.

An ``$eq`` or ``$in`` condition on a filterable field then reads, in SQL, the items that
hold one of the hashes of the values asked for, or that lack the field's mark (written
before the field was marked, or by a path that does not index it): never fewer than the
filter keeps. The store still decides every condition exactly on the decrypted values.

What this reveals to someone holding the database: within one shard key, which items share
a value of a filterable field (not the value), and how many distinct values there are.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from langgraph_checkpoint_agent_memory.crypto.config import checked_fields
from langgraph_checkpoint_agent_memory.store.search import MISSING, lookup

#: The domains of the texts hashed: a field's mark, and its value. The mark names the
#: format of :func:`scalar_form`, so items hashed by another format count as not marked.
_MARK = "\x00field1\x00"
_VALUE = "\x00value\x00"
#: A search over more shard keys than this decides its filter on decrypted values only:
#: its hashes would be one per shard key and value.
MAX_SHARDS = 64
#: A condition needing more hashes than this (shard keys times values) is decided on
#: decrypted values only: its statement would bind too many parameters.
MAX_HASHES = 512


def scalar_form(value: Any) -> str | None:
    """The text a JSON scalar is hashed as, alike for values the store's filters find equal
    (``1`` and ``1.0``; never ``True`` and ``1``); ``None`` for lists, objects, NaN and
    integers too long to print. Subclasses of ``int``, ``float`` and ``str`` (a numpy
    float) hash as their base values, as they compare.

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


class Filterable:
    """The filterable fields of one store.

    Args:
        fields: Dotted paths into item values.
    """

    def __init__(self, fields: Iterable[str]) -> None:
        self.fields = checked_fields(fields)
        self._paths = [(name, name.split(".")) for name in self.fields]

    def item_terms(self, term: Callable[[str], str], text: str) -> list[str]:
        """What an item whose value is the JSON ``text`` stores for the fields, hashed by
        ``term`` (its shard key's keyed hash): each field's mark, and its value's hash when
        the value is a scalar. Read from the JSON a reader decodes, so both see one value."""
        if not self._paths:
            return []
        value = json.loads(text)
        out: list[str] = []
        for name, path in self._paths:
            out.append(term(_MARK + name))
            form = scalar_form(found) if (found := lookup(value, path)) is not MISSING else None
            if form is not None:
                out.append(term(_MARK + name + _VALUE + form))
        return out

    def usable(
        self, conds: Sequence[tuple[list[str], str, Any]]
    ) -> Iterator[tuple[int, str, list[str]]]:
        """The conditions hashes can narrow: ``(index, field, value forms)`` of each ``$eq``
        or ``$in`` on a filterable field whose values are all scalars."""
        for i, (path, op, expected) in enumerate(conds):
            name = ".".join(path)
            if op not in ("$eq", "$in") or name not in self.fields:
                continue
            values = [expected] if op == "$eq" else list(expected)
            forms = {scalar_form(v) for v in values}
            if forms and None not in forms:
                yield i, name, sorted(f for f in forms if f is not None)

    @staticmethod
    def mark(name: str) -> str:
        """The text hashed as field ``name``'s mark."""
        return _MARK + name

    @staticmethod
    def value(name: str, form: str) -> str:
        """The text hashed for field ``name`` holding the value of ``form``."""
        return _MARK + name + _VALUE + form
