"""What every ``agent-memory`` command shares: the URL, the console, JSON output,
progress, the migration ledger, opening a memory and reading a scope."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

from langgraph_checkpoint_agent_memory.db import url as urls
from langgraph_checkpoint_agent_memory.errors import AgentMemoryError


class CommandError(AgentMemoryError):
    """A command could not do what was asked (exit status 1)."""


data_dir = urls.data_dir
default_url = urls.default_url


def resolve_url(given: str | None) -> str:
    return given or os.environ.get(urls.URL_ENV) or default_url()


def _console(args: argparse.Namespace) -> Any:
    from rich.console import Console

    return Console(highlight=False, soft_wrap=args.command != "demo")


def _emit(args: argparse.Namespace, data: Any, render: Callable[[Any], None]) -> None:
    if getattr(args, "json", False):
        print(json.dumps(data, indent=2, default=str, ensure_ascii=False))
    else:
        render(_console(args))


@contextmanager
def _progress(args: argparse.Namespace, description: str, total: int | None) -> Iterator[Any]:
    """A progress bar on a terminal; silent when piped or with --json."""
    from rich.progress import Progress

    quiet = getattr(args, "json", False) or not sys.stderr.isatty()
    with Progress(disable=quiet, transient=True) as progress:
        task = progress.add_task(description, total=total)
        yield lambda n=1: progress.advance(task, n)


def _installed(url: str) -> set[str]:
    """The components (``checkpoint``, ``store``, ``memory``) whose tables the database at
    ``url`` holds, read from its migration ledger; a database that does not exist, or that
    this package never set up, is an error. Nothing is created or migrated."""
    from langgraph_checkpoint_agent_memory.db.migrations import installed_plan
    from langgraph_checkpoint_agent_memory.factory import create_store

    missing = CommandError(
        f"no agent memory database at {urls.mask_url(url)}: `agent-memory migrate --url "
        "URL` creates one, as does the first run of an app that uses it"
    )
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).is_file():
        raise missing
    probe = create_store(url, auto_setup=False)  # reads the ledger, creates nothing
    try:
        found: set[str] = probe.run_plan(installed_plan(probe.dialect))
    finally:
        probe.close()
    if not found:
        raise missing
    return found


@contextmanager
def _memory(
    args: argparse.Namespace,
    extractor: Any = None,
    *,
    reads: bool = False,
    checkpointer_options: dict[str, Any] | None = None,
    **options: Any,
) -> Iterator[Any]:
    """The memory at ``--url``. With ``reads`` (a command that only reads), a database that
    does not exist or holds no agent memory is an error, never created."""
    from langgraph_checkpoint_agent_memory.factory import create_checkpointer, create_store
    from langgraph_checkpoint_agent_memory.memory import AgentMemory

    if getattr(args, "scope", None):  # a malformed scope is a usage error, whatever the URL
        from langgraph_checkpoint_agent_memory.memory import Scope

        Scope.parse(args.scope)
    url = resolve_url(args.url)
    if reads and "memory" not in _installed(url):
        raise CommandError(
            f"no agent memory database at {urls.mask_url(url)}: `agent-memory migrate --url "
            "URL` creates one, as does the first run of an app that uses it"
        )
    # a read leaves the schema as it finds it (a read-only file or replica stays readable)
    store = create_store(url, auto_setup=not reads)
    checkpointer = create_checkpointer(
        url=url, auto_setup=not reads, **(checkpointer_options or {})
    )
    try:
        memory = AgentMemory(store, extractor=extractor, checkpointer=checkpointer, **options)
        if not reads:
            memory.setup()
        yield memory
    finally:
        close = getattr(checkpointer, "close", None)
        if callable(close):
            close()
        store.close()


def _scope(memory: Any, text: str, *, must_exist: bool = True) -> Any:
    from langgraph_checkpoint_agent_memory.memory import Scope

    scope = Scope.parse(text)
    if must_exist:
        known = memory.known_scopes()
        if not any(scope.covers(Scope.parse(k)) for k in known):
            raise CommandError(
                f"unknown scope {scope.key}: no memory is stored for it "
                "(`agent-memory scopes` lists the scopes)"
            )
    return scope


def _extractor(args: argparse.Namespace) -> Any:
    if not getattr(args, "model", None):
        return None
    from langgraph_checkpoint_agent_memory.memory.extract import chat_model

    return chat_model(args.model)


def _fact_dict(f: Any) -> dict[str, Any]:
    return {"key": f.key, **asdict(f)}
