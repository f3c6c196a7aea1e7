"""Reports over run records: compare skills, export them for agents, the training report, tracking.

- `compare_skills`: scores with confidence intervals, paired per-task tests, usage, diffs (`Comparison`).
- `export_skill`: claude-skill, codex-skill, agents-md and plugin layouts with provenance.
- `build_report` / `render_html` / `render_markdown`: what happened during a run.
- `build_lineage`: the version tree of a run with its gate decisions.
- `MlflowTracker`: an engine listener for `skillopt run --track mlflow`.
- `stats`: the statistics, as pure functions.

Everything here reads the run record (`skillopt.store`); nothing here changes it.
"""

from skillopt.report.compare import Comparison, EntryData, SkillEntry, compare_skills, run_entry
from skillopt.report.data import RunView
from skillopt.report.export import FORMATS as EXPORT_FORMATS
from skillopt.report.export import ExportResult, Provenance, export_skill, provenance_for
from skillopt.report.lineage import Lineage, VersionNode, build_lineage
from skillopt.report.run_report import RunReport, build_report, render_html, render_markdown, write_report
from skillopt.report.tracking import MlflowTracker, make_tracker

__all__ = ["EXPORT_FORMATS", "Comparison", "EntryData", "ExportResult", "Lineage", "MlflowTracker", "Provenance",
           "RunReport", "RunView", "SkillEntry", "VersionNode", "build_lineage", "build_report", "compare_skills",
           "export_skill", "make_tracker", "provenance_for", "render_html", "render_markdown", "run_entry",
           "write_report"]
