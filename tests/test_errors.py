"""Every error the package raises on purpose is exported from the top level and is an
``AgentMemoryError``, so one ``except`` clause catches the package's failures."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import langgraph_checkpoint_agent_memory as package

#: Packages whose errors never reach a library caller (the command line prints its own).
INTERNAL = "langgraph_checkpoint_agent_memory.cli"
#: Signals raised and caught inside the package: the readers turn a checkpoint whose
#: values a racing delete removed into a thread that is gone (tests/test_pg_contention.py);
#: a store plan stops with KeysNeeded to have data keys loaded from a key store of its own
#: and runs again (an EncryptionError should it reach a caller of ``run_plan``); a search
#: due more block builds than one query may do stops with MoreBuildsDue and reads postings.
SIGNALS = {"MissingBlob", "KeysNeeded", "KeyTaken", "MoreBuildsDue"}


def _error_classes() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        if info.name == INTERNAL or info.name.startswith(INTERNAL + "."):
            continue
        module = importlib.import_module(info.name)
        for name, obj in inspect.getmembers(module, inspect.isclass):
            if (
                issubclass(obj, BaseException)
                and obj.__module__ == info.name
                and name not in SIGNALS
            ):
                found[name] = obj
    return found


def test_every_error_of_the_package_is_exported_and_derives_from_the_base() -> None:
    errors = _error_classes()
    assert {"DatabaseUnavailableError", "ClosedError", "ThreadDeletedError"} <= set(errors)
    for name, cls in errors.items():
        assert issubclass(cls, package.AgentMemoryError), name
        assert name in package.__all__, f"{name} is not exported from the package"
        assert getattr(package, name) is cls
