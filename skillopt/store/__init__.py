"""Run directories (atomic writes) and the SQLite index across runs."""

from skillopt.store.index import RunIndex
from skillopt.store.schema import RolloutRecord, RunState, RunSummary, SkillVersion, SplitScore
from skillopt.store.run_store import RunStore, new_run_id

__all__ = ["RolloutRecord", "RunIndex", "RunState", "RunStore", "RunSummary", "SkillVersion", "SplitScore",
           "new_run_id"]
