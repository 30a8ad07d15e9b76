"""The saver's share of a graph step: invokes per second against a floor that stores nothing.

A graph of one node over ``MessagesState`` runs with our savers, LangGraph's and a floor
saver; then a profile of where our saver's time goes, per call kind.

The floor (:class:`FloorSaver`) keeps the latest checkpoint object of each thread as given: its
invokes per second are LangGraph's executor alone, and each saver's figure is printed as its
ratio to it. Shapes: one long thread (200 turns written first, then 50 measured) and a new
thread per invoke (300 invokes); 20, 10 and 30 with ``--quick``; ``invoke`` with the
sync savers and ``ainvoke`` with the async ones; SQLite (a file each) and PostgreSQL (a
database each on one server, loopback). Every case runs interleaved in one run.

The profile wraps our saver's public methods (never the package's internals): wall time per
call kind on a long thread, sync and async; where a sync call's time goes (cProfile, by the
module a function lives in: the driver, LangGraph's serde, the package's codec, the TTL
policy, the rest of the package); and the statements, round trips and commits each call
sends, read from the drivers' public trace hooks (``sqlite3``'s ``set_trace_callback``,
libpq's trace through psycopg's ``pgconn.trace``) on a saver over a connection of the
benchmark's own.
"""

from __future__ import annotations

import asyncio
import contextvars
import cProfile
import pstats
import re
import sqlite3
import statistics
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from pathlib import Path
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import MessagesState

from benchmarks.harness import bar_chart, interleave_batches, print_table, write_results
from benchmarks.suites.savers import (
    _encryption,
    _graph_case,
    _round_trip_floor,
    langgraph_savers,
    postgres,
)
from langgraph_checkpoint_agent_memory import PostgresSaver, SqliteSaver, create_checkpointer

#: The graph: one node over ``MessagesState``.
NODES = ("reply",)
FLOOR = "floor"
MEMORY = "InMemorySaver"
OURS = "ours"
ENCRYPTED = "ours (encrypted)"
LANGGRAPH = {
    ("sqlite", "sync"): "lg-SqliteSaver",
    ("sqlite", "async"): "lg-AsyncSqliteSaver",
    ("postgres", "sync"): "lg-PostgresSaver",
    ("postgres", "async"): "lg-AsyncPostgresSaver",
}
#: Issue 45's targets, ratios to the floor (invokes per second).
TARGETS = {
    ("sqlite", "long_thread"): 0.6,
    ("sqlite", "new_threads"): 0.75,
    ("postgres", "long_thread"): 0.5,
    ("postgres", "new_threads"): 0.5,
}
#: Encryption on may cost this much more time per invoke than off; async this much less speed.
ENCRYPTION_TARGET = 1.15
ASYNC_TARGET = 0.9
KINDS = ("get_tuple", "put", "put_writes")
#: Statements counted per invoke, not per call kind (async PostgreSQL: the calls overlap).
EVERY_CALL = "all calls of an invoke"


