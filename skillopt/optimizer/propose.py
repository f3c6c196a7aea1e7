"""Proposers: each turns the state of the search into candidate edits of the incumbent skill.

The Proposer seam (DESIGN.md section 4): `propose(state) -> Proposal`, the candidates it made and
the optimizer calls it made for them (`Reflection`s), never raising for a failed model call (a
failed reflection is returned, recorded on the step, and proposes nothing). A proposer reads the
state; it does not write into it (the merge proposer marks the pool pair it merged, once). Built-in
proposers: reflection on minibatches of scored train rollouts (this module), a worked example
from a successful train rollout (`demonstrate`), a merge of complementary pool members (`pool`)
and single edits out of rejected bundles (`credit`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from skillopt.benchmarks.base import Task
from skillopt.edits import Edit
from skillopt.models.router import Models
from skillopt.models.spec import ModelSpec
from skillopt.optimizer.aggregate import aggregate, select
from skillopt.optimizer.facts import label_facts, step_references
from skillopt.optimizer.reflect import foci, make_minibatches, reflect
from skillopt.optimizer.template import WORKING_FIRST, Template
from skillopt.optimizer.types import ScoredRollout
from skillopt.record import Candidate, EditLedger, ParetoPool, Reflection
from skillopt.skill import Skill


@dataclass
class SearchState:
    """What a proposer may look at. Never anything from the validation or test splits but the
    per-task outcomes of the pool (no task text)."""

    step: int
    version: int  # the incumbent
    skill: Skill
    scored: list[ScoredRollout]  # this step's train rollouts of the incumbent
    tasks: dict[str, Task]  # the train tasks by id
    rejected: list[Edit] = field(default_factory=list)  # edits the gate or the screen turned down alone
    max_edits: int = 3  # learning rate: edits one candidate may make
    pool: ParetoPool | None = None  # the run's Pareto pool (the merge proposer reads it)
    ledger: EditLedger | None = None  # the run's edit ledger (the ablation proposer takes from it)
    # the expected answers of every train task (the train split, never validation or test): what a closed
    # label set is counted over (`facts.label_facts`); empty: this step's alone
    answers: list[str] = field(default_factory=list)

    def references(self) -> list[str]:
        """The expected answers a closed label set is counted over: the train split's, else this step's."""
        return [a for a in self.answers if a.strip()] or step_references(self.scored)


@dataclass
class Proposal:
    """What one proposer produced: its candidates, and the optimizer calls it made for them (failed
    ones too: recorded on the step as `reflections.json`, never raised)."""

    candidates: list[Candidate] = field(default_factory=list)
    reflections: list[Reflection] = field(default_factory=list)


@runtime_checkable
class Proposer(Protocol):
    name: str

    async def propose(self, state: SearchState) -> Proposal: ...


class ReflectionProposer:
    """`count` reflections per step, each on a minibatch of failures (with a few successes for
    contrast); when there are fewer minibatches than reflections, the same minibatch is sampled
    again with another seed. Each reflection's edits, merged and cut to the learning rate, make one
    candidate."""

    name = "reflection"

    def __init__(self, models: Models, spec: ModelSpec, count: int = 3, minibatch_size: int = 4,
                 successes: int = 2, max_tokens: int | None = None, temperature: float | None = None,
                 retries: int = 2, template: Template = WORKING_FIRST, labels: bool = True):
        self.models, self.spec, self.count, self.retries, self.labels = models, spec, count, retries, labels
        self.foci = foci(template)
        self.minibatch_size, self.successes = minibatch_size, successes
        self.max_tokens, self.temperature = max_tokens, temperature

    async def propose(self, state: SearchState) -> Proposal:
        batches = make_minibatches(state.scored, self.minibatch_size, self.successes, self.count)
        if not batches:
            return Proposal()
        plan = [(batches[i % len(batches)], i // len(batches), self.foci[(state.step - 1 + i) % len(self.foci)])
                for i in range(self.count)]
        labels = label_facts(state.scored, state.references()) if self.labels else []  # the closed answer set, if any
        self.models.meter.check()
        reflections = list(await asyncio.gather(*[self._one(state, fails, wins, sample, focus, labels)
                                                  for (fails, wins), sample, focus in plan]))
        out = []
        for r in reflections:
            edits = select(aggregate(r.edits, state.rejected), state.max_edits)
            if edits:
                out.append(Candidate(id="", step=state.step, origin="reflection", parent=state.version,
                                     edits=edits, rationale=r.analysis, sources=list(r.minibatch)))
        return Proposal(out, reflections)

    async def _one(self, state: SearchState, fails, wins, sample: int, focus: str,
                   labels: Sequence[str] = ()) -> Reflection:
        """One reflection; a call that failed for infrastructure reasons is tried again (up to
        `retries` times), a reply that could not be read is not."""
        for _ in range(self.retries + 1):
            r = await reflect(self.models, self.spec, state.skill, fails, wins, state.rejected, state.max_edits,
                              self.max_tokens, self.temperature, sample=sample, focus=focus, labels=labels)
            if not r.transient:
                break
        return r


def dedupe(candidates: Sequence[Candidate]) -> list[Candidate]:
    """Drop candidates whose edits are the same as an earlier one's (same op, anchor and text)."""
    seen: set[tuple[str, ...]] = set()
    out = []
    for c in candidates:
        key = tuple(sorted(e.key for e in c.edits))
        if key and key not in seen:
            seen.add(key)
            out.append(c)
    return out
