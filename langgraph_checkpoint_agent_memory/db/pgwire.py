"""One statement straight through psycopg's libpq layer, prepared once per connection.

A checkpoint write or read is one statement, and on the hot path of an async graph the
client's CPU is the bound. ``cursor.execute`` spends about 20 µs per call above the work
itself (a cursor, query conversion, the prepared-statement manager, result objects); this
path converts each statement once, prepares it once it has run ``prepare_threshold`` times
on a connection (as a cursor would), and sends it with psycopg's own adapters and its C
send/fetch generator. Values are dumped and rows loaded by a psycopg
``Transformer``, so they are exactly what ``cursor.execute`` would send and return.

One generator serves both APIs: ``Connection.wait`` drives it in a thread,
``AsyncConnection.wait`` on the event loop (and either cancels a query that an interrupt or
a cancelled task leaves running, as psycopg does for its own statements).

A connection whose ``prepare_threshold`` is ``None`` (PgBouncer in transaction mode) or that
is in pipeline mode is not used here: :func:`usable` says so and the caller uses a cursor.
"""

from __future__ import annotations

import re
import threading
import weakref
from collections import OrderedDict
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from psycopg import errors, pq
from psycopg.adapt import PyFormat, Transformer
from psycopg.generators import execute as _send_and_fetch

from langgraph_checkpoint_agent_memory.db import fork

#: A prepared statement the server no longer has (``DEALLOCATE``/``DISCARD ALL``), or one
#: whose result type a schema change altered: re-prepare under a new name and run it again.
#: Both fail before the statement runs, so running it again cannot apply it twice.
_STALE = frozenset({"26000", "0A000"})
_PLACEHOLDER = re.compile(rb"%(?:\((?P<name>[^)]+)\))?(?P<fmt>[sbt%])")
_FORMATS = {b"s": PyFormat.AUTO, b"b": PyFormat.BINARY, b"t": PyFormat.TEXT}
_CONVERTED_MAX = 4096
#: Statements whose unprepared runs are counted, as a cursor's prepare manager counts them.
_SEEN_MAX = 1024


@dataclass(frozen=True)
class Converted:
    """A statement in PostgreSQL's ``$n`` form, with how to order and format its values."""

    query: bytes
    names: tuple[str, ...] | None  # ``None``: positional values
    formats: tuple[PyFormat, ...]


_converted: dict[str, Converted] = {}
_Key = tuple[bytes, tuple[int, ...]]


def convert(text: str) -> Converted:
    """``%(name)s``/``%s`` placeholders (and ``%%``) to ``$n``, as psycopg reads them."""
    done = _converted.get(text)
    if done is not None:
        return done
    names: list[str] = []
    formats: list[PyFormat] = []
    index: dict[str, int] = {}
    kinds: set[bool] = set()

    def replace(match: re.Match[bytes]) -> bytes:
        fmt = match.group("fmt")
        if fmt == b"%":
            if match.group("name") is not None:
                raise ValueError(f"invalid placeholder {match.group(0)!r} in {text!r}")
            return b"%"
        name = match.group("name")
        kinds.add(name is not None)
        if name is None:
            formats.append(_FORMATS[fmt])
            return b"$%d" % len(formats)
        key = name.decode()
        if key not in index:
            names.append(key)
            formats.append(_FORMATS[fmt])
            index[key] = len(names)
        elif formats[index[key] - 1] is not _FORMATS[fmt]:
            raise ValueError(f"placeholder {key!r} has two formats in {text!r}")
        return b"$%d" % index[key]

    query = _PLACEHOLDER.sub(replace, text.encode())
    if len(kinds) > 1:
        raise ValueError(f"named and positional placeholders are mixed in {text!r}")
    done = Converted(query, tuple(names) if True in kinds else None, tuple(formats))
    if len(_converted) >= _CONVERTED_MAX:
        _converted.clear()  # statements are built from a bounded set; this is only a guard
    _converted[text] = done
    return done


class _State:
    """What this module keeps per connection: its adapters, how often each statement ran
    unprepared, and the statements prepared (oldest first, for eviction)."""

    __slots__ = ("counter", "prepared", "seen", "tx")

    def __init__(self, conn: Any) -> None:
        self.tx = Transformer(conn)
        self.seen: OrderedDict[_Key, int] = OrderedDict()
        self.prepared: OrderedDict[_Key, bytes] = OrderedDict()
        self.counter = 0

    def new_name(self) -> bytes:
        self.counter += 1
        return b"am_%d" % self.counter


_states: weakref.WeakKeyDictionary[Any, _State] = weakref.WeakKeyDictionary()
_states_lock = threading.Lock()


