"""What agents may see: the bubblewrap sandbox around their processes, and the model relay that
keeps provider keys out of it (see `bwrap` and `relay`)."""

from skillopt.sandbox.base import NoSandbox, RunsUntrustedCode, Sandbox
from skillopt.sandbox.bwrap import Bubblewrap, check_bwrap, interpreter_paths
from skillopt.sandbox.relay import Relay, Ticket

__all__ = ["Bubblewrap", "NoSandbox", "Relay", "RunsUntrustedCode", "Sandbox", "Ticket", "check_bwrap",
           "interpreter_paths", "make_sandbox"]


def make_sandbox(enabled: bool) -> Sandbox:
    """The sandbox of a run: bubblewrap, checked to work here (else `BadInput` naming --no-sandbox),
    or none when the user passed --no-sandbox."""
    return Bubblewrap(check_bwrap()) if enabled else NoSandbox()
