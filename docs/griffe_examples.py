"""A griffe extension for the API reference: the docstrings head their examples
``Example:``, which Google style allows beside ``Examples:`` but griffe reads as a plain
admonition, so their ``>>>`` lines would render as prose; read as ``Examples:``, they
render as code."""

from __future__ import annotations

import re
from typing import Any

import griffe

EXAMPLE = re.compile(r"^([ \t]*)Example:[ \t]*$", re.M)


class ExampleSections(griffe.Extension):
    """Reads each docstring's ``Example:`` section as an ``Examples:`` section."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = EXAMPLE.sub(r"\1Examples:", obj.docstring.value)
