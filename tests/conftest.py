"""Suite-wide set-up."""

from __future__ import annotations

import signal


def pytest_configure(config) -> None:
    # A suite started in the background by a script inherits SIGINT ignored (POSIX), and the CLI processes
    # the tests start would inherit that and never see the Ctrl-C the interrupt tests send. Python's own
    # handler here means each child starts with the default disposition, as under a terminal.
    signal.signal(signal.SIGINT, signal.default_int_handler)
