"""Compare skills: scores with confidence intervals per split, per-task wins / losses / ties and a
paired significance test against the first skill, tokens and cost, and diffs of the skill texts.

`compare_skills()` is pure: it takes the rollouts of each skill (`EntryData`) and returns a
`Comparison`. `run_entry()` reads a skill version's rollouts from its run; skill files are scored
by the scoring service (`skillopt.engine.scoring.score_skill`), which `skillopt.api.compare` calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from skillopt.report.data import RunView
from skillopt.report.lineage import skill_diff
from skillopt.stats import (
    Interval,
    Outcomes,
    TestResult,
    paired_outcomes,
    paired_test,
    score_interval,
)
from skillopt.store.schema import RolloutRecord, per_task
from skillopt.store.refs import SkillRef
from skillopt.traces.trigger import TriggerRate, trigger_rate

DEFAULT_SPLITS = ("val", "test")
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


@dataclass
class EntryData:
    entry: SkillEntry
    records: dict[str, list[RolloutRecord]] = field(default_factory=dict)  # split -> rollouts


class ScoreRow(BaseModel):
    split: str
    label: str
    rollouts: int
    tasks: int
    hard: Interval
    soft: Interval
    trigger: TriggerRate | None = None  # agent harnesses: rollouts whose agent loaded the skill


class PairedRow(BaseModel):
    """B (`label`) against A (`baseline`) on the tasks of `split` both have; per-task means over trials."""

    split: str
    label: str
    baseline: str
    metric: Literal["hard", "soft"]
    outcomes: Outcomes
    test: TestResult


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
    "hard test": "exact McNemar (binomial) on per-task 0/1 outcomes; paired bootstrap when several trials "
                 "make per-task means fractional",
    "soft test": "paired bootstrap of the mean per-task difference (seeded), two-sided; exact sign-flip test "
                 "when every per-task difference is the same",
}


# loading ---------------------------------------------------------------------------------------------
def run_entry(ref: SkillRef, splits: Sequence[str], label: str | None = None) -> EntryData:
    """A run's skill version with the rollouts its run (and, for an eval run, its source) recorded."""
    assert ref.run is not None and ref.version is not None
    view = RunView(ref.run)
    v = ref.run.version(ref.version)
    meter = view.summary.meter if view.summary else (view.state.meter if view.state else None)
    entry = SkillEntry(
        label=label or ref.label, kind="run", sha=v.sha, text=ref.skill.render(), run_id=view.run_id,
        version=v.version, origin=v.origin, benchmark=view.benchmark, harness=view.harness,
        target_model=view.target_model, run_status=view.status, data_hash=view.data_hash,
        run_tokens=meter.tokens if meter else None, run_cost_usd=meter.known_cost_usd if meter else None,
        run_cost_unknown=meter.cost_unknown if meter else False)
    return EntryData(entry, {s: view.records_for(v.sha, s) for s in splits})


def unique_labels(labels: Sequence[str]) -> list[str]:
    out: list[str] = []
    for lab in labels:
        new, k = lab, 2
        while new in out:
            new, k = f"{lab}#{k}", k + 1
        out.append(new)
    return out


# the comparison --------------------------------------------------------------------------------------------
def compare_skills(data: Sequence[EntryData], splits: Sequence[str] = DEFAULT_SPLITS, with_diff: bool = False,
            n_boot: int = 10000, seed: int = 0) -> Comparison:
    """Scores, paired tests against the first entry, usage and (optionally) diffs."""
    if not data:
        raise ValueError("nothing to compare")
    cmp = Comparison(entries=[d.entry for d in data], splits=list(splits), methods=dict(METHODS))
    base = data[0]
    for split in splits:
        for d in data:
            recs = d.records.get(split, [])
            if not recs:
                cmp.notes.append(f"{d.entry.label} has no rollouts on {split}" + _how_to_score(d.entry, split))
                continue
            cmp.scores.append(ScoreRow(split=split, label=d.entry.label, rollouts=len(recs),
                                       tasks=len({r.task_id for r in recs}),
                                       hard=score_interval([r.hard for r in recs]),
                                       soft=score_interval([r.soft for r in recs]), trigger=trigger_rate(recs)))
        for d in data[1:]:
            cmp.paired += _paired(base, d, split, cmp.notes, n_boot, seed)
    few = sorted({r.outcomes.n for r in cmp.paired if 0 < r.outcomes.n < FEW_TASKS})
    if few:
        cmp.notes.append(f"some comparisons pair only {few[0]} task(s): with fewer than {FEW_TASKS} the tests have "
                         f"little power (and the bootstrap is optimistic)")
    cmp.usage = [_usage(d, splits) for d in data]
    cmp.warnings += setup_warnings([d.entry for d in data])
    if with_diff:
        for d in data[1:]:
            cmp.diffs[d.entry.label] = skill_diff(base.entry.text, d.entry.text, base.entry.label, d.entry.label)
    return cmp


def _paired(base: EntryData, other: EntryData, split: str, notes: list[str], n_boot: int, seed: int) -> list[PairedRow]:
    a_recs, b_recs = base.records.get(split, []), other.records.get(split, [])
    if not a_recs or not b_recs:
        return []
    rows = []
    for metric in ("hard", "soft"):
        a, b = per_task(a_recs, metric, skip_errored=False), per_task(b_recs, metric, skip_errored=False)
        out = paired_outcomes(a, b)
        rows.append(PairedRow(split=split, label=other.entry.label, baseline=base.entry.label, metric=metric,  # type: ignore[arg-type]
                              outcomes=out, test=paired_test(a, b, metric, n_boot=n_boot, seed=seed)))
    a_tasks, b_tasks = {r.task_id for r in a_recs}, {r.task_id for r in b_recs}
    common = len(a_tasks & b_tasks)
    if a_tasks != b_tasks:
        notes.append(f"on {split}, {other.entry.label} and {base.entry.label} share {common} of "
                     f"{len(a_tasks | b_tasks)} tasks: the paired test uses those {common}")
    return rows


def _usage(d: EntryData, splits: Sequence[str]) -> UsageRow:
    recs = [r for s in splits for r in d.records.get(s, [])]
    unknown = any(r.cost_usd is None and (r.input_tokens or r.output_tokens) for r in recs)
    e = d.entry
    return UsageRow(label=e.label, rollouts=len(recs), input_tokens=sum(r.input_tokens for r in recs),
                    output_tokens=sum(r.output_tokens for r in recs),
                    cost_usd=None if unknown else round(sum(r.cost_usd or 0.0 for r in recs), 6),
                    run_tokens=e.run_tokens, run_cost_usd=None if e.run_cost_unknown else e.run_cost_usd)


def _how_to_score(e: SkillEntry, split: str) -> str:
    if e.kind == "run" and e.run_id is not None and e.version is not None:
        return f" (score it with: skillopt eval --skill {e.run_id}:v{e.version} --split {split})"
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
    return out
