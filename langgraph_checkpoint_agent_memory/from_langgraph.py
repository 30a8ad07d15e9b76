"""Move in from LangGraph's own savers and stores: :func:`import_from_langgraph`.

Checkpoints are read through LangGraph's own saver on a read-only connection, one at a time, oldest
first (a long thread is never held whole in memory); what its API does not give (the thread ids, the
writes' task paths, the items' TTLs) through SQL on its tables (:mod:`.db.langgraph_tables`). Writes
go through the saver's ``put`` / ``put_writes`` and the store's ``batch``, so encryption, TTL and
the index apply. What makes a run repeatable (the user guide's "Running it again"): only what is
missing or newer here is put, and an item deleted here since a complete run copied it is not brought
back (each complete run records the source's time at its start in ``am_settings``).
"""

from __future__ import annotations

import hashlib
import importlib
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from langgraph.checkpoint.base import WRITES_IDX_MAP, CheckpointTuple

from langgraph_checkpoint_agent_memory import errors
from langgraph_checkpoint_agent_memory.db import langgraph_tables as sql
from langgraph_checkpoint_agent_memory.db import url as urls

if TYPE_CHECKING:
    from langgraph.checkpoint.base import BaseCheckpointSaver
    from langgraph.checkpoint.serde.base import SerializerProtocol
    from langgraph.store.base import TTLConfig

    from langgraph_checkpoint_agent_memory.checkpoint.saver import SQLSaver
    from langgraph_checkpoint_agent_memory.crypto.config import EncryptionLike
    from langgraph_checkpoint_agent_memory.store.store import AgentMemoryStore, IndexSettings

__all__ = ["ImportProgress", "ImportReport", "import_from_langgraph"]

#: What the destination refuses of one thread or item (the import goes on with the others).
REFUSED = (errors.InvalidValueError, errors.DamagedValueError)

#: A checkpoint's channel versions, and the channels it holds a value of.
Versions = tuple[dict[str, Any], frozenset[str]]


@dataclass
class ImportProgress:
    """Where an import is: passed to ``on_progress`` after each checkpoint, thread and page
    of items (the same object, updated)."""

    #: Threads and live items in the source (``None``: not imported).
    threads_total: int | None = None
    items_total: int | None = None
    #: Threads and items looked at (copied, unchanged or refused), so far.
    threads_done: int = 0
    items_done: int = 0
    #: Checkpoints and tasks' writes put so far.
    checkpoints: int = 0
    writes: int = 0
    #: When the copy of threads, and of items, began (``time.monotonic()``).
    started: dict[str, float] = field(default_factory=dict)

    def rate(self, what: str) -> float:
        """``"threads"`` or ``"items"`` per second since their copy began (0 before).

        Args:
            what: ``"threads"`` or ``"items"``.

        Example:
            >>> ImportProgress(threads_total=10).rate("threads")
            0.0
        """
        if what not in self.started:
            return 0.0
        done = self.threads_done if what == "threads" else self.items_done
        return done / max(time.monotonic() - self.started[what], 1e-9)


@dataclass
class ImportReport:
    """What an import did.

    ``threads_copied`` had something missing here and got it; ``threads_unchanged`` were
    complete already; ``threads_refused`` were deleted here (a thread deleted in the
    destination is not brought back: its ids are listed). ``items`` were new or newer in
    the source and were copied; ``items_unchanged`` were here already, as the source has
    them or changed here since (kept); ``items_refused`` were deleted here since a run
    copied them (not brought back). ``threads_failed`` and ``items_failed`` are what the
    destination cannot hold (a thread id over 255 characters, a value its validation
    refuses), each with the reason: the others were copied all the same.
    """

    threads: int = 0
    threads_copied: int = 0
    threads_unchanged: int = 0
    threads_refused: list[str] = field(default_factory=list)
    checkpoints: int = 0
    writes: int = 0
    items: int = 0
    items_unchanged: int = 0
    items_refused: int = 0
    threads_failed: list[dict[str, str]] = field(default_factory=list)
    items_failed: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        """The report as a dict of JSON values (what ``agent-memory import --json`` prints).

        Example:
            >>> ImportReport(threads=2, threads_copied=2).as_dict()["threads_copied"]
            2
        """
        return asdict(self)