class FloorSaver(BaseCheckpointSaver[int]):
    """The physical limit: the latest checkpoint object per thread and namespace and the
    writes on it, kept as given (nothing copied, nothing serialized), sync and async."""

    def __init__(self) -> None:
        super().__init__()
        self.latest: dict[tuple[str, str], CheckpointTuple] = {}
        self.writes: dict[tuple[str, str, str], dict[tuple[str, int], tuple[str, str, Any]]] = {}

    @staticmethod
    def _where(config: RunnableConfig) -> tuple[str, str, str | None]:
        c = config["configurable"]
        return c["thread_id"], c.get("checkpoint_ns", ""), c.get("checkpoint_id")

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        thread, ns, wanted = self._where(config)
        found = self.latest.get((thread, ns))
        if found is None or (wanted is not None and wanted != found.checkpoint["id"]):
            return None
        pending = self.writes.get((thread, ns, found.checkpoint["id"]), {})
        return found._replace(pending_writes=list(pending.values()))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        for thread, ns in list(self.latest):
            if config is None or config["configurable"]["thread_id"] == thread:
                found = self.get_tuple({"configurable": {"thread_id": thread, "checkpoint_ns": ns}})
                if found is not None:
                    yield found

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        thread, ns, parent_id = self._where(config)
        saved: RunnableConfig = {
            "configurable": {
                "thread_id": thread,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint["id"],
            }
        }
        parent: RunnableConfig | None = None
        if parent_id is not None:
            parent = {
                "configurable": {
                    "thread_id": thread,
                    "checkpoint_ns": ns,
                    "checkpoint_id": parent_id,
                }
            }
        previous = self.latest.get((thread, ns))
        if previous is not None:
            self.writes.pop((thread, ns, previous.checkpoint["id"]), None)
        self.latest[(thread, ns)] = CheckpointTuple(saved, checkpoint, metadata, parent, [])
        return saved

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        thread, ns, checkpoint_id = self._where(config)
        kept = self.writes.setdefault((thread, ns, str(checkpoint_id)), {})
        for idx, (channel, value) in enumerate(writes):
            special = WRITES_IDX_MAP.get(channel)
            if special is not None:
                kept[(task_id, special)] = (task_id, channel, value)
            else:
                kept.setdefault((task_id, idx), (task_id, channel, value))

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self.get_tuple(config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        for found in self.list(config):
            yield found

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self.put(config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self.put_writes(config, writes, task_id, task_path)


# -- the savers under test -------------------------------------------------------------------


def _ours(url: str, **options: Any) -> Any:
    """Our saver as ``create_checkpointer`` builds it from ``url`` (encryption off unless
    given: no master key of the environment decides it)."""
    options.setdefault("encryption", False)
    saver = create_checkpointer(url=url, **options)
    saver.setup()
    return saver


def savers_under_test(
    stack: ExitStack,
    fresh_pg: Callable[[], str],
    folder: Path,
    loop: asyncio.AbstractEventLoop,
) -> dict[tuple[str, str], dict[str, Any]]:
    """``{(backend, api): {name: saver}}``; the floor and ``InMemorySaver`` under the
    backend ``"any"``. Each saver has a database (or file) of its own."""
    lg_sync, lg_aio = langgraph_savers(stack, fresh_pg, folder, loop)
    lg = {**lg_sync, **lg_aio}
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for api in ("sync", "async"):
        out[("any", api)] = {FLOOR: FloorSaver(), MEMORY: InMemorySaver()}
        for backend in ("sqlite", "postgres"):
            savers: dict[str, Any] = {}
            for name, options in ((OURS, {}), (ENCRYPTED, {"encryption": _encryption()})):
                if backend == "sqlite":
                    url = f"sqlite:///{folder / f'{api}-{len(savers)}.db'}"
                else:
                    url = fresh_pg()
                savers[name] = _ours(url, **options)
                _closing(stack, savers[name], api, loop)
            savers[LANGGRAPH[(backend, api)]] = lg[LANGGRAPH[(backend, api)]]
            out[(backend, api)] = savers
    return out


def _label(backend: str, api: str, name: str) -> str:
    where = "" if backend == "any" else f"{backend} "
    return f"{where}{name}" + (" (async)" if api == "async" else "")


# -- the comparison ------------------------------------------------------------------------------


def _call(loop: asyncio.AbstractEventLoop, api: str, fn: Callable[[], Any]) -> None:
    if api == "async":
        loop.run_until_complete(fn())
    else:
        fn()


def compare(
    savers: dict[tuple[str, str], dict[str, Any]],
    loop: asyncio.AbstractEventLoop,
    *,
    long_seed: int,
    long_measured: int,
    new_invokes: int,
    rounds: int,
) -> dict[str, dict[str, float]]:
    """Invokes per second of every saver, per shape, all interleaved."""
    out: dict[str, dict[str, float]] = {}
    for shape in ("long_thread", "new_threads"):
        long_thread = shape == "long_thread"
        per_round = max(1, (long_measured if long_thread else new_invokes) // rounds)
        cases: dict[str, tuple[str, Callable[[], Any]]] = {}
        for (backend, api), group in savers.items():
            for name, saver in group.items():
                label = _label(backend, api, name)
                fn = _graph_case(
                    saver,
                    f"{label}-{shape}".replace(" ", "_"),
                    long_thread,
                    aio=api == "async",
                    nodes=NODES,
                    state=MessagesState,
                )
                cases[label] = (api, fn)
                if long_thread:  # the history, less the harness's warm-up
                    for _ in range(long_seed - max(1, per_round // 4)):
                        _call(loop, api, fn)
        summary = interleave_batches(cases, loop=loop, rounds=rounds, per_round=per_round).summary()
        out[shape] = {name: 1e6 / s["median_us"] for name, s in summary.items()}
    return out


def ratios(per_second: dict[str, dict[str, float]]) -> list[dict[str, Any]]:
    """One row per shape, backend and API: each saver's invokes per second and its ratio to
    the floor of the same API, the encryption's cost over ours, and the targets."""
    rows = []
    for shape, speeds in per_second.items():
        for backend in ("sqlite", "postgres"):
            for api in ("sync", "async"):
                floor = speeds[_label("any", api, FLOOR)]
                row: dict[str, Any] = {"shape": shape, "backend": backend, "api": api}
                row["floor"] = floor
                for key, name in (
                    ("ours", _label(backend, api, OURS)),
                    ("encrypted", _label(backend, api, ENCRYPTED)),
                    ("langgraph", _label(backend, api, LANGGRAPH[(backend, api)])),
                    ("memory", _label("any", api, MEMORY)),
                ):
                    row[key] = speeds[name]
                    row[f"{key}_x_floor"] = speeds[name] / floor
                row["encryption_cost"] = row["ours"] / row["encrypted"]
                row["target_x_floor"] = TARGETS[(backend, shape)]
                rows.append(row)
    for row in rows:
        if row["api"] == "async":
            [sync] = [
                r
                for r in rows
                if r["api"] == "sync"
                and (r["shape"], r["backend"]) == (row["shape"], row["backend"])
            ]
            row["async_over_sync"] = row["ours"] / sync["ours"]
    return rows


def _met(ok: bool) -> str:
    return "yes" if ok else "NO"


def print_ratios(rows: list[dict[str, Any]]) -> None:
    print_table(
        "one-node graph, invokes per second (median) and the ratio to the floor",
        [
            (
                r["shape"],
                r["backend"],
                r["api"],
                f"{r['floor']:.0f}",
                f"{r['ours']:.0f} ({r['ours_x_floor']:.2f}x)",
                f"{r['encrypted']:.0f} ({r['encrypted_x_floor']:.2f}x)",
                f"{r['langgraph']:.0f} ({r['langgraph_x_floor']:.2f}x)",
                f"{r['memory']:.0f} ({r['memory_x_floor']:.2f}x)",
                f"{r['target_x_floor']:.2f} {_met(r['ours_x_floor'] >= r['target_x_floor'])}",
                f"{r['encryption_cost']:.2f} {_met(r['encryption_cost'] <= ENCRYPTION_TARGET)}",
                (
                    f"{r['async_over_sync']:.2f} {_met(r['async_over_sync'] >= ASYNC_TARGET)}"
                    if "async_over_sync" in r
                    else ""
                ),
            )
            for r in rows
        ],
        (
            "shape",
            "backend",
            "api",
            "floor",
            "ours",
            "ours encrypted",
            "LangGraph's",
            "InMemorySaver",
            "target",
            "enc. cost<=1.15",
            "async/sync>=0.9",
        ),
    )


# -- the profile ---------------------------------------------------------------------------------


Hook = Callable[[str], AbstractContextManager[Any]]


class Observed(BaseCheckpointSaver[Any]):
    """``inner`` with each call of the hot path inside ``hook(kind)`` (sync and async)."""

    def __init__(self, inner: Any, hook: Hook) -> None:
        super().__init__(serde=inner.serde)
        self.inner, self.hook = inner, hook

    @property
    def config_specs(self) -> list[Any]:
        return list(self.inner.config_specs)

    def get_next_version(self, current: Any, channel: None) -> Any:
        return self.inner.get_next_version(current, channel)

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        with self.hook("get_tuple"):
            return self.inner.get_tuple(config)  # type: ignore[no-any-return]

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        with self.hook("put"):
            return self.inner.put(config, checkpoint, metadata, new_versions)  # type: ignore[no-any-return]

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        with self.hook("put_writes"):
            self.inner.put_writes(config, writes, task_id, task_path)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        with self.hook("get_tuple"):
            return await self.inner.aget_tuple(config)  # type: ignore[no-any-return]

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        with self.hook("put"):
            return await self.inner.aput(config, checkpoint, metadata, new_versions)  # type: ignore[no-any-return]

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        with self.hook("put_writes"):
            await self.inner.aput_writes(config, writes, task_id, task_path)


class CallTimes:
    """Wall time of each call, by kind."""

    def __init__(self) -> None:
        self.samples: dict[str, list[float]] = defaultdict(list)

    @contextmanager
    def hook(self, kind: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.samples[kind].append(time.perf_counter() - start)  # list.append: atomic


#: Where a function's time is counted, by the first rule its file or name matches.
CATEGORIES: list[tuple[str, re.Pattern[str]]] = [
    # the serializer and the objects it builds or takes apart (messages are pydantic models)
    (
        "serde",
        re.compile(r"langgraph/checkpoint/serde|ormsgpack|orjson|msgpack|pydantic|langchain_core"),
    ),
    ("codec", re.compile(r"agent_memory/checkpoint/codec\.py|zstd")),
    ("encryption", re.compile(r"agent_memory/crypto/|sealing\.py|cryptography")),
    ("TTL", re.compile(r"agent_memory/checkpoint/lifetime\.py")),
    ("sqlite3", re.compile(r"sqlite3")),
    ("psycopg wait", re.compile(r"psycopg.*wait|wait_c|select\.|selectors")),
    ("psycopg", re.compile(r"psycopg")),
    ("package", re.compile(r"langgraph_checkpoint_agent_memory")),
    ("lock waits", re.compile(r"acquire|_thread\.lock|threading\.py.*wait")),
    ("other", re.compile(r"")),
]


def _category(func: tuple[str, int, str]) -> str:
    text = f"{func[0]}:{func[2]}"
    return next(name for name, pattern in CATEGORIES if pattern.search(text))


class Profiles:
    """A cProfile of each call, in the thread that runs it, summed by kind."""

    def __init__(self) -> None:
        self.stats: dict[str, pstats.Stats] = {}
        self.calls: Counter[str] = Counter()
        self._lock = threading.Lock()

    @contextmanager
    def hook(self, kind: str) -> Iterator[None]:
        profile = cProfile.Profile()
        profile.enable()
        try:
            yield
        finally:
            profile.disable()
            with self._lock:
                self.calls[kind] += 1
                if kind in self.stats:
                    self.stats[kind].add(profile)
                else:
                    self.stats[kind] = pstats.Stats(profile)

    def shares(self) -> dict[str, dict[str, float]]:
        """Per kind, each category's share of the profiled time, and the serde calls."""
        out: dict[str, dict[str, float]] = {}
        for kind, stats in self.stats.items():
            by_category: Counter[str] = Counter()
            serde_calls = 0
            for func, (_, ncalls, tottime, _, _) in stats.stats.items():  # type: ignore[attr-defined]
                by_category[_category(func)] += tottime
                if func[2] in ("dumps_typed", "loads_typed") and "serde" in func[0]:
                    serde_calls += ncalls
            total = sum(by_category.values()) or 1.0
            out[kind] = {name: by_category[name] / total for name, _ in CATEGORIES}
            out[kind]["serde_calls"] = serde_calls / max(1, self.calls[kind])
        return out


_kind: contextvars.ContextVar[str] = contextvars.ContextVar("kind", default="other")


class StatementCounts:
    """Statements, round trips and commits per call kind, from a driver's trace.

    SQLite: ``set_trace_callback`` on the saver's one connection tells each statement in the
    thread that runs it, and the kind is the caller's (a context variable, which
    ``asyncio.to_thread`` carries). PostgreSQL: libpq's trace of the saver's one connection,
    read after each call (calls run one at a time under a lock): a round trip is a ``Sync``
    (a statement alone, or a pipeline) or a simple ``Query``; a commit is a ``COMMIT`` or a
    write outside a transaction.
    """

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.counts: dict[str, Counter[str]] = defaultdict(Counter)
        self._in_tx = self._wrote = False
        self._last = ""
        self._names: dict[str, tuple[str, bool]] = {}
        self._lock = threading.Lock()
        self._file: Any = None
        self.each_call = False

    def hook(self, kind: str) -> AbstractContextManager[Any]:
        return self._traced(kind) if self.each_call else self._tagged(kind)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()

    @contextmanager
    def _tagged(self, kind: str) -> Iterator[None]:
        token = _kind.set(kind)
        try:
            yield
        finally:
            _kind.reset(token)
            self.calls[kind] += 1

    # -- SQLite ----------------------------------------------------------------------------

    def statement(self, sql: str) -> None:
        """``set_trace_callback``'s callback: the statement's SQL, its values in place. The
        callback runs again, with the same text, at the start of each trigger program the
        statement runs: counted apart."""
        counts = self.counts[_kind.get()]
        if sql == self._last:
            counts["trigger programs"] += 1
            return
        self._last = sql
        head = _head(sql)
        counts["statements"] += 1
        counts[f"  {head}"] += 1
        self._ended(counts, head, _writes(_LITERAL.sub("", sql)))

    def _ended(self, counts: Counter[str], head: str, writes: bool) -> None:
        """Count a commit of a transaction that wrote: at its ``COMMIT``, or at once for a
        write outside a transaction (autocommit)."""
        if head.startswith("BEGIN"):
            self._in_tx, self._wrote = True, False
        elif head in ("COMMIT", "END", "ROLLBACK"):
            counts["commits"] += head != "ROLLBACK" and self._wrote
            self._in_tx = self._wrote = False
        elif writes and self._in_tx:
            self._wrote = True
        elif writes:
            counts["commits"] += 1

    # -- PostgreSQL ------------------------------------------------------------------------

    @contextmanager
    def _traced(self, kind: str) -> Iterator[None]:
        """One sync call, alone on the connection (calls of other threads wait), its trace
        read after it."""
        with self._lock:
            self.start_trace()
            try:
                yield
            finally:
                self.calls[kind] += 1
                self.end_trace(kind)

    def trace_connection(self, pgconn: Any, path: Path, *, per_call: bool) -> None:
        """Trace ``pgconn`` into ``path``: around each call (``per_call``), else between
        :meth:`start_trace` and :meth:`end_trace` (async calls overlap on the event loop,
        so their statements are counted per invoke)."""
        self._file = open(path, "ab")  # noqa: SIM115 - open for the saver's life
        self._pgconn, self._path = pgconn, path
        self.each_call = per_call

    def start_trace(self) -> None:
        import psycopg

        self._reader = open(self._path, "rb")  # noqa: SIM115 - closed by end_trace
        self._reader.seek(0, 2)
        self._pgconn.trace(self._file.fileno())
        self._pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)

    def end_trace(self, kind: str) -> None:
        self._pgconn.untrace()  # flushes what libpq buffered
        with self._reader:
            self._read(self.counts[kind], self._reader.read().decode(errors="replace"))

    def _read(self, counts: Counter[str], text: str) -> None:
        """Count what libpq's trace shows was sent: each ``Execute`` or simple ``Query`` a
        statement, each ``Sync`` or ``Query`` a round trip."""
        bound = ("", False)
        for message in _MESSAGE.split(text):
            parts = message.split("\t", 3)
            if len(parts) < 3 or parts[0] != "F":
                continue
            what, rest = parts[2], parts[3] if len(parts) > 3 else ""
            if what == "Parse":
                parse = _PARSE.match(rest)
                name, sql = parse.groups() if parse else ("", "")
                self._names[name] = bound = (_head(sql), _writes(sql))
            elif what == "Bind":
                bind = _BIND.match(rest)
                bound = self._names.get(bind.group(1) if bind else "", bound)
            elif what in ("Execute", "Query"):
                if what == "Query":
                    query = _QUERY.match(rest)
                    sql = query.group(1) if query else ""
                    bound = (_head(sql), _writes(sql))
                    counts["round trips"] += 1
                counts["statements"] += 1
                counts[f"  {bound[0]}"] += 1
                self._ended(counts, *bound)
            elif what == "Sync":
                counts["round trips"] += 1

    def per_call(self) -> dict[str, dict[str, float]]:
        return {
            kind: {k: v / max(1, self.calls[kind]) for k, v in sorted(counts.items())}
            for kind, counts in self.counts.items()
            if kind in self.calls
        }


_LITERAL = re.compile(r"'(?:[^']|'')*'")
#: libpq's trace of a Parse (statement name, SQL, parameter types), a Bind (portal,
#: statement name, ...) and a simple Query; the SQL's own quotes are not escaped.
_PARSE = re.compile(r'\s*"([^"]*)" "(.*)" \d+(?: \S+)*\s*$', re.DOTALL)
#: Where a message of the trace starts (a statement's text may span lines).
_MESSAGE = re.compile(r"\n(?=[FB]\t\d+\t)")
_BIND = re.compile(r'\s*"[^"]*" "([^"]*)"')
_QUERY = re.compile(r'\s*"(.*)"\s*$', re.DOTALL)
_WRITE = re.compile(r"\b(INSERT|UPDATE|DELETE|REPLACE|MERGE)\b", re.IGNORECASE)


def _writes(sql: str) -> bool:
    """Whether ``sql`` (without its literals) writes."""
    return _WRITE.search(sql) is not None


def _head(sql: str) -> str:
    words = sql.split()
    if not words:
        return ""
    first = words[0].upper()
    return f"{first} {words[1].upper()}" if first == "BEGIN" and len(words) > 1 else first


def _run_turns(graph_case: Callable[[], Any], api: str, loop: Any, turns: int) -> list[float]:
    samples = []
    for _ in range(turns):
        start = time.perf_counter()
        _call(loop, api, graph_case)
        samples.append(time.perf_counter() - start)
    return samples


def _case(saver: Any, name: str, api: str) -> Callable[[], Any]:
    return _graph_case(saver, name, True, aio=api == "async", nodes=NODES, state=MessagesState)


def bounds(fresh_pg: Callable[[], str], folder: Path, rounds: int) -> dict[str, float]:
    """What one round trip and one committed write cost on this machine, medians in µs: a
    PostgreSQL ``SELECT 1``, a one-row ``INSERT`` committed on its own (the server's fsync
    on) on PostgreSQL and on a SQLite file as our saver opens it (WAL, synchronous NORMAL),
    and an ``await asyncio.to_thread`` of a function doing nothing."""
    import psycopg

    def median_us(run: Callable[[], Any]) -> float:
        samples = []
        for _ in range(rounds):
            start = time.perf_counter()
            run()
            samples.append(time.perf_counter() - start)
        return statistics.median(samples) * 1e6

    url = fresh_pg()
    out = {"postgres SELECT 1": _round_trip_floor(url, rounds)}
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE bound (x int)")
        out["postgres INSERT committed"] = median_us(
            lambda: conn.execute("INSERT INTO bound VALUES (1)")
        )
    lite = sqlite3.connect(folder / "bound.db", isolation_level=None)
    try:
        lite.execute("PRAGMA journal_mode = WAL")
        lite.execute("PRAGMA synchronous = NORMAL")
        lite.execute("CREATE TABLE bound (x int)")
        out["sqlite INSERT committed"] = median_us(
            lambda: lite.execute("INSERT INTO bound VALUES (1)")
        )
    finally:
        lite.close()

    async def handoffs() -> float:
        def nothing() -> None:
            return None

        samples = []
        for _ in range(rounds):
            start = time.perf_counter()
            await asyncio.to_thread(nothing)
            samples.append(time.perf_counter() - start)
        return statistics.median(samples) * 1e6

    # how an async call reaches a sync driver (SQLite's async path runs its plan there)
    out["asyncio.to_thread of nothing"] = asyncio.run(handoffs())
    return out


def profile(
    fresh_pg: Callable[[], str],
    folder: Path,
    loop: asyncio.AbstractEventLoop,
    *,
    seed: int,
    turns: int,
) -> dict[str, Any]:
    """Our saver on a long thread, per backend and API: wall time per call kind, the
    breakdown of a sync call (cProfile), and statements, round trips and commits per call
    (with TTL off, as ``create_checkpointer`` builds it by default, and on)."""
    out: dict[str, Any] = {"seed_turns": seed, "turns": turns}
    out["bounds_us"] = bounds(fresh_pg, folder, 20 * turns)
    with ExitStack() as stack:
        for backend in ("sqlite", "postgres"):
            for api in ("sync", "async"):
                where = f"{backend} {api}"
                url = (
                    f"sqlite:///{folder / f'profile-{api}.db'}"
                    if backend == "sqlite"
                    else fresh_pg()
                )
                ours = _ours(url)
                _closing(stack, ours, api, loop)
                times = CallTimes()
                case = _case(Observed(ours, times.hook), f"profile-{api}", api)
                _run_turns(case, api, loop, seed)
                times.samples.clear()
                invokes = _run_turns(case, api, loop, turns)
                entry: dict[str, Any] = {"invoke_us": statistics.median(invokes) * 1e6}
                entry["calls"] = {
                    kind: {
                        "per_invoke": len(times.samples[kind]) / turns,
                        "median_us": statistics.median(times.samples[kind]) * 1e6,
                        "mean_us": statistics.fmean(times.samples[kind]) * 1e6,
                    }
                    for kind in KINDS
                    if times.samples[kind]
                }
                if api == "sync":
                    profiles = Profiles()
                    _run_turns(
                        _case(Observed(ours, profiles.hook), f"profile-{api}", api),
                        api,
                        loop,
                        turns,
                    )
                    entry["time_shares"] = profiles.shares()
                entry["statements"] = {}
                for ttl in (None, 3600):
                    counts = StatementCounts()
                    counted = _counted_saver(
                        stack, backend, api, folder, fresh_pg, counts, ttl, loop
                    )
                    case = _case(Observed(counted, counts.hook), f"counted-{ttl}", api)
                    # the thread exists and statements are prepared (their names traced)
                    whole = backend == "postgres" and api == "async"
                    if whole:
                        counts.start_trace()
                    _run_turns(case, api, loop, 3)
                    if whole:
                        counts.end_trace(EVERY_CALL)
                        counts.start_trace()
                    counts.calls.clear()
                    counts.counts.clear()
                    _run_turns(case, api, loop, turns)
                    if whole:
                        counts.calls[EVERY_CALL] = turns
                        counts.end_trace(EVERY_CALL)
                    entry["statements"]["ttl off" if ttl is None else f"ttl {ttl} s"] = (
                        counts.per_call()
                    )
                out[where] = entry
    return out


def _closing(stack: ExitStack, saver: Any, api: str, loop: asyncio.AbstractEventLoop) -> None:
    """Close ``saver`` with ``stack``: ``aclose`` on ``loop`` for one used by async code."""
    if api == "async":
        stack.callback(lambda: loop.run_until_complete(saver.aclose()))
    else:
        stack.callback(saver.close)


def _counted_saver(
    stack: ExitStack,
    backend: str,
    api: str,
    folder: Path,
    fresh_pg: Callable[[], str],
    counts: StatementCounts,
    ttl: int | None,
    loop: asyncio.AbstractEventLoop,
) -> Any:
    """Our saver over one connection of the benchmark's own, traced into ``counts``: the
    same plans as the URL's saver (statements are the plans'; only the pool differs)."""
    if backend == "sqlite":
        conn = sqlite3.connect(
            folder / f"counted-{api}-{ttl}.db", check_same_thread=False, isolation_level=None
        )
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        stack.callback(conn.close)
        saver: Any = SqliteSaver(conn, ttl_seconds=ttl)
        saver.setup()
        _closing(stack, saver, api, loop)
        conn.set_trace_callback(counts.statement)
        return saver
    import psycopg

    url = fresh_pg()
    path = folder / f"trace-{api}-{ttl}.txt"
    if api == "sync":
        pg = psycopg.connect(url, autocommit=True)
        stack.callback(pg.close)
        saver = PostgresSaver(pg, ttl_seconds=ttl)
        saver.setup()
    else:
        apg = loop.run_until_complete(psycopg.AsyncConnection.connect(url, autocommit=True))
        stack.callback(lambda: loop.run_until_complete(apg.close()))
        saver = PostgresSaver(apg, ttl_seconds=ttl)
        loop.run_until_complete(saver.asetup())
        pg = apg
    _closing(stack, saver, api, loop)
    counts.trace_connection(pg.pgconn, path, per_call=api == "sync")
    stack.callback(counts.close)
    return saver


def _per_invoke(entry: dict[str, Any]) -> dict[str, float]:
    """Statements, round trips and commits per invoke (TTL off)."""
    counted = entry["statements"]["ttl off"]
    if EVERY_CALL in counted:
        return dict(counted[EVERY_CALL])
    total: Counter[str] = Counter()
    for kind, call in entry["calls"].items():
        for key, value in counted.get(kind, {}).items():
            total[key] += value * call["per_invoke"]
    return dict(sorted(total.items()))


COUNTED = ("statements", "round trips", "commits", "trigger programs")


def _cells(counted: dict[str, float], where: str) -> tuple[str, ...]:
    """Counted figures as printed: SQLite has no round trips (it runs in the process),
    PostgreSQL no trigger programs on this path."""
    if not counted:
        return ("",) * (len(COUNTED) + 1)
    cells = [
        "-"
        if (k == "round trips") == where.startswith("sqlite") and k in COUNTED[1::2]
        else f"{counted.get(k, 0):.2f}"
        for k in COUNTED
    ]
    sent = ", ".join(f"{k.strip()} {v:.2g}" for k, v in counted.items() if k.startswith("  "))
    return (*cells, sent)


def print_profile(found: dict[str, Any], floor: dict[str, float]) -> None:
    print_table(
        "bounds: one round trip, one committed write, one hop to a thread (median µs)",
        [(k, f"{v:.0f}") for k, v in found["bounds_us"].items()],
        ("what", "µs"),
    )
    rows = []
    for where, entry in found.items():
        if where == "bounds_us" or not isinstance(entry, dict):
            continue
        for kind, call in entry["calls"].items():
            counted = entry["statements"]["ttl off"].get(kind, {})
            rows.append(
                (
                    where,
                    kind,
                    f"{call['per_invoke']:.1f}",
                    f"{call['median_us']:.0f}",
                    f"{call['mean_us'] * call['per_invoke']:.0f}",
                    *_cells(counted, where),
                )
            )
        api = where.split()[1]
        rows.append(
            (
                where,
                "invoke",
                "1",
                f"{entry['invoke_us']:.0f}",
                f"floor {1e6 / floor[api]:.0f}",
                *_cells(_per_invoke(entry), where),
            )
        )
    print_table(
        "profile: our saver on a long thread, per call kind (wall time; statements per call, "
        "TTL off)",
        rows,
        ("saver", "call", "calls/invoke", "µs/call p50", "µs/invoke", *COUNTED, "sent"),
    )
    ttl_rows = []
    for where, entry in found.items():
        if where == "bounds_us" or not isinstance(entry, dict):
            continue
        for setting, kinds in entry["statements"].items():
            for kind, counted in kinds.items():
                ttl_rows.append((where, setting, kind, *_cells(counted, where)[:-1]))
    print_table(
        "statements per call, TTL off and on",
        ttl_rows,
        ("saver", "ttl", "call", *COUNTED),
    )
    share_rows = []
    names = [name for name, _ in CATEGORIES]
    for where, entry in found.items():
        if where == "bounds_us" or not isinstance(entry, dict) or "time_shares" not in entry:
            continue
        for kind, shares in entry["time_shares"].items():
            wall = entry["calls"].get(kind, {}).get("median_us", 0.0)
            share_rows.append(
                (
                    where,
                    kind,
                    f"{shares['serde_calls']:.1f}",
                    *(f"{shares[n] * 100:.0f}% {shares[n] * wall:.0f}" for n in names),
                )
            )
    print_table(
        "where a sync call's time goes (cProfile self time by module: share, and that share of "
        "the wall µs above)",
        share_rows,
        ("saver", "call", "serde calls", *names),
    )


# -- the suite -----------------------------------------------------------------------------------


def run(*, quick: bool, out: Path) -> None:
    """Our savers, LangGraph's and the floor on a one-node graph; the profile of ours."""
    long_seed, long_measured, new_invokes, rounds = (20, 10, 30, 2) if quick else (200, 50, 300, 10)
    loop = asyncio.new_event_loop()
    results: dict[str, Any] = {
        "quick": quick,
        "long_thread": {"seed_turns": long_seed, "measured": long_measured},
        "new_threads": {"invokes": new_invokes},
        "rounds": rounds,
    }
    with (
        ExitStack() as stack,
        postgres() as fresh_pg,
        tempfile.TemporaryDirectory(prefix="bench-floor-") as tmp,
    ):
        folder = Path(tmp)
        savers = savers_under_test(stack, fresh_pg, folder, loop)
        per_second = compare(
            savers,
            loop,
            long_seed=long_seed,
            long_measured=long_measured,
            new_invokes=new_invokes,
            rounds=rounds,
        )
        results["invokes_per_s"] = per_second
        rows = ratios(per_second)
        print_ratios(rows)
        # by name, so `benchmarks compare` finds each ratio
        results["ratios"] = {f"{r['shape']} {r['backend']} {r['api']}": r for r in rows}
        floor = {
            api: per_second["long_thread"][_label("any", api, FLOOR)] for api in ("sync", "async")
        }
        found = profile(fresh_pg, folder, loop, seed=long_seed, turns=long_measured)
        results["profile"] = found
        print_profile(found, floor)
        stack.close()
    loop.close()
    write_results(out, "floor", results)
    bar_chart(out, "floor", per_second, "invokes per second")


__all__ = ["FloorSaver", "run"]
