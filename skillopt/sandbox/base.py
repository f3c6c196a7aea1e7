"""The Sandbox seam: what a process we start on the agent's behalf may see.

`Sandbox.wrap(argv, ws)` returns the command line that runs `argv` inside the sandbox, with `ws`
(the rollout's workspace, or the clone a grading runs in) as its one writable folder. It never
starts anything itself and never raises for an ordinary command; `make_sandbox` raises
`BadInput` up front when the sandbox asked for cannot work on this machine.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable


@runtime_checkable
class Sandbox(Protocol):
    """Wraps a command so that it sees its workspace, its tools and the network, and nothing else.

    `read_only`: more paths the command needs (its binary, an interpreter), shown read-only at the
    same place. `network`: False cuts the command off every network, loopback included (test runs).
    """

    name: str

    def wrap(self, argv: list[str], ws: Path, *, read_only: Sequence[str | Path] = (),
             network: bool = True) -> list[str]: ...


class NoSandbox:
    """`--no-sandbox`: the command runs as it is, with the user's whole filesystem in reach."""

    name = "none"

    def wrap(self, argv: list[str], ws: Path, *, read_only: Sequence[str | Path] = (),
             network: bool = True) -> list[str]:
        return list(argv)


@runtime_checkable
class RunsUntrustedCode(Protocol):
    """A benchmark whose scoring runs code the agent wrote (SWE tests): it takes the run's sandbox,
    and the folder its grading artefacts go to (logs, reports), which no agent can see."""

    def isolate(self, sandbox: Sandbox, artefacts: Path) -> None: ...
