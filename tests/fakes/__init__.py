"""Fakes for tests: a scripted fake model server speaking real HTTP (see ``tests.fakes.server``).

``from tests.fakes import FakeModelServer, FakeReply, Script`` works too; the names are loaded
lazily so that ``python -m tests.fakes.server`` does not import the server module twice.
"""

from __future__ import annotations

import importlib
from typing import Any


def __getattr__(name: str) -> Any:
    server = importlib.import_module("tests.fakes.server")

    if name in server.__all__:
        return getattr(server, name)
    raise AttributeError(f"module 'tests.fakes' has no attribute {name!r}")
