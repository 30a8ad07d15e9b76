"""``agent-memory demo``: a scripted month in the life of an agent's memory.

A compiled graph (``inject_memory -> agent -> record_memory``) with ``create_checkpointer``
and the memory store on one database. The demo's clock starts 30 days ago and moves forward
between sessions (:data:`SESSIONS`), so consolidation, supersession, decay and the TTL all
happen in a few seconds. The demo writes only to a database it created and marked as its own
(:func:`claim_database`), never to ``AGENT_MEMORY_URL``'s, which may hold an app's memory.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.panel import Panel
from rich.table import Table

from langgraph_checkpoint_agent_memory.db import url as urls
from langgraph_checkpoint_agent_memory.db.marks import holds_tables_plan, mark_plan, write_mark_plan
from langgraph_checkpoint_agent_memory.errors import ConfigurationError, DatabaseUnavailableError
from langgraph_checkpoint_agent_memory.factory import create_checkpointer, create_store
from langgraph_checkpoint_agent_memory.memory import AgentMemory, Fact, RuleBasedExtractor
from langgraph_checkpoint_agent_memory.memory.extract import ChatModelExtractor
from langgraph_checkpoint_agent_memory.memory.nodes import CONTEXT_MESSAGE_ID
from langgraph_checkpoint_agent_memory.memory.recall import day

#: The demo's own database when ``--url`` is not given: a file in the current folder.
DEMO_URL = f"sqlite:///{urls.DEMO_FILE}"
#: The mark the demo writes into a database it creates (``am_settings.created_by``).
DEMO_MARK = "agent-memory demo"
DAY = 86400.0
USER = "alice"
SESSIONS: list[tuple[float, str, list[str]]] = [
    (
        0,
        "alice-1",
        [
            "Hi! My name is Alice. I live in Berlin and I work at ACME.",
            "My favorite snack is pretzels.",
        ],
    ),
    (20, "alice-2", ["Good news: I moved to Munich. I still work at ACME."]),
]
SCRIPTED_REPLIES = [
    "Nice to meet you, Alice! How can I help with your procurement requests?",
    "Noted, pretzels it is.",
    "Congratulations on the move! I have updated your delivery city.",
]


@dataclass
class DemoClock:
    """Real time, shifted: the demo starts 30 days ago and jumps forward."""

    offset: float

    def __call__(self) -> float:
        return time.time() + self.offset

    def advance_to(self, days_after_start: float, start: float) -> None:
        self.offset = start + days_after_start * DAY - time.time()


def run_demo(
    url: str = DEMO_URL,
    *,
    model: str | None = None,
    console: Console | None = None,
    reset: bool = False,
) -> dict[str, Any]:
    """Run the scripted sessions against ``url``; print what happens; return a summary.

    ``url`` must be the demo's own database (:func:`claim_database`): a new SQLite file or an empty
    database is created and marked; any other is refused before anything is written. ``model`` is
    set up first, and ``reset`` (:func:`reset_database`) done next, so that a model that cannot be
    used leaves the database as it was, or absent. The URL is printed with its password masked.

    Raises:
        ConfigurationError: ``url`` names a database the demo did not create, or ``model``
            cannot be used.
    """
    out = console or Console()
    agent_model, extractor = _models(model, out)
    if reset:
        reset_database(url)
    claim_database(url)
    start = time.time() - 30 * DAY
    clock = DemoClock(start - time.time())
    shown = urls.mask_url(url)
    out.print(f"Memory lives in [bold]{shown}[/], the demo's own database\n")

    checkpointer: Any = create_checkpointer(14 * 24 * 3600, url=url, clock=clock)
    store = create_store(url, clock=clock)
    memory = AgentMemory(
        store,
        extractor=extractor,
        checkpointer=checkpointer,
        clock=clock,
        scope_keys=("user_id",),
        decay_rate=0.9,
        decay_threshold=0.2,
        reinforce_every_seconds=0,
    )
    scope = {"user_id": USER}
    memory.erase(scope)  # the demo's own user starts afresh on every run

    app, seen = memory_graph(memory, agent_model, checkpointer=checkpointer)

    kinds = ("sessions", "episodes", "superseded", "decayed", "evicted")
    summary: dict[str, Any] = {kind: [] for kind in kinds}
    for number, (at, thread, turns) in enumerate(SESSIONS, 1):
        clock.advance_to(at, start)
        out.rule(f"Session {number} · {day(clock())} · thread {thread}")
        config = {"configurable": {"thread_id": thread, "user_id": USER}}
        for text in turns:
            result = app.invoke({"messages": [("user", text)]}, config)
            injected = seen.get("context", "")
            title = "injected by inject_memory"
            out.print(
                Panel(injected or "(nothing yet)", title=title, border_style="cyan", expand=False)
            )
            out.print(f"[bold]Alice:[/] {text}")
            out.print(f"[bold]Agent:[/] {result['messages'][-1].content}\n")
            summary["sessions"].append({"thread": thread, "said": text, "injected": injected})
        out.print(_consolidate(memory, scope, summary))
        out.print(_episodes(memory, scope, thread, summary))

    out.rule("A fact's history")
    out.print(history_table(memory.history(scope, "city"), "city"))

    clock.advance_to(29, start)
    out.rule(f"Day 29 · {day(clock())}: decay and the TTL")
    out.print(_decay(memory, scope, summary))
    summary["evicted"] = sorted(checkpointer.sweep())
    out.print(_ttl(start, summary["evicted"]))

    out.rule("What a new session would receive")
    context = memory.build_context(scope, "Where should my next order be delivered?")
    summary["context"] = context
    out.print(Panel(context or "(nothing)", title="build_context", border_style="cyan"))
    out.print(
        "\nExplore it: [bold]agent-memory facts user=alice --all[/], "
        f"[bold]agent-memory episodes user=alice[/], [bold]agent-memory scopes[/] (each with "
        f"--url {shown})"
    )
    checkpointer.close()
    store.close()
    return summary


def claim_database(url: str) -> None:
    """Make sure ``url`` is the demo's own database: one it marked before; or a SQLite file
    that does not exist or a database that holds no table, which it sets up and marks now.

    Raises:
        ConfigurationError: Any other database (an app's, a file that is not a database): it
            is refused before anything is written to it.
        DatabaseUnavailableError: The database cannot be reached, or the file not created.
    """
    target = urls.parse(url)
    if target.kind == "hana":
        raise ConfigurationError(
            f"{target.masked()}: the demo runs on a SQLite file or a PostgreSQL database"
        )
    made: list[Path] = []
    if target.kind == "sqlite":
        made = _create_file(Path(target.options["path"]), target.masked())
    try:
        mark, holds_tables = _inspect(url)
        if mark == DEMO_MARK:
            return
        if holds_tables:
            raise _not_the_demos(target.masked(), "it holds tables and no mark of the demo")
        # "rw" never creates a SQLite file: the demo made its own above
        mode: dict[str, Any] = {"mode": "rw"} if target.kind == "sqlite" else {}
        with create_store(url, **mode) as store:
            store.setup()  # the store's tables, with the settings table that keeps the mark
            store.run_plan(write_mark_plan(store.dialect, DEMO_MARK))
    except BaseException:  # a setting refused, say: what was made for it goes again
        _remove(made)
        raise


def reset_database(url: str) -> bool:
    """``--reset``: delete the demo's SQLite file, if it is the demo's; ``True`` if deleted.

    On PostgreSQL nothing is deleted: every run erases the demo's user first.

    Raises:
        ConfigurationError: The file is not the demo's (it is left as it is).
    """
    target = urls.parse(url)
    path = Path(target.options["path"]) if target.kind == "sqlite" else None
    if path is None or not path.exists():
        return False
    mark, _ = _inspect(url)
    if mark != DEMO_MARK:
        raise _not_the_demos(target.masked(), "it has no mark of the demo; nothing was deleted")
    _unlink_sqlite(path)
    return True


def _unlink_sqlite(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def _create_file(path: Path, where: str) -> list[Path]:
    """Create the file (never over another) and its folders; what was made, outermost first."""
    made = [folder for folder in reversed(path.parents) if not folder.exists()]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(exist_ok=False)
    except FileExistsError:
        return made
    except OSError as exc:
        raise DatabaseUnavailableError(
            f"cannot create the SQLite database {where}: {exc.strerror or exc}"
        ) from None
    return [*made, path]


def _remove(made: list[Path]) -> None:
    """Remove what :func:`_create_file` created (a folder only while it is empty)."""
    for path in reversed(made):
        if path.is_dir():
            with contextlib.suppress(OSError):  # not empty: something else was put there
                path.rmdir()
        else:
            _unlink_sqlite(path)


def _inspect(url: str) -> tuple[str | None, bool]:
    """The database's mark and whether it holds any table, read without changing it."""
    target = urls.parse(url)
    options: dict[str, Any] = {"mode": "ro"} if target.kind == "sqlite" else {}
    with create_store(url, auto_setup=False, **options) as probe:
        try:
            holds_tables = probe.db.run(holds_tables_plan(probe.dialect))
            mark = probe.db.run(mark_plan(probe.dialect)) if holds_tables else None
        except DatabaseUnavailableError as exc:
            if target.kind != "sqlite":
                raise  # an unreachable server is not a refusal
            raise _not_the_demos(target.masked(), str(exc.__cause__ or exc)) from None
    return mark, holds_tables


def _not_the_demos(where: str, why: str) -> ConfigurationError:
    return ConfigurationError(
        f"{where} is not a database the demo created ({why}): the demo writes only to its "
        f"own; leave --url out (it uses ./{urls.DEMO_FILE}) or name a new file"
    )


def _models(model: str | None, out: Console) -> tuple[Any, Any]:
    """The agent's chat model and the extractor: ``model``'s, or the scripted ones."""
    from langchain_core.language_models.fake_chat_models import FakeListChatModel

    if model:
        from langgraph_checkpoint_agent_memory.memory.extract import chat_model

        chat = chat_model(model)
        out.print(f"Using [bold]{model}[/] for the agent and the extractor.")
        return chat, ChatModelExtractor(chat)
    out.print(
        "No model configured (--model provider:name): using a scripted agent and the "
        "rule-based extractor."
    )
    return FakeListChatModel(responses=SCRIPTED_REPLIES), RuleBasedExtractor()


def _consolidate(memory: AgentMemory[Any], scope: dict[str, str], summary: dict[str, Any]) -> Table:
    """Consolidate what the session recorded; a table of the facts it changed."""
    before = {f.key: f for f in memory.facts(scope)}
    report = memory.consolidate()
    after = {f.key: f for f in memory.facts(scope)}
    title = f"Consolidation: {report.episodes} episode(s) in {len(report.jobs)} job(s)"
    table = Table("change", "attribute", "value", "statement", title=title)
    for job in report.jobs:
        for key in job.added:
            f = after[key]
            table.add_row("[green]added[/]", f.attribute, f.value, f.statement)
        for key in job.confirmed:
            f = after[key]
            table.add_row("[blue]confirmed[/]", f.attribute, f.value, f"{f.confirmations}x")
        for _, key in job.superseded:
            f, old = after[key], before.get(key)
            was = old.value if old else None
            table.add_row(
                "[yellow]superseded[/]", f.attribute, f"{was or '?'} -> {f.value}", f.statement
            )
            summary["superseded"].append({"attribute": f.attribute, "old": was, "new": f.value})
    return table


def _episodes(
    memory: AgentMemory[Any], scope: dict[str, str], thread: str, summary: dict[str, Any]
) -> Table:
    """A table of the episodes of ``thread``, each with its own summary."""
    table = Table("when", "the user said", "summary", title="Each episode and its own summary")
    for e in memory.episodes(scope):
        if e.thread_id != thread:
            continue
        said = next((m["content"] for m in e.messages if m.get("role") == "user"), "")
        table.add_row(day(e.occurred_at), said, e.summary or "")
        summary["episodes"].append({"thread": thread, "said": said, "summary": e.summary})
    return table


def _decay(memory: AgentMemory[Any], scope: dict[str, str], summary: dict[str, Any]) -> Table:
    """Run decay; a table of the facts it deleted and those it kept."""
    before = {f.attribute: f for f in memory.facts(scope)}
    episodes = len(memory.episodes(scope))
    removed = memory.decay()
    kept = memory.facts(scope)
    left = {f.attribute for f in kept}
    gone = [f for a, f in before.items() if a not in left]
    summary["decayed"] = [f.attribute for f in gone]
    # decay deletes episodes and past values too: the title counts each kind it deleted
    episodes -= len(memory.episodes(scope))
    deleted = [f"{len(gone)} fact(s)", f"{episodes} episode(s)"]
    if past_values := removed - len(gone) - episodes:
        deleted.append(f"{past_values} past value(s)")
    rate, threshold = memory.settings.decay_rate, memory.settings.decay_threshold
    title = f"Decay x{rate}/day, threshold {threshold}: deleted {', '.join(deleted)}"
    table = Table("fact", "last confirmed", "now", title=title)
    table.caption = "importance fades per day since a fact was last confirmed or recalled"
    for f in gone:
        table.add_row(f.text(), day(f.last_confirmed), "[red]deleted[/]")
    for f in kept:
        table.add_row(f.text(), day(f.last_confirmed), "kept")
    return table


def _ttl(start: float, evicted: list[str]) -> Table:
    """A table of the demo's threads, evicted or kept by the checkpointer's TTL."""
    table = Table("thread", "last active", "state", title="Checkpointer TTL: 14 days idle")
    for at, thread, _ in SESSIONS:
        state = "[red]evicted[/]" if thread in evicted else "kept"
        table.add_row(thread, day(start + at * DAY), state)
    return table


def memory_graph(
    memory: AgentMemory[Any], model: Any, *, checkpointer: Any
) -> tuple[Any, dict[str, str]]:
    """``inject_memory -> agent -> record_memory`` compiled, and the ``"context"`` it last saw."""
    from langchain_core.messages import SystemMessage
    from langgraph.graph import START, MessagesState, StateGraph

    seen: dict[str, str] = {}

    def agent(state: MessagesState) -> dict[str, Any]:
        context = [
            m
            for m in state["messages"]
            if isinstance(m, SystemMessage) and m.id == CONTEXT_MESSAGE_ID
        ]
        seen["context"] = str(context[0].content) if context else ""
        return {"messages": [model.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("inject_memory", memory.inject_node)
    graph.add_node("agent", agent)
    graph.add_node("record_memory", memory.record_node)
    graph.add_edge(START, "inject_memory")
    graph.add_edge("inject_memory", "agent")
    graph.add_edge("agent", "record_memory")
    return graph.compile(checkpointer=checkpointer, store=memory.store), seen


def history_table(versions: list[Fact], attribute: str) -> Table:
    columns = ("value", "valid from", "valid to", "superseded by")
    table = Table(*columns, title=f"history of {attribute!r}")
    for f in versions:
        table.add_row(
            f.value,
            day(f.valid_from),
            day(f.valid_to) if f.valid_to is not None else "[green]current[/]",
            f.superseded_by or "",
        )
    return table
