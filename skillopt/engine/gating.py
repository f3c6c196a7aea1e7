"""Deciding about a candidate with rollouts: the screen on train tasks, the sequential gate on
validation, and the non-inferiority check of a consolidation.

Pairs are launched in a fixed order (the validation tasks shuffled once per run, times trials)
with every concurrency slot kept busy, and fed to the test in that order, whatever order they
finish in: the sequence the test sees never depends on how long a rollout took. Once the test
stops, no new pair starts; pairs already in flight finish, are stored and paid, and are not
evidence. A pair with an errored rollout (an infrastructure failure) is tried again once at the
end of the queue, then skipped: never a win or a loss.

Deterministic targets (temperature 0 and a seed) compare with the incumbent's stored validation
rollouts; sampled targets draw the incumbent afresh for every decision (trials numbered per
decision), so nothing is compared with a score frozen at a lucky draw.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from skillopt.benchmarks.base import Task
from skillopt.config import GateConfig
from skillopt.engine.rollouts import RolloutRunner
from skillopt.optimizer.sequential_test import SequentialGate, SignTest, tail
from skillopt.record import GateDecision, GatePair, ScreenResult, TaskComparison
from skillopt.skill import Skill
from skillopt.stats import count_outcomes, paired_difference_interval
from skillopt.store.schema import RolloutRecord

TRIALS_PER_DECISION = 1000  # sampled targets: decision d uses trials d*1000 .. d*1000+trials-1


@dataclass(frozen=True)
class Side:
    version: int
    skill: Skill


@dataclass(frozen=True)
class GateSettings:
    test: SignTest
    metric: str
    trials: int
    deterministic: bool
    concurrency: int
    early_stop: bool = True
    trigger_weight: float = 0.0  # agent harnesses: added to a rollout's value when its agent loaded the skill


def pair_value(r: RolloutRecord, metric: str, trigger_weight: float = 0.0) -> float:
    """What the gate and the screen compare: the score, plus `trigger_weight` when the agent loaded
    the skill (`gate.trigger_weight`; 0: the score alone)."""
    return getattr(r, metric) + (trigger_weight if trigger_weight and r.skill_used else 0.0)


class PairFeed:
    """Runs pairs in a fixed order with `concurrency` in flight; yields them in that order."""

    def __init__(self, runner: RolloutRunner, inc: Side, cand: Side, jobs: list[tuple[Task, int]], split: str,
                 concurrency: int):
        self.runner, self.inc, self.cand, self.split = runner, inc, cand, split
        self.queue = list(enumerate(jobs))
        self.concurrency = max(1, concurrency)
        self.retried: set[int] = set()

    async def _pair(self, task: Task, trial: int) -> tuple[RolloutRecord, RolloutRecord]:
        inc, cand = await asyncio.gather(
            self.runner.run_one(self.inc.skill, self.inc.version, task, self.split, trial),
            self.runner.run_one(self.cand.skill, self.cand.version, task, self.split, trial))
        return inc, cand

    async def run(self, on_pair, stopped) -> None:
        """Call `on_pair(task, trial, inc, cand)` in order until `stopped()`; errored pairs go to
        the back of the queue once (`on_pair` is then called with the retry's records)."""
        running: dict[int, asyncio.Task] = {}
        done: dict[int, tuple[RolloutRecord, RolloutRecord]] = {}
        order = [i for i, _ in self.queue]
        jobs = dict(self.queue)
        nxt, launched = 0, 0
        try:
            while nxt < len(order) and not stopped():
                while launched < len(order) and len(running) < self.concurrency:
                    i = order[launched]
                    running[i] = asyncio.ensure_future(self._pair(*jobs[i]))
                    launched += 1
                finished, _ = await asyncio.wait(running.values(), return_when=asyncio.FIRST_COMPLETED)
                for i, fut in list(running.items()):
                    if fut in finished:
                        done[i] = fut.result()
                        del running[i]
                while nxt < len(order) and order[nxt] in done and not stopped():
                    i = order[nxt]
                    inc, cand = done.pop(i)
                    if (inc.errored or cand.errored) and i not in self.retried:
                        self.retried.add(i)
                        order.append(i)  # once more, after the others
                    else:
                        on_pair(jobs[i][0], jobs[i][1], inc, cand)
                    nxt += 1
        finally:
            if running:  # in flight when the test stopped: finish and store them, they are paid for
                await asyncio.gather(*running.values(), return_exceptions=True)


def gate_test(g: GateConfig, pairs: int, share: int = 1) -> SignTest:
    """The gate's test for `pairs` validation pairs; several trials of one task are not independent
    pairs, so those gates keep the sign test at the final look. `share`: how many candidates of one
    step split its error rate (`gate.per_step`): each is tested at alpha / share and interim_alpha /
    share (Bonferroni), so that the chance a step accepts a candidate that is no better stays at most
    alpha however many it gates."""
    return SignTest(planned=pairs, alpha=g.alpha / share, interim_alpha=g.interim_alpha / share,
                    min_effect=g.min_effect, futility=g.futility, independent=g.trials == 1)


def gate_jobs(tasks: Sequence[Task], trials: int, deterministic: bool, decision: int) -> list[tuple[Task, int]]:
    base = 0 if deterministic else decision * TRIALS_PER_DECISION
    return [(t, base + k) for t in tasks for k in range(trials)]


async def sequential_gate(runner: RolloutRunner, inc: Side, cand: Side, tasks: Sequence[Task],
                          settings: GateSettings, decision: int) -> GateDecision:
    """The sequential paired test of `cand` against `inc` on the validation tasks (in order)."""
    jobs = gate_jobs(tasks, settings.trials, settings.deterministic, decision)
    test = settings.test if settings.early_stop else SignTest(
        **{**settings.test.__dict__, "interim_alpha": 0.0, "futility": 0.0, "curtail": False})
    gate = SequentialGate(SignTest(**{**test.__dict__, "planned": len(jobs)}), settings.metric)
    before = runner.executed
    scores: list[tuple[float, float]] = []  # the metric alone (the pairs hold what was compared)

    def on_pair(task: Task, trial: int, a: RolloutRecord, b: RolloutRecord) -> None:
        if a.errored or b.errored:
            gate.skip(task.id)
        elif gate.decision() is None:
            gate.add(task.id, pair_value(a, settings.metric, settings.trigger_weight),
                     pair_value(b, settings.metric, settings.trigger_weight), trial=trial)
            scores.append((getattr(a, settings.metric), getattr(b, settings.metric)))

    await PairFeed(runner, inc, cand, jobs, "val", settings.concurrency).run(on_pair, lambda: gate.decision() is not None)
    gate.close()
    update: dict = {"rollouts": runner.executed - before}
    if settings.trigger_weight and scores:  # report scores, not scores plus the trigger bonus
        update.update(incumbent_score=round(sum(a for a, _ in scores) / len(scores), 6),
                      candidate_score=round(sum(b for _, b in scores) / len(scores), 6))
    return gate.summary(cand.version, inc.version).model_copy(update=update)


async def noninferiority_gate(runner: RolloutRunner, inc: Side, cand: Side, tasks: Sequence[Task],
                              settings: GateSettings, decision: int, margin: float) -> GateDecision:
    """Accept when the candidate is not worse than the incumbent by more than `margin`: the lower
    bound of the one-sided (1 - alpha) interval of the paired difference (Agresti-Min for 0/1
    scores, Student's t otherwise) is above -margin. Every pair is used, except
    that a candidate already significantly worse (exact sign test at alpha) stops early."""
    jobs = gate_jobs(tasks, settings.trials, settings.deterministic, decision)
    pairs: list[GatePair] = []
    alpha = settings.test.alpha
    skipped = 0
    before = runner.executed

    def losses_significant() -> bool:
        o = count_outcomes((p.incumbent, p.candidate) for p in pairs)
        return o.losses > o.wins and tail(o.wins + o.losses, o.losses) <= alpha

    def on_pair(task: Task, trial: int, a: RolloutRecord, b: RolloutRecord) -> None:
        nonlocal skipped
        if a.errored or b.errored:
            skipped += 1
        else:
            pairs.append(GatePair(task_id=task.id, trial=trial, incumbent=getattr(a, settings.metric),
                                  candidate=getattr(b, settings.metric)))

    await PairFeed(runner, inc, cand, jobs, "val", settings.concurrency).run(on_pair, losses_significant)
    ci = paired_difference_interval([p.incumbent for p in pairs], [p.candidate for p in pairs], level=1 - 2 * alpha)
    worse = losses_significant()
    accepted = bool(pairs) and not worse and ci.lo > -margin
    o = count_outcomes((p.incumbent, p.candidate) for p in pairs)
    w, lo = o.wins, o.losses
    why = (f"significantly worse: {lo} losses, {w} wins" if worse else
           f"difference {ci.mean:+.3f}, one-sided {1 - alpha:.0%} lower bound {ci.lo:+.3f} "
           f"{'above' if accepted else 'not above'} the margin -{margin}")
    n = max(1, len(pairs))
    return GateDecision(
        candidate=cand.version, incumbent=inc.version, accepted=accepted, reason=why, metric=settings.metric,
        incumbent_score=round(sum(p.incumbent for p in pairs) / n, 6),
        candidate_score=round(sum(p.candidate for p in pairs) / n, 6), wins=w, losses=lo,
        ties=len(pairs) - w - lo, evaluated=len(pairs), total=len(jobs), early_stopped=worse,
        stop="curtailed" if worse else ("accept-final" if accepted else "exhausted"),
        test=f"non-inferiority, margin {margin} ({ci.method} interval)", alpha=alpha, min_effect=-margin,
        p_value=None, skipped=skipped, rollouts=runner.executed - before, pairs=pairs,
        per_task=[TaskComparison(task_id=p.task_id, incumbent=p.incumbent, candidate=p.candidate) for p in pairs])


@dataclass(frozen=True)
class Screened:
    result: ScreenResult
    pairs: list[tuple[RolloutRecord, RolloutRecord]]  # (incumbent's, candidate's) rollout of each compared task
    same: list[bool]  # of each pair, whether the candidate's reply is the incumbent's (`_reply`: an agent's patch)


async def screen(runner: RolloutRunner, cand: Side, tasks: Sequence[Task], incumbent: dict[str, RolloutRecord],
                 metric: str, trial: int = 0, trigger_weight: float = 0.0,
                 aimed: Callable[[RolloutRecord], bool] | None = None) -> Screened:
    """The candidate on `tasks` against the incumbent's records there (this step's train rollouts);
    `aimed`: whether a rollout shows the failure the candidate aims at, counted on both sides. The
    compared rollouts come back with the result: a revision reads them (optimizer/revise.py)."""
    before = runner.executed
    records = await runner.run_many(cand.skill, cand.version, tasks, "train", 1, first_trial=trial)
    ids, a, b, errored, same = [], [], [], 0, []
    pairs: list[tuple[RolloutRecord, RolloutRecord]] = []
    for t, r in zip(tasks, records):
        base = incumbent.get(t.id)
        if base is None or base.errored or r.errored:
            errored += 1
            continue
        ids.append(t.id)
        a.append(pair_value(base, metric, trigger_weight))
        b.append(pair_value(r, metric, trigger_weight))
        same.append(_reply(base) == _reply(r))
        pairs.append((base, r))
    counts = {} if aimed is None else {"aimed_incumbent": sum(aimed(x) for x, _ in pairs),
                                       "aimed_candidate": sum(aimed(y) for _, y in pairs)}
    return Screened(ScreenResult(tasks=ids, incumbent=a, candidate=b, changed=len(same) - sum(same), errored=errored,
                                 rollouts=runner.executed - before, **counts), pairs, same)


def _reply(r: RolloutRecord) -> str:
    return " ".join((r.patch if r.patch is not None else r.output).split())
