"""What every ``agent-memory`` command shares: the URL, output, opening a memory, a scope."""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, NoReturn

from langgraph_checkpoint_agent_memory.db import url as urls
from langgraph_checkpoint_agent_memory.errors import AgentMemoryError, ConfigurationError

if TYPE_CHECKING:
    from langgraph_checkpoint_agent_memory.memory import AgentMemory, Scope


class CommandError(AgentMemoryError):
    """A command could not do what was asked (exit status 1)."""


default_url = urls.default_url


def resolve_url(given: str | None) -> str:
    """``--url``, else ``AGENT_MEMORY_URL`` read as ``--url`` is, else the default file."""
    if given is not None:
        return given
    env = os.environ.get(urls.URL_ENV)
    return urls.as_url(env, urls.URL_ENV) if env else default_url()


# -- argument types: a bad value exits with status 2 and one line, before anything runs ----


class Parser(argparse.ArgumentParser):
    """Usage errors are one line, ``agent-memory CMD: error: ...``, with exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def url_argument(text: str, flag: str = "--url") -> str:
    """A database URL, or a SQLite file's path; an empty one is refused, not defaulted."""
    if not text.strip():
        raise argparse.ArgumentTypeError("empty: give a database URL or a SQLite file's path")
    try:
        return urls.as_url(text, flag)
    except ConfigurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def url_option(flag: str) -> Callable[[str], str]:
    """:func:`url_argument` for another option than ``--url``, named in its errors."""
    return functools.partial(url_argument, flag=flag)


def _number(text: str, kind: Callable[[str], float]) -> float:
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None


#: The largest count a command takes: a 4-byte INTEGER, which every backend's LIMIT holds.
MOST = 2**31 - 1


def count_argument(least: int) -> Callable[[str], int]:
    """A whole number from ``least`` to :data:`MOST`."""

    def parse(text: str) -> int:
        value = int(_number(text, int))
        if not least <= value <= MOST:
            raise argparse.ArgumentTypeError(
                f"must be a whole number from {least} to {MOST}, not {text}"
            )
        return value

    parse.__name__ = "whole number"  # argparse names the type in its message
    return parse


def seconds_argument(text: str) -> float:
    """A number of seconds above 0 (an interval a loop waits: 0 or less would spin)."""
    value = _number(text, float)
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0, not {text}")
    return value


def retention(args: argparse.Namespace) -> dict[str, Any]:
    """The saver's ``strategy`` and ``keep_last`` from ``--strategy`` and ``--keep-last``; a
    ``--keep-last`` that ``delete`` would ignore (every expired thread deleted whole) is
    refused."""
    if args.keep_last is not None and args.strategy != "keep_latest":
        raise ConfigurationError("--keep-last applies only with --strategy keep_latest")
    return {"strategy": args.strategy, "keep_last": args.keep_last or 1}


def console(args: argparse.Namespace) -> Any:
    from rich.console import Console

    # data is shown as stored: "[x]" or ":smile:" in a fact stays (only the demo's is styled)
    demo = args.command == "demo"
    return Console(highlight=False, soft_wrap=not demo, markup=demo, emoji=demo)


def emit(args: argparse.Namespace, data: Any, render: Callable[[Any], None]) -> None:
    if getattr(args, "json", False):
        print(json.dumps(data, indent=2, default=str, ensure_ascii=False))
    else:
        render(console(args))


def existing(url: str, mode: str = "rw") -> dict[str, Any]:
    """Options that open ``url`` only if it exists (SQLite refuses a missing file: no race),
    read only when ``mode`` or the URL's own ``?mode=ro`` says so."""
    target = urls.parse(url)
    return {"mode": urls.sqlite_mode(target, mode)} if target.kind == "sqlite" else {}


def installed(url: str) -> set[str]:
    """The components the migration ledger at ``url`` lists; none: :class:`CommandError`."""
    from langgraph_checkpoint_agent_memory.db.migrations import installed_plan
    from langgraph_checkpoint_agent_memory.factory import create_store

    # read only: a file of another program is not even switched to WAL
    with create_store(url, auto_setup=False, **existing(url, "ro")) as probe:
        found: set[str] = probe.run_plan(installed_plan(probe.dialect))
        if "keys" in found:
            check_master_key(probe)
    if not found:
        raise no_memory(url)
    return found


def check_master_key(store: Any) -> None:
    """Refuse a master key that cannot unwrap the data keys ``store``'s database holds (a
    :class:`DecryptionError`), as ``setup()`` does, before anything is read or written."""
    if store.key_check is not None:
        store.run_plan(store.key_check())


def no_memory(url: str) -> CommandError:
    return CommandError(
        f"no agent memory database at {urls.mask_url(url)}: `agent-memory migrate --url "
        "URL` creates one, as does the first run of an app that uses it"
    )


@contextmanager
def open_memory(
    args: argparse.Namespace,
    extractor: Any = None,
    *,
    reads: bool = False,
    checkpointer_options: dict[str, Any] | None = None,
    **options: Any,
) -> Iterator[Any]:
    """The memory at ``--url``; with ``reads`` agent memory's tables must exist, none migrate."""
    from langgraph_checkpoint_agent_memory.factory import create_checkpointer, create_store
    from langgraph_checkpoint_agent_memory.memory import AgentMemory, Scope

    if getattr(args, "scope", None):  # a malformed scope is a usage error, whatever the URL
        Scope.parse(args.scope)
    url = resolve_url(args.url)
    if "memory" not in installed(url) and reads:
        raise no_memory(url)
    # a read leaves the schema as it finds it (a read-only file or replica stays readable)
    store = create_store(url, auto_setup=not reads, **existing(url))
    checkpointer = create_checkpointer(
        url=url, auto_setup=not reads, **existing(url), **(checkpointer_options or {})
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


def stored(memory: AgentMemory[Any], scope: Scope) -> bool:
    from langgraph_checkpoint_agent_memory.memory import Scope

    return any(scope.covers(Scope.parse(k)) for k in memory.known_scopes())


def unknown_scope(scope: Scope) -> CommandError:
    return CommandError(
        f"unknown scope {scope.key}: no memory is stored for it "
        "(`agent-memory scopes` lists the scopes)"
    )


def known_scope(memory: AgentMemory[Any], text: str, *, must_exist: bool = True) -> Scope:
    from langgraph_checkpoint_agent_memory.memory import Scope

    scope = Scope.parse(text)
    if must_exist and not stored(memory, scope):
        raise unknown_scope(scope)
    return scope


def extractor(args: argparse.Namespace) -> Any:
    if not getattr(args, "model", None):
        return None
    from langgraph_checkpoint_agent_memory.memory.extract import chat_model

    return chat_model(args.model)


def fact_dict(f: Any) -> dict[str, Any]:
    return {"key": f.key, **asdict(f)}