def import_from_langgraph(
    source: str,
    url: str | None = None,
    *,
    threads: bool = True,
    items: bool = True,
    ttl_seconds: int | None = None,
    store_ttl: TTLConfig | None = None,
    index: IndexSettings | None = None,
    encryption: EncryptionLike = None,
    serde: SerializerProtocol | None = None,
    on_progress: Callable[[ImportProgress], None] | None = None,
) -> ImportReport:
    """Copy every thread and store item that LangGraph's own savers and stores wrote at
    ``source`` into this package's tables at ``url``.

    The source is only read (a SQLite file opened with ``mode=ro``, PostgreSQL in read-only
    transactions). Every checkpoint of every thread and namespace (subgraphs included) is
    copied with its id, parent, channel values, metadata and pending writes (interrupts and
    errors included); every live item with its value, namespace, ``created_at``,
    ``updated_at`` and TTL (an item past its ``expires_at`` is not copied). Running it again
    copies only what is missing (see the module's docstring): after a crash, or to catch up
    with what the application wrote while it was being switched.

    Args:
        source: URL of the database LangGraph wrote: ``sqlite:///path.db`` (or a path) or
            ``postgresql://...``.
        url: Where to copy to (any backend of the package); ``None`` reads ``AGENT_MEMORY_URL``.
        threads: Copy the checkpointer's threads.
        items: Copy the store's items.
        ttl_seconds: The threads' idle TTL, as ``create_checkpointer`` takes it (``None``:
            the declared ``config.checkpointer.ttl_seconds``, else none). A copied thread's
            idle time starts at the import.
        store_ttl: The store's ``TTLConfig``: an item without a TTL of its own gets its
            ``default_ttl`` from the import on, as a ``put`` would; an item with one keeps it
            and its ``expires_at``.
        index: The store's ``index`` (as ``create_store`` takes it), to embed the items for
            vector search; without it they are found by lexical search.
        encryption: Encryption at rest of the destination (as ``create_checkpointer``
            takes it; ``None`` follows ``AGENT_MEMORY_MASTER_KEY``).
        serde: The serializer the application gave LangGraph's saver, when not its default
            (e.g. an ``EncryptedSerializer``).
        on_progress: Called with an :class:`ImportProgress` after each checkpoint, thread
            and page of items.

    Returns:
        An :class:`ImportReport` of what was copied.

    Raises:
        DatabaseNotFoundError: No SQLite file at ``source``.
        DatabaseUnavailableError: The source's server (or the destination's) cannot be reached.
        ConfigurationError: No destination URL, a source that holds none of LangGraph's
            tables, a table of LangGraph's name that is not LangGraph's, values written
            with a serializer other than ``serde`` (LangGraph's default when ``None``), or
            LangGraph's saver package for the source is not installed.

    A thread or item the destination cannot hold raises nothing: it is listed in the
    report's ``threads_failed`` / ``items_failed``, and the others are copied. The call
    blocks until the import is done (there is no async variant).

    Example:
        ```python
        from langgraph.checkpoint.sqlite import SqliteSaver

        from langgraph_checkpoint_agent_memory import import_from_langgraph

        with SqliteSaver.from_conn_string("langgraph.db") as theirs:  # the app's until now
            builder.compile(checkpointer=theirs).invoke(inputs, config)
        report = import_from_langgraph("sqlite:///langgraph.db", "sqlite:///memory.db")
        assert (report.threads, report.checkpoints) == (1, 3)  # input, start, agent
        ```
    """
    from langgraph_checkpoint_agent_memory.checkpoint.saver import SQLSaver
    from langgraph_checkpoint_agent_memory.factory import create_checkpointer, create_store

    target = urls.resolve(url)
    if target is None:
        raise errors.ConfigurationError(
            f"import_from_langgraph() needs a destination: pass url= or set {urls.URL_ENV}"
        )
    tally = _Tally(ImportReport(), ImportProgress(), on_progress or (lambda progress: None))
    with closing(sql.open_source(source)) as src:
        tables = src.tables()
        threads = threads and "checkpoints" in tables
        items = items and "store" in tables
        if not (threads or items):
            raise errors.ConfigurationError(
                f"{src.where} holds none of LangGraph's tables (checkpoints, store)"
            )
        read = {"store"} if items else set()
        if threads:
            read |= {"checkpoints", src.writes_table}
            read |= {"checkpoint_blobs"} if src.kind == "postgresql" else set()
        src.check(read)
        tally.progress.threads_total = src.count("threads") if threads else None
        tally.progress.items_total = src.count("items") if items else None
        tally.tell()
        if threads:
            theirs = _langgraph_saver(src, serde)
            saver = create_checkpointer(ttl_seconds, url=target.url, encryption=encryption)
            assert isinstance(saver, SQLSaver)  # a URL was given: a SQL saver
            with saver:
                _copy_threads(src, theirs, saver, tally)
        if items:
            store = create_store(target.url, index=index, ttl=store_ttl, encryption=encryption)
            with store:
                _copy_items(src, store, tally)
    tally.report.seconds = time.monotonic() - tally.began
    return tally.report


