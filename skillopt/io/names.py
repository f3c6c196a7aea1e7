"""File names made from free text (task ids, benchmark names, instance ids)."""

from __future__ import annotations

import re

_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_name(text: str) -> str:
    """`text` as one file name: no separators, never `.` or `..` (so it cannot leave its folder)."""
    name = _SAFE.sub("_", text)[:120] or "_"
    return "_" + name[1:] if name.startswith(".") else name
