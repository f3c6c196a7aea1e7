"""Compare skills: scores with confidence intervals per split, per-task wins / losses / ties and a
paired significance test against the first skill, tokens and cost, and diffs of the skill texts.

`compare_skills()` is pure: it takes the rollouts of each skill (`EntryData`) and returns a
`Comparison`. `run_entry()` reads a skill version's rollouts from its run; skill files are scored
by the scoring service (`skillopt.engine.scoring.score_skills`); `skillopt.api.compare` calls both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from skillopt.errors import BadInput
from skillopt.report.data import RunView
from skillopt.report.lineage import skill_diff
from skillopt.report.runs_list import all_runs
from skillopt.stats import Interval, PairedLift, paired_lift
from skillopt.store.schema import RolloutRecord
from skillopt.store.scores import Score, latest_per_trial, per_task, scored
from skillopt.store.refs import SkillRef
from skillopt.traces.trigger import TriggerRate, trigger_rate

DEFAULT_SPLITS = ("val", "test")
Metric = Literal["hard", "soft"]
METRICS: tuple[Metric, ...] = ("hard", "soft")
FEW_TASKS = 10


class SkillEntry(BaseModel):
    """One compared skill and where its scores come from."""

    label: str
    kind: Literal["run", "file"]
    sha: str
    text: str  # the rendered skill
    run_id: str | None = None
    version: int | None = None
    origin: str | None = None
    benchmark: str = ""
    harness: str = ""
    target_model: str = ""
    run_status: str | None = None
    data_hash: str = ""  # of the benchmark data the scores were made on ("" when unknown)
    current_data_hash: str = ""  # of that benchmark's data now ("" when not checked)
    scored_new: int = 0  # rollouts paid for by this command (skill files)
    scored_cached: int = 0  # rollouts reused from earlier runs (skill files)
    run_tokens: int | None = None  # the whole run's tokens, all roles (runs)
    run_cost_usd: float | None = None
    run_cost_unknown: bool = False
    runs_dir: str = ""  # runs: the folder that holds the run (for the commands the notes suggest)


@dataclass
class EntryData:
    entry: SkillEntry
    records: dict[str, list[RolloutRecord]] = field(default_factory=dict)  # split -> rollouts


class ScoreRow(BaseModel):
    """A skill's score on a split (`store.scores.SplitScore`, errored rollouts apart) with its interval.
    `hard` / `soft` are None when no rollout was scored."""

    split: str
    label: str
    rollouts: int  # scored rollouts
    tasks: int  # tasks with a scored rollout
    errors: int = 0  # errored rollouts: counted apart, never a score
    hard: Interval | None
    soft: Interval | None
    trigger: TriggerRate | None = None  # agent harnesses: rollouts whose agent loaded the skill


class PairedRow(BaseModel):
    """B (`label`) against A (`baseline`) on the tasks of `split` both have scored; per-task means over
    trials. `lift` is the paired lift the run's summary and the report show too (`stats.PairedLift`)."""

    split: str
    label: str
    baseline: str
    metric: Metric
    lift: PairedLift


class UsageRow(BaseModel):
    label: str
    rollouts: int
    input_tokens: int
    output_tokens: int
    cost_usd: float | None  # None: some rollout had tokens but no known price
    run_tokens: int | None = None
    run_cost_usd: float | None = None


class Comparison(BaseModel):
    entries: list[SkillEntry]
    splits: list[str]
    scores: list[ScoreRow] = Field(default_factory=list)
    paired: list[PairedRow] = Field(default_factory=list)
    usage: list[UsageRow] = Field(default_factory=list)
    diffs: dict[str, str] = Field(default_factory=dict)  # label -> unified diff from the first skill
    warnings: list[str] = Field(default_factory=list)  # results may mislead: different setups, data changed
    notes: list[str] = Field(default_factory=list)  # missing or partial data
    methods: dict[str, str] = Field(default_factory=dict)


METHODS = {
    "hard interval": "Wilson score interval (95%) over rollouts",
    "soft interval": "Student t interval (95%) over rollouts, clipped to [0, 1]",
    "wins/losses/ties": "per task, mean over trials, against the first skill",
    "paired lift": "mean per-task difference against the first skill with its 95% interval: Agresti-Min for "
                   "0/1 outcomes, Student t over the differences otherwise; better / worse when the interval "
                   "lies above / below 0 (the same test as the run's summary and the report)",
    "errored rollouts": "infrastructure failures are counted apart and never scored",
}