@dataclass
class _Tally:
    """What an import has done: its report, and its progress told to ``notify``."""

    report: ImportReport
    progress: ImportProgress
    notify: Callable[[ImportProgress], None]
    began: float = field(default_factory=time.monotonic)

    def tell(self) -> None:
        self.notify(self.progress)

    def thread(self, thread_id: str, copied: bool | None, failed: str | None = None) -> None:
        """``copied``: ``False`` complete already, ``None`` refused (deleted here)."""
        report = self.report
        report.threads += 1
        if failed is not None:
            report.threads_failed.append({"thread_id": thread_id, "reason": failed})
        elif copied is None:
            report.threads_refused.append(thread_id)
        elif copied:
            report.threads_copied += 1
        else:
            report.threads_unchanged += 1
        self.progress.threads_done += 1
        self.tell()

    def checkpoint(self) -> None:
        self.report.checkpoints += 1
        self.progress.checkpoints += 1
        self.tell()

    def task_writes(self) -> None:
        self.report.writes += 1
        self.progress.writes += 1

    def items(self, copied: int, looked_at: int) -> None:
        self.report.items += copied
        self.progress.items_done += looked_at
        self.tell()


#: The serialization types LangGraph's default serializer reads (pickle: only when asked).
DEFAULT_TYPES = frozenset({"msgpack", "json", "null", "empty", "bytes", "bytearray"})


def _langgraph_saver(src: sql.Source, serde: SerializerProtocol | None) -> BaseCheckpointSaver[Any]:
    kind = {"sqlite": "sqlite", "postgresql": "postgres"}[src.kind]
    name, package = f"{kind.capitalize()}Saver", f"langgraph-checkpoint-{kind}"
    try:
        found = importlib.import_module(f"langgraph.checkpoint.{kind}")
    except ImportError:
        raise errors.ConfigurationError(
            f"reading threads of LangGraph's {name} needs its package: pip install {package}"
        ) from None
    if serde is None and (other := sorted(src.value_types() - DEFAULT_TYPES)):
        raise errors.ConfigurationError(
            f"{src.where}: the source's values were written with another serializer "
            f"(type {', '.join(other)}"
            + (": LangGraph's EncryptedSerializer" if any("+aes" in t for t in other) else "")
            + "): pass serde=... to import_from_langgraph() (Python), or --serde aes "
            "with LANGGRAPH_AES_KEY set (agent-memory import)"
        )
    saver: BaseCheckpointSaver[Any] = getattr(found, name)(src.connection, serde=serde)
    if src.kind == "sqlite":
        wal, task_paths = src.sqlite_state()
        if not wal:  # the saver's setup would switch the file to WAL: refused read-only
            if not task_paths:
                raise errors.ConfigurationError(
                    f"{src.where} is not in WAL mode, as LangGraph's SqliteSaver leaves its "
                    "files, and predates its task_path column: LangGraph's saver cannot read "
                    "it read-only. Switch it first: sqlite3 FILE 'PRAGMA journal_mode=WAL'"
                )
            saver.is_setup = True  # type: ignore[attr-defined]  # its tables are all there
    return saver


def _copy_threads(
    src: sql.Source, theirs: BaseCheckpointSaver[Any], saver: SQLSaver, tally: _Tally
) -> None:
    saver.setup()
    tally.progress.started["threads"] = time.monotonic()
    for thread_id in src.thread_ids():
        failed = None
        try:
            with src.reading():
                copied: bool | None = _copy_thread(src, theirs, saver, thread_id, tally)
        except errors.ThreadDeletedError:  # deleted here since: not brought back
            copied = None
        except REFUSED as exc:  # what the destination cannot hold: the others go on
            copied, failed = False, str(exc)
        tally.thread(thread_id, copied, failed)


