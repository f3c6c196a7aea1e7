"""The stderr console that progress, notes and errors print to (one instance, so a line printed
while the bars are live lands above them)."""

from __future__ import annotations

from rich.console import Console

console = Console(stderr=True, highlight=False, soft_wrap=True)
