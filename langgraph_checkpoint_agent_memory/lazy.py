"""A package's names loaded when first used (PEP 562): importing the package costs nothing
until a name is asked for, so an in-memory checkpointer pays for no SQL, vectors or cipher."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any


def homes(package: str, modules: Mapping[str, str]) -> dict[str, str]:
    """Each name -> its module, from ``{module relative to package: "Name Other ..."}``.

    Example:
        >>> homes("pkg", {"a": "One Two", "b.c": "Three"})
        {'One': 'pkg.a', 'Two': 'pkg.a', 'Three': 'pkg.b.c'}
    """
    return {
        name: f"{package}.{module}" for module, text in modules.items() for name in text.split()
    }


def loader(namespace: dict[str, Any], names: Mapping[str, str]) -> Callable[[str], Any]:
    """A module's ``__getattr__``: a name of ``names`` imported on first use, then kept in
    the module's ``namespace`` (its ``globals()``).

    Example:
        >>> space = {"__name__": "pkg"}
        >>> load = loader(space, {"OrderedDict": "collections"})
        >>> load("OrderedDict") is space["OrderedDict"]
        True
    """

    def __getattr__(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {namespace['__name__']!r} has no attribute {name!r}")
        value = namespace[name] = getattr(import_module(names[name]), name)
        return value

    return __getattr__
