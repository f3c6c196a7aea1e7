"""Claude Code / Codex transcripts -> harvested tasks (redacted); `adopt` installs a trained skill."""

from skillopt.harvest.pipeline import HarvestOptions, HarvestResult, harvest, read_tasks
from skillopt.harvest.schema import Check, HarvestedTask, HarvestReport, StartState

__all__ = ["Check", "HarvestOptions", "HarvestReport", "HarvestResult", "HarvestedTask", "StartState", "harvest",
           "read_tasks"]
