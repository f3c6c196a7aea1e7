"""The embedded model's threads follow the machine while a run lasts.

llama.cpp's thread count is fixed when its server starts, and the best count is the CPUs other work
leaves free (`models.local.registry.threads_for`). A run started while another process held a core
would keep one thread for its whole life, the core idle once that process ends; one started on an
idle machine would stall behind a process that starts later. So at the start of every phase (baseline,
a step's rollouts, a gate, the test split), when no slot is at work, the servers this process runs
are restarted with the count the machine calls for now, if it changed (`LocalServer.retune`).
"""

from __future__ import annotations

from skillopt.engine.events import Emitter, Event, Note, PhaseStarted


class FollowFreeCores:
    """A listener: on `PhaseStarted`, re-choose the local servers' threads; a note for each change."""

    def __init__(self, emit: Emitter):
        self.emit = emit

    def __call__(self, event: Event) -> None:
        if not isinstance(event, PhaseStarted):
            return
        from skillopt.models.local import retune_all

        for line in retune_all():
            self.emit(Note(line))