# loading ---------------------------------------------------------------------------------------------
def run_entry(ref: SkillRef, splits: Sequence[str], label: str | None = None, current_data_hash: str = "") -> EntryData:
    """A run's skill version with the rollouts its run (and, for an eval run, its source) recorded.
    `current_data_hash`: of its benchmark's data now ("" when not checked)."""
    assert ref.run is not None and ref.version is not None
    view = RunView(ref.run)
    v = ref.run.version(ref.version)
    meter = view.summary.meter if view.summary else (view.state.meter if view.state else None)
    entry = SkillEntry(
        label=label or ref.label, kind="run", sha=v.sha, text=ref.skill.render(), run_id=view.run_id,
        version=v.version, origin=v.origin, benchmark=view.benchmark, harness=view.harness,
        target_model=view.target_model, run_status=view.status, data_hash=view.data_hash,
        run_tokens=meter.tokens if meter else None, run_cost_usd=meter.known_cost_usd if meter else None,
        run_cost_unknown=meter.cost_unknown if meter else False, runs_dir=str(view.runs_dir),
        current_data_hash=current_data_hash)
    others = same_setup_runs(view)
    return EntryData(entry, {s: stored_records(view, v.sha, s, others) for s in splits})


def same_setup_runs(view: RunView) -> list[RunView]:
    """The other runs under `view`'s runs folder made on the same benchmark data, harness and target."""
    out = []
    for path in all_runs(view.runs_dir):
        if path.name == view.run_id:
            continue
        try:
            other = RunView.open(view.runs_dir, path.name)
            if same_setup(view, other):
                out.append(other)
        except (BadInput, OSError, ValueError):  # a broken or foreign folder adds nothing to a comparison
            continue
    return out


def stored_records(view: RunView, sha: str, split: str, others: Sequence[RunView] = ()) -> list[RolloutRecord]:
    """Every stored rollout of the skill content `sha` on `split`: the run's own, and those of the
    runs `others` (`same_setup_runs`; `skillopt eval --skill RUN:vN` stores its rollouts in an
    evaluation run of its own); one per (task, trial), a scored one first."""
    recs = list(view.records_for(sha, split))
    for other in others:
        recs += other.records_for(sha, split)
    return latest_per_trial(recs)


def same_setup(a: RunView, b: RunView) -> bool:
    """Whether rollouts of `b`'s run count as `a`'s: same benchmark data, harness and its options, target."""
    ca, cb = a.config, b.config
    if (_bench_key(ca.benchmark), ca.harness, ca.target_model) != (_bench_key(cb.benchmark), cb.harness, cb.target_model):
        return False
    if ca.harness_options != cb.harness_options or ca.benchmark_options != cb.benchmark_options:
        return False
    return not (a.data_hash and b.data_hash and a.data_hash != b.data_hash)


def unique_labels(labels: Sequence[str]) -> list[str]:
    out: list[str] = []
    for lab in labels:
        new, k = lab, 2
        while new in out:
            new, k = f"{lab}#{k}", k + 1
        out.append(new)
    return out


# the comparison --------------------------------------------------------------------------------------------
def compare_skills(data: Sequence[EntryData], splits: Sequence[str] = DEFAULT_SPLITS,
                   with_diff: bool = False, notes: Sequence[str] = ()) -> Comparison:
    """Scores, paired lifts against the first entry, usage and (optionally) diffs; `notes`: what the
    scoring found (a benchmark it could not load), after the comparison's own."""
    if not data:
        raise ValueError("nothing to compare")
    cmp = Comparison(entries=[d.entry for d in data], splits=list(splits), methods=dict(METHODS))
    base = data[0]
    for split in splits:
        for d in data:
            every = d.records.get(split, [])
            if not every:
                cmp.notes.append(f"{d.entry.label} has no rollouts on {split}" + _how_to_score(d.entry, split))
                continue
            sc = Score.of(split, every)
            score, recs = sc.score, scored(every)
            if not score.has_score:
                cmp.notes.append(f"{d.entry.label} has no score on {split}: its {score.errors} rollout(s) there "
                                 f"errored (infrastructure failures are not scores)")
            cmp.scores.append(ScoreRow(split=split, label=d.entry.label, rollouts=score.n, errors=score.errors,
                                       tasks=sc.tasks, hard=sc.hard, soft=sc.soft,
                                       trigger=trigger_rate(recs) if recs else None))
        for d in data[1:]:
            cmp.paired += _paired(base, d, split, cmp.notes)
    few = sorted({r.lift.n for r in cmp.paired if 0 < r.lift.n < FEW_TASKS})
    if few:
        cmp.notes.append(f"some comparisons pair only {few[0]} task(s): with fewer than {FEW_TASKS} the interval "
                         f"is wide and the test has little power")
    cmp.usage = [_usage(d, splits) for d in data]
    cmp.warnings += setup_warnings([d.entry for d in data])
    if with_diff:
        for d in data[1:]:
            cmp.diffs[d.entry.label] = skill_diff(base.entry.text, d.entry.text, base.entry.label, d.entry.label)
    cmp.notes += notes
    return cmp


