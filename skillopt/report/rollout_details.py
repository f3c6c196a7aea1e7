"""The rollouts behind each heatmap cell, embedded in the report: a cell (task x version) links to its
rollouts (the task's prompt, then every trial: score, the scorer's feedback, the output, the trace summary the optimizer
saw, whether the agent loaded the skill, the trace file). Texts are cut to `MAX_CHARS` so the page
stays one file of reasonable size. Reads rollouts.jsonl (the index holds no texts)."""

from __future__ import annotations

import re

from pydantic import BaseModel, Field

from skillopt.report.data import RunView

MAX_CHARS = 1500


class RolloutView(BaseModel):
    trial: int
    hard: float | None  # None: an errored rollout (not a score)
    soft: float | None
    feedback: str
    output: str
    summary: str
    error: str | None = None
    skill_used: bool | None = None
    trace_file: str | None = None


class CellDetail(BaseModel):
    id: str  # the fragment the heatmap cell links to
    split: str
    task: str
    version: str
    score: float
    prompt: str = ""  # what the task asked ("" for runs made before prompts were recorded)
    rollouts: list[RolloutView] = Field(default_factory=list)


def cell_id(split: str, version: str, task: str) -> str:
    return "ro-" + re.sub(r"[^A-Za-z0-9_-]+", "_", f"{split}-{version}-{task}")


def _cut(text: str) -> str:
    text = text or ""
    return text if len(text) <= MAX_CHARS else text[:MAX_CHARS // 3] + "\n[...]\n" + text[-2 * MAX_CHARS // 3:]


def cell_details(view: RunView, cells: list[tuple[str, str, str, float]]) -> list[CellDetail]:
    """Details of `cells` (split, task, version label, mean score), from the run's full rollout records."""
    sha_of = {v.label: v.sha for v in view.versions()}
    wanted = {(sha_of[label], split, task) for split, task, label, _ in cells if label in sha_of}
    found: dict[tuple[str, str, str], dict[int, RolloutView]] = {}
    for r in view.store.rollouts():
        key = (r.skill_sha, r.split, r.task_id)
        if key not in wanted:
            continue
        trials = found.setdefault(key, {})
        if r.trial in trials and (r.errored or trials[r.trial].hard is not None):
            continue  # one record per (task, trial): the first scored one, else the first errored one
        trials[r.trial] = RolloutView(
            trial=r.trial, hard=None if r.errored else r.hard, soft=None if r.errored else r.soft,
            feedback=_cut(r.feedback), output=_cut(r.output or r.patch or ""), summary=_cut(r.summary),
            error=r.error, skill_used=r.skill_used, trace_file=r.trace_file)
    prompts = view.store.task_prompts()
    out = []
    for split, task, label, score in cells:
        rows = found.get((sha_of.get(label, ""), split, task), {})
        if rows:
            out.append(CellDetail(id=cell_id(split, label, task), split=split, task=task, version=label, score=score,
                                  prompt=_cut(prompts.get(task, "")), rollouts=[rows[k] for k in sorted(rows)]))
    return out