def _copy_thread(
    src: sql.Source,
    theirs: BaseCheckpointSaver[Any],
    saver: SQLSaver,
    thread_id: str,
    tally: _Tally,
) -> bool:
    """``False`` when the thread lacked nothing here."""
    wanted = src.shape(thread_id)
    here = saver.db.run(sql.thread_shape_plan(saver.dialect, thread_id))
    todo = {key for key, n in wanted.items() if key not in here or here[key] < n}
    replaced = _replaced_special_writes(src, theirs, saver, thread_id, set(here) - todo, tally)
    if not todo:
        return replaced
    paths = src.task_paths(thread_id)
    versions: dict[tuple[str, str], Versions] = {}
    for found in _oldest_first(theirs, thread_id, todo, set(here)):
        ns, checkpoint_id = _coordinates(found)
        checkpoint = found.checkpoint
        held = frozenset(checkpoint["channel_values"])
        versions[(ns, checkpoint_id)] = (checkpoint["channel_versions"], held)
        if (ns, checkpoint_id) not in todo:
            continue
        if (ns, checkpoint_id) not in here:
            _put_checkpoint(saver, thread_id, found, versions)
            tally.checkpoint()
        by_task: dict[str, list[tuple[str, Any]]] = {}
        for task_id, channel, value in found.pending_writes or ():
            by_task.setdefault(task_id, []).append((channel, value))
        for task_id, task_writes in by_task.items():
            path = paths.get((ns, checkpoint_id, task_id), "")
            # the regular writes in their order (the same indexes again), then the special ones
            for special in (False, True):
                if group := [w for w in task_writes if (w[0] in WRITES_IDX_MAP) is special]:
                    saver.put_writes(found.config, group, task_id, path)
            tally.task_writes()
    return True


def _replaced_special_writes(
    src: sql.Source,
    theirs: BaseCheckpointSaver[Any],
    saver: SQLSaver,
    thread_id: str,
    complete: set[tuple[str, str]],
    tally: _Tally,
) -> bool:
    """Put again the special writes LangGraph replaced in place since they were copied (those
    of each namespace's latest ``complete`` checkpoint, which a task reruns from); any put?"""
    latest = dict(sorted(complete))  # each namespace's last id in order: its latest
    keys = src.with_special_writes(thread_id, list(WRITES_IDX_MAP)) & set(latest.items())
    put = False
    for ns, checkpoint_id in sorted(keys):
        conf = {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}
        there, ours = (s.get_tuple({"configurable": conf}) for s in (theirs, saver))
        if there is None or ours is None:
            continue
        wanted, held = (_special_writes(saver, t) for t in (there, ours))
        if wanted == held:
            continue
        paths = src.task_paths(thread_id)
        for task_id in sorted({task_id for task_id, _, _ in wanted - held}):
            task_writes = [
                (channel, value)
                for t, channel, value in there.pending_writes or ()
                if t == task_id and channel in WRITES_IDX_MAP
            ]
            saver.put_writes(
                there.config, task_writes, task_id, paths.get((ns, checkpoint_id, task_id), "")
            )
            tally.task_writes()
            put = True
    return put


def _special_writes(saver: SQLSaver, found: CheckpointTuple) -> set[tuple[str, str, bytes]]:
    return {
        (task_id, channel, saver.serde.dumps_typed(value)[1])
        for task_id, channel, value in found.pending_writes or ()
        if channel in WRITES_IDX_MAP
    }


def _oldest_first(
    theirs: BaseCheckpointSaver[Any],
    thread_id: str,
    todo: set[tuple[str, str]],
    here: set[tuple[str, str]],
) -> Iterator[CheckpointTuple]:
    """The checkpoints of ``todo``, oldest first, each read alone; one whose parent is not in
    ``todo`` comes after that parent (its versions decide which channels changed since)."""
    done: set[tuple[str, str]] = set()
    for ns, checkpoint_id in sorted(todo, key=lambda key: key[1]):
        conf = {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}
        found = theirs.get_tuple({"configurable": conf})
        if found is None:  # gone from the source since it was counted
            continue
        if found.parent_config is not None and (ns, checkpoint_id) not in here:
            parent = (ns, found.parent_config["configurable"]["checkpoint_id"])
            before = None if parent in done else theirs.get_tuple(found.parent_config)
            if before is not None:
                done.add(parent)
                yield before
        done.add((ns, checkpoint_id))
        yield found


def _coordinates(found: CheckpointTuple) -> tuple[str, str]:
    conf = found.config["configurable"]
    return conf.get("checkpoint_ns", ""), conf["checkpoint_id"]


