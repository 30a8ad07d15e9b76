"""``agent-memory import``: :func:`~..from_langgraph.import_from_langgraph` from the command
line."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from langgraph_checkpoint_agent_memory import errors
from langgraph_checkpoint_agent_memory.cli.common import count_argument, emit, resolve_url
from langgraph_checkpoint_agent_memory.cli.progress import progress
from langgraph_checkpoint_agent_memory.db import url as urls


def _cmd_import(args: argparse.Namespace) -> int:
    from langgraph_checkpoint_agent_memory import from_langgraph

    url = resolve_url(args.url)
    with progress(args, "importing threads", "threads") as threads:
        checkpoints = threads.part("  copying checkpoints", "checkpoints")
        items = threads.part("importing store items", "items")

        def show(done: from_langgraph.ImportProgress) -> None:
            if done.threads_total is not None:  # and within a long thread, its checkpoints
                threads(done.threads_done, done.threads_total)
                checkpoints(done.checkpoints, None)
            if done.items_total is not None:
                items(done.items_done, done.items_total)

        try:
            report = from_langgraph.import_from_langgraph(
                args.source,
                url,
                threads=not args.items_only,
                items=not args.threads_only,
                ttl_seconds=args.ttl_seconds,
                serde=_serde(args.serde),
                on_progress=show,
            )
        except errors.DatabaseNotFoundError as exc:  # the source: `migrate` would not make it
            raise errors.ConfigurationError(f"--from: {exc}") from None
        except errors.DatabaseUnavailableError as exc:  # status 1, as for --url; named as above
            if urls.mask_url(args.source) in str(exc):
                raise errors.DatabaseUnavailableError(f"--from: {exc}") from None
            raise

    def left_out(n: int) -> str:
        return f", {n} deleted here, left out" if n else ""

    said = (
        f"threads: {report.threads} ({report.threads_copied} copied, "
        f"{report.threads_unchanged} already here{left_out(len(report.threads_refused))}); "
        f"{report.checkpoints} checkpoint(s), {report.writes} task write set(s); "
        f"store items: {report.items} copied, {report.items_unchanged} already here"
        f"{left_out(report.items_refused)}; {report.seconds:.1f} s"
    )
    emit(args, report.as_dict(), lambda out: out.print(said))
    if failed := _failures(report):
        print(f"agent-memory import: error: {failed}", file=sys.stderr)
        return 1
    return 0


def _serde(name: str | None) -> Any:
    """``--serde aes``: ``EncryptedSerializer.from_pycryptodome_aes()`` (``LANGGRAPH_AES_KEY``)."""
    if name is None:
        return None
    from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

    try:
        return EncryptedSerializer.from_pycryptodome_aes()
    except ImportError:
        raise errors.ConfigurationError(
            "--serde aes needs pycryptodome: pip install pycryptodome"
        ) from None
    except ValueError as exc:
        raise errors.ConfigurationError(f"--serde aes: {exc}") from None


def _failures(report: Any) -> str:
    named = [f"thread {_short(f['thread_id'])} ({f['reason']})" for f in report.threads_failed]
    named += [
        f"item {_short('.'.join(f['namespace']) + '/' + f['key'])} ({f['reason']})"
        for f in report.items_failed
    ]
    if not named:
        return ""
    more = f"; and {len(named) - 3} more (--json lists them)" if len(named) > 3 else ""
    return (
        f"{len(report.threads_failed)} thread(s) and {len(report.items_failed)} store item(s) "
        f"could not be copied, the others were: {'; '.join(named[:3])}{more}"
    )


def _short(text: str) -> str:
    return repr(text if len(text) <= 40 else text[:37] + "...")


def add_command(command: Any) -> None:
    from langgraph_checkpoint_agent_memory.cli.common import url_option

    found = command(
        "import",
        "copy threads and store items from LangGraph's own savers and stores (SqliteSaver, "
        "PostgresSaver, SqliteStore, PostgresStore); run again to catch up",
        _cmd_import,
    )
    found.add_argument(
        "--from",
        dest="source",
        required=True,
        type=url_option("--from"),
        metavar="URL",
        help="the database LangGraph wrote (a SQLite file or postgresql://...); only read",
    )
    found.add_argument(
        "--ttl-seconds",
        type=count_argument(0),
        metavar="N",
        help="the threads' idle TTL, as the application sets it (default: the declared "
        "config.checkpointer.ttl_seconds, else none)",
    )
    found.add_argument(
        "--serde",
        choices=["aes"],
        help="the serializer the application gave LangGraph's saver, when not its default: "
        "aes, LangGraph's EncryptedSerializer.from_pycryptodome_aes() with the key in "
        "LANGGRAPH_AES_KEY",
    )
    only = found.add_mutually_exclusive_group()
    only.add_argument("--threads-only", action="store_true", help="copy no store items")
    only.add_argument("--items-only", action="store_true", help="copy no threads")
