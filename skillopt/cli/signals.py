"""SIGTERM is an interruption like Ctrl-C (`timeout`, `docker stop`, systemd, Kubernetes stop a run
with it): the run saves its state, is marked interrupted and can be resumed; the exit code is 143
(128 + SIGTERM), Ctrl-C's 130."""

from __future__ import annotations

import signal

EXIT_SIGINT, EXIT_SIGTERM = 130, 143
_terminated = False


def _on_sigterm(signum, frame) -> None:
    """Do what SIGINT does here (asyncio's handler cancels the running task cleanly; else Python's
    raises KeyboardInterrupt), remembering that it was SIGTERM."""
    global _terminated
    _terminated = True
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler):
        handler(signal.SIGINT, frame)
    else:
        raise KeyboardInterrupt


def install() -> None:
    """From the main thread, once, at the CLI edge (a library never takes over a process's signals)."""
    signal.signal(signal.SIGTERM, _on_sigterm)


def interrupt_exit_code() -> int:
    return EXIT_SIGTERM if _terminated else EXIT_SIGINT