def _put_checkpoint(
    saver: SQLSaver,
    thread_id: str,
    found: CheckpointTuple,
    versions: dict[tuple[str, str], Versions],
) -> None:
    """Put ``found`` under its own id and parent, with the blobs of the channels that
    changed since the parent (all of them when the parent is not in the source)."""
    ns, _ = _coordinates(found)
    conf: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ns}
    base: Versions = ({}, frozenset())
    if found.parent_config is not None:
        parent = found.parent_config["configurable"]["checkpoint_id"]
        conf["checkpoint_id"] = parent
        base = versions.get((ns, parent), base)
    values = found.checkpoint["channel_values"]
    changed = {
        channel: version
        for channel, version in found.checkpoint["channel_versions"].items()
        if base[0].get(channel) != version or (channel in values and channel not in base[1])
    }
    saver.put({"configurable": conf}, found.checkpoint, found.metadata, changed)


#: Seconds before a run's start its record reaches: an item written as it began may commit late.
MARGIN = 60.0


def _copy_items(src: sql.Source, store: AgentMemoryStore, tally: _Tally) -> None:
    store.setup()
    tally.progress.started["items"] = time.monotonic()
    mark = "import_items:" + hashlib.sha256(src.where.encode()).hexdigest()[:32]
    copied_until = store.run_plan(sql.read_mark_plan(store.dialect, mark))
    began = src.clock() - MARGIN
    for page in src.items(time.time()):
        _put_items(store, page, copied_until, tally)
    if not tally.report.items_failed:  # else the next run would take them for deleted here
        store.run_plan(sql.record_mark_plan(store.dialect, mark, began))


def _put_items(
    store: AgentMemoryStore, page: list[sql.SourceItem], copied_until: float | None, tally: _Tally
) -> None:
    """When the destination refuses an item, the others go one by one."""
    live = [i for i in page if i.expires_at is None or i.expires_at > time.time()]
    report = tally.report
    try:
        outcomes = _put_newer(store, live, copied_until)
    except REFUSED:
        outcomes = []
        for i in live:
            try:
                outcomes += _put_newer(store, [i], copied_until)
            except REFUSED as exc:
                failed = {"namespace": list(i.namespace), "key": i.key, "reason": str(exc)}
                report.items_failed.append(failed)
    report.items_unchanged += outcomes.count("unchanged")
    report.items_refused += outcomes.count("refused")
    tally.items(outcomes.count("copied"), len(page))


def _put_newer(
    store: AgentMemoryStore, live: list[sql.SourceItem], copied_until: float | None
) -> list[str]:
    """``"copied"``, ``"unchanged"`` (here, maybe changed since) or ``"refused"`` (deleted)."""
    from langgraph.store.base import GetOp, Item

    here = store.batch([GetOp(i.namespace, i.key, refresh_ttl=False) for i in live])
    outcomes = []
    for i, found in zip(live, here, strict=True):
        if found is None and copied_until is not None and i.updated_at <= copied_until:
            outcomes.append("refused")
        elif isinstance(found, Item) and i.updated_at <= found.updated_at.timestamp() + STAMP:
            outcomes.append("unchanged")
        else:
            outcomes.append("copied")
    _put_stamped(store, [i for i, o in zip(live, outcomes, strict=True) if o == "copied"])
    return outcomes


def _put_stamped(store: AgentMemoryStore, todo: list[sql.SourceItem]) -> None:
    from langgraph.store.base import PutOp

    from langgraph_checkpoint_agent_memory.db.store import ns_text

    if not todo:
        return
    default = (store.ttl_config or {}).get("default_ttl")
    ttls = [default if i.ttl_minutes is None else i.ttl_minutes for i in todo]
    store.batch(
        [PutOp(i.namespace, i.key, i.value, ttl=t) for i, t in zip(todo, ttls, strict=True)]
    )
    prefixes = [ns_text(i.namespace) for i in todo]
    stamps = [
        {
            "shard": store.statements.shard(prefix),
            "prefix": prefix,
            "key": i.key,
            "created_at": i.created_at,
            "updated_at": i.updated_at,
            "expires_at": i.expires_at,
        }
        for i, prefix in zip(todo, prefixes, strict=True)
    ]
    store.run_plan(sql.stamp_items_plan(store.dialect, stamps))


#: How far apart two stamps of one instant may read (a database's time resolution).
STAMP = 1e-3