def _paired(base: EntryData, other: EntryData, split: str, notes: list[str]) -> list[PairedRow]:
    a_recs, b_recs = scored(base.records.get(split, [])), scored(other.records.get(split, []))
    if not a_recs or not b_recs:
        return []
    rows = []
    for metric in METRICS:
        lift = paired_lift(per_task(a_recs, metric), per_task(b_recs, metric))
        if lift is not None:
            rows.append(PairedRow(split=split, label=other.entry.label, baseline=base.entry.label,
                                  metric=metric, lift=lift))
    a_tasks, b_tasks = {r.task_id for r in a_recs}, {r.task_id for r in b_recs}
    common = len(a_tasks & b_tasks)
    if a_tasks != b_tasks:
        notes.append(f"on {split}, {other.entry.label} and {base.entry.label} share {common} of "
                     f"{len(a_tasks | b_tasks)} scored tasks: the paired lift uses those {common}")
    return rows


def _usage(d: EntryData, splits: Sequence[str]) -> UsageRow:
    recs = [r for s in splits for r in d.records.get(s, [])]  # errored ones too: they may have cost
    unknown = any(r.cost_usd is None and (r.input_tokens or r.output_tokens) for r in recs)
    e = d.entry
    return UsageRow(label=e.label, rollouts=len(recs), input_tokens=sum(r.input_tokens for r in recs),
                    output_tokens=sum(r.output_tokens for r in recs),
                    cost_usd=None if unknown else round(sum(r.cost_usd or 0.0 for r in recs), 6),
                    run_tokens=e.run_tokens, run_cost_usd=None if e.run_cost_unknown else e.run_cost_usd)


def _how_to_score(e: SkillEntry, split: str) -> str:
    """The command that stores the missing rollouts where compare finds them (see `stored_records`)."""
    if e.kind == "run" and e.run_id is not None and e.version is not None:
        rd = "" if not e.runs_dir or Path(e.runs_dir) == Path("runs") else f" --runs-dir {e.runs_dir}"
        return f" (score it with: skillopt eval --skill {e.run_id}:v{e.version} --split {split}{rd})"
    return ""


def _bench_key(benchmark: str) -> str:
    return Path(benchmark).name if benchmark.lower().endswith(".jsonl") else benchmark


def setup_warnings(entries: Sequence[SkillEntry]) -> list[str]:
    """Flags for comparisons that may mislead: other benchmark / harness / target, changed data,
    runs still in progress."""
    out = []
    first = entries[0]
    for e in entries:
        if e.kind == "run" and e.run_status not in (None, "finished"):
            out.append(f"run {e.run_id} is {e.run_status} (in progress, interrupted or stopped): "
                       f"comparing the rollouts it has so far")
        if e.data_hash and e.current_data_hash and e.data_hash != e.current_data_hash:
            out.append(f"the benchmark data of {e.label} changed since it was scored "
                       f"(data hash {e.data_hash} then, {e.current_data_hash} now)")
    for e in entries[1:]:
        for what, mine, theirs in (("benchmark", _bench_key(e.benchmark), _bench_key(first.benchmark)),
                                   ("harness", e.harness, first.harness),
                                   ("target model", e.target_model, first.target_model)):
            if mine and theirs and mine != theirs:
                out.append(f"{e.label} was scored with {what} {mine!r}, {first.label} with {theirs!r}: "
                           f"the scores are not directly comparable")
        if e.data_hash and first.data_hash and e.data_hash != first.data_hash:
            out.append(f"{e.label} and {first.label} were scored on different benchmark data "
                       f"(data hash {e.data_hash} vs {first.data_hash})")
    return list(dict.fromkeys(out))  # a run compared with itself (RUN:seed RUN:best) is flagged once
