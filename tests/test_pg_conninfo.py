"""A PostgreSQL connection string that libpq refuses is the package's ConfigurationError at
once, naming what is wrong: a parameter libpq does not know when the saver or store is
created; a value it refuses (a port out of range, an unknown sslmode, a connect_timeout
that is no number) at the first connect, which is not retried for ``connect_timeout``
seconds as if the server were down."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

psycopg = pytest.importorskip("psycopg")

from langgraph_checkpoint_agent_memory import (  # noqa: E402
    ConfigurationError,
    PostgresSaver,
    create_checkpointer,
    create_store,
)
from langgraph_checkpoint_agent_memory.db.postgres import (  # noqa: E402
    PostgresDatabase,
)
from tests.helpers import config_for  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

#: The parameters libpq knows, and this package's own (taken out before libpq sees them).
KNOWN = {d.keyword.decode() for d in psycopg.pq.Conninfo.get_defaults()} | {
    "prepare_threshold",
    "schema",
}


@settings(max_examples=40, deadline=None)
@given(name=st.from_regex(r"[a-z][a-z_]{1,20}", fullmatch=True).filter(lambda n: n not in KNOWN))
def test_an_unknown_parameter_is_refused_when_created(name: str) -> None:
    url = f"postgresql://agent:s3cret@127.0.0.1:9/memory?sslmode=disable&{name}=1"
    for create in (
        lambda: create_checkpointer(url=url),
        lambda: create_store(url),
        lambda: PostgresSaver(url),
        lambda: PostgresSaver(f"host=127.0.0.1 port=9 dbname=memory {name}=1"),
    ):
        with pytest.raises(ConfigurationError, match=re.escape(f'"{name}"')) as raised:
            create()
        assert "s3cret" not in str(raised.value) and "\n" not in str(raised.value)


def _with(url: str, parameter: str) -> str:
    """``url`` with a bad ``parameter`` (``port=99999`` replaces the port)."""
    if parameter == "port=99999":
        return re.sub(r":\d+/", ":99999/", url, count=1)
    return f"{url}{'&' if '?' in url else '?'}{parameter}"


BAD_VALUES = [
    ("port=99999", "99999"),
    ("sslmode=bogus", "bogus"),
    ("connect_timeout=abc", "abc"),
    ("keepalives=abc", "abc"),
    ("target_session_attrs=bogus", "bogus"),
]


@pytest.mark.parametrize(("parameter", "value"), BAD_VALUES, ids=[p for p, _ in BAD_VALUES])
def test_a_value_libpq_refuses_is_a_configuration_error_at_once(
    pg_url: str, parameter: str, value: str
) -> None:
    url = _with(pg_url, parameter)
    name = parameter.split("=")[0]
    saver = PostgresSaver(url)
    with pytest.raises(ConfigurationError, match=f"{name}.*{value}|{value}.*{name}"):
        saver.get_tuple(config_for("t"))
    db = saver.db
    assert isinstance(db, PostgresDatabase)
    assert db._sync is None  # no pool was opened to retry it
    saver.close()


@pytest.mark.parametrize(("parameter", "value"), BAD_VALUES[:3], ids=[p for p, _ in BAD_VALUES[:3]])
async def test_the_async_api_refuses_it_alike(pg_url: str, parameter: str, value: str) -> None:
    saver = PostgresSaver(_with(pg_url, parameter))
    with pytest.raises(ConfigurationError, match=value):
        await saver.aget_tuple(config_for("t"))
    db = saver.db
    assert isinstance(db, PostgresDatabase)
    assert db._async is None
    await saver.aclose()


@pytest.mark.parametrize(
    "parameter", ["foo=bar", *(p for p, _ in BAD_VALUES[:3])], ids=lambda p: str(p)
)
def test_the_command_says_it_in_one_line(pg_url: str, parameter: str) -> None:
    url = _with(pg_url.replace("@", ":s3cret@", 1), parameter)  # trust: any password does
    done = subprocess.run(
        [sys.executable, "-m", "langgraph_checkpoint_agent_memory.cli", "scopes", "--url", url],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith("agent-memory scopes: error: ")
    assert parameter.split("=")[1] in done.stderr and "s3cret" not in done.stderr
    assert "cannot reach" not in done.stderr