@fork.after_fork
def _fresh_states_lock() -> None:
    global _states_lock
    _states_lock = threading.Lock()


def _state(conn: Any) -> _State:
    state = _states.get(conn)
    if state is None:
        with _states_lock:
            state = _states.get(conn)
            if state is None:
                state = _states[conn] = _State(conn)
    return state


def usable(conn: Any) -> bool:
    """Whether statements on ``conn`` may be prepared here."""
    return (
        conn.prepare_threshold is not None and conn.pgconn.pipeline_status == pq.PipelineStatus.OFF
    )


def _values(converted: Converted, params: Any) -> Sequence[Any]:
    if converted.names is None:
        if isinstance(params, Mapping):
            raise TypeError("a statement with positional placeholders takes a sequence")
        values = list(params or ())
    else:
        if not isinstance(params, Mapping):
            raise TypeError("a statement with named placeholders takes a mapping")
        values = [params[name] for name in converted.names]
    if len(values) != len(converted.formats):
        raise TypeError(
            f"the statement takes {len(converted.formats)} parameters, {len(values)} were given"
        )
    return values


def _check(result: Any, state: _State) -> None:
    if result.status == pq.ExecStatus.FATAL_ERROR:
        raise errors.error_from_result(result, encoding=state.tx.encoding)


def run(conn: Any, text: str, params: Any, fetch: bool) -> Generator[Any, Any, Any]:
    """The statement's rows (``fetch``) or its row count, as a psycopg wait generator.

    Like a cursor, a statement runs unprepared until it has run ``conn.prepare_threshold``
    times (a one-off statement costs one round trip, not two), and at most
    ``conn.prepared_max`` statements stay prepared: the least recently used is deallocated.
    """
    converted = convert(text)
    state = _state(conn)
    tx = state.tx
    dumped = tx.dump_sequence(_values(converted, params), list(converted.formats))
    key = (converted.query, tuple(tx.types or ()))
    formats = tx.formats
    pgconn = conn.pgconn
    for attempt in (0, 1):
        name = state.prepared.get(key)
        if name is not None:
            state.prepared.move_to_end(key)
        elif state.seen.get(key, 0) < conn.prepare_threshold:
            state.seen[key] = state.seen.pop(key, 0) + 1
            while len(state.seen) > _SEEN_MAX:
                state.seen.popitem(last=False)
            pgconn.send_query_params(
                converted.query, dumped, param_formats=formats, param_types=key[1]
            )
        else:
            yield from _evict(conn, state)
            name = state.new_name()
            pgconn.send_prepare(name, converted.query, param_types=key[1])
            for result in (yield from _send_and_fetch(pgconn)):
                _check(result, state)
            state.seen.pop(key, None)
            state.prepared[key] = name
        if name is not None:
            pgconn.send_query_prepared(name, dumped, param_formats=formats)
        results = yield from _send_and_fetch(pgconn)
        result = results[-1]
        if result.status == pq.ExecStatus.FATAL_ERROR:
            sqlstate = result.error_field(pq.DiagnosticField.SQLSTATE)
            if name is not None and attempt == 0 and sqlstate and sqlstate.decode() in _STALE:
                if sqlstate == b"26000":  # DEALLOCATE/DISCARD ALL took every one of them
                    state.prepared.clear()
                else:
                    del state.prepared[key]  # the next attempt prepares it anew
                continue
            _check(result, state)
        if fetch:
            tx.set_pgresult(result)
            return tx.load_rows(0, result.ntuples, tuple)
        count = result.command_tuples
        return -1 if count is None else count
    raise AssertionError("unreachable")  # pragma: no cover


def _evict(conn: Any, state: _State) -> Generator[Any, Any, None]:
    """Make room for one more prepared statement."""
    limit = conn.prepared_max
    while limit is not None and state.prepared and len(state.prepared) >= limit:
        _, old = state.prepared.popitem(last=False)
        conn.pgconn.send_query(b"DEALLOCATE " + old)
        yield from _send_and_fetch(conn.pgconn)  # gone already (DISCARD ALL) is fine too


def _check_open(conn: Any) -> None:
    if conn.pgconn.status != pq.ConnStatus.OK:
        raise errors.OperationalError("the connection is closed")


def execute(conn: Any, text: str, params: Any, fetch: bool) -> Any:
    with conn.lock:
        _check_open(conn)
        return conn.wait(run(conn, text, params, fetch))


async def aexecute(conn: Any, text: str, params: Any, fetch: bool) -> Any:
    async with conn.lock:
        _check_open(conn)
        return await conn.wait(run(conn, text, params, fetch))
