"""What a run will cost before it starts (`skillopt run --dry-run`): the rollouts it plans, and the
cost (or, for a local model, the time) of one rollout of the chosen harness and target.

One rollout's tokens come, in this order, from:
- a measurement: `perf/results/agents.json` (`perf/agents.py`), a row of this harness and target
  (this benchmark's first), with real prompt and generated tokens per rollout and wall seconds;
- else an estimate: every model call of an agent re-sends the harness's fixed prompt (its system
  prompt, tool definitions and task wrapping, measured by `perf/agent_prompts.py`: `FIXED_PROMPT_TOKENS`),
  the skill and the task, and the conversation so far; `ASSUMED_TURNS` calls (at most
  `limits.max_turns`), each adding `ASSUMED_TURN_TOKENS` to the conversation and generating
  `ASSUMED_COMPLETION` tokens. The chat harness makes one call.

The price is the provider's (`models.prices`, your `models.prices` first); "unknown" when there is
none, never $0. A server's prompt cache (most agent calls re-send the same prefix) bills less than
this; it is not counted. Reads nothing but the configuration, the tasks and that one file.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from skillopt.benchmarks.base import Task
from skillopt.config import RunConfig
from skillopt.models.prices import FREE_PROVIDERS, cost_usd
from skillopt.models.spec import ModelSpec
from skillopt.skill import CHARS_PER_TOKEN, Skill

MEASURED = Path(__file__).resolve().parents[2] / "perf" / "results" / "agents.json"
# perf/results/agent_prompts.json (python perf/agent_prompts.py, 2026-11-26): system prompt + tools + task wrapping
FIXED_PROMPT_TOKENS = {"claude-code": 12117, "codex": 9385, "mini-swe-agent": 898, "chat": 0}
ASSUMED_TURNS = 10  # model calls of an agent rollout when nothing was measured
ASSUMED_TURN_TOKENS = 400  # what one turn adds to the conversation: a reply, a command and its output
ASSUMED_COMPLETION = 200  # generated tokens per call (the chat harness: its reply)


@dataclass(frozen=True)
class RolloutEstimate:
    harness: str
    target: str
    calls: float  # model calls per rollout
    prompt_tokens: int
    completion_tokens: int
    fixed_prompt_tokens: int  # of each call: the harness's own prompt
    skill_tokens: int
    cost_usd: float | None  # None: no price known
    seconds: float | None  # measured wall seconds per rollout (None: not measured)
    source: str  # "measured: ..." or "estimated: ..."


@dataclass(frozen=True)
class RolloutPlan:
    """Rollouts of the target a run plans: exact for the baseline, the train batches and the test;
    at most for the screen, the gate and consolidation (they stop early)."""

    steps: int
    baseline: int
    train: int
    screen: int
    gate: int
    consolidation: int
    test: int

    @property
    def at_most(self) -> int:
        return self.baseline + self.train + self.screen + self.gate + self.consolidation + self.test


def candidates_per_step(cfg: RunConfig, agent: bool, code: bool = False) -> int:
    """At most this many candidates a step. `code`: the tasks are functions to write, for which an agent
    run also gets the teacher's example run beside a condensed trajectory (optimizer/agent.py)."""
    t = cfg.train
    n = t.max_reflections_per_step + t.rules_per_step + int(t.form_rules) + int(t.merge) + t.ablations_per_step
    n += int(t.description)
    if agent:
        n += t.trajectory_reflections + int(t.procedure) + (1 + int(code)) * int(t.trajectory_demonstration)
        n += int(t.shell_rule)
    n += int(t.template == "learned" and t.shape_edit and not agent)  # the optimizer's reply shape on its own
    n += 0 if agent else t.lessons_per_step  # lessons from the teacher's solutions (chat harness)
    return n + int(t.demonstrations and not (agent and t.trajectory_demonstration))


def plan_rollouts(cfg: RunConfig, sizes: dict[str, int], agent: bool, code: bool = False) -> RolloutPlan:
    t, g = cfg.train, cfg.gate
    steps = cfg.train.epochs * math.ceil(sizes["train"] / max(1, t.batch_size)) if sizes["train"] else 0
    batch = min(t.batch_size, sizes["train"], t.minibatch_size + t.include_successes)  # a candidate's own tasks
    screen = steps * candidates_per_step(cfg, agent, code) * batch * t.trials if t.screen else 0
    return RolloutPlan(steps=steps, baseline=sizes["val"] * g.trials, train=t.epochs * sizes["train"] * t.trials,
                       screen=screen, gate=steps * g.per_step * sizes["val"] * g.trials,
                       consolidation=t.epochs * sizes["val"] * g.trials if t.consolidate else 0,
                       test=2 * sizes["test"] * g.trials)


def measured_row(harness: str, target: str, benchmark: str, path: Path = MEASURED) -> dict | None:
    """The row of `perf/results/agents.json` for this harness and target (this benchmark's first) that
    has token counts; None when there is none."""
    try:
        rows = json.loads(path.read_text(encoding="utf-8")).get("rows", [])
    except (OSError, ValueError):
        return None
    rows = [r for r in rows if r.get("harness") == harness and r.get("target") == target and r.get("prompt_tokens")]
    rows.sort(key=lambda r: r.get("benchmark") != benchmark)
    return rows[0] if rows else None


def estimate_rollout(cfg: RunConfig, target: ModelSpec, skill: Skill, tasks: Sequence[Task],
                     measured: Path = MEASURED) -> RolloutEstimate:
    harness = cfg.harness
    fixed = FIXED_PROMPT_TOKENS.get(harness, FIXED_PROMPT_TOKENS["codex"])
    task_tokens = round(sum(len(t.prompt) for t in tasks) / max(1, len(tasks)) / CHARS_PER_TOKEN)
    row = measured_row(harness, str(target), cfg.benchmark, measured)
    if row is not None:
        calls = float(row.get("turns") or 1.0)
        prompt, completion = round(row["prompt_tokens"]), round(row.get("completion_tokens") or 0)
        source = (f"measured: perf/results/agents.json, {row.get('benchmark')}, n={row.get('n')}, "
                  f"{row.get('date', 'undated')}")
        seconds = row.get("wall_s")
    else:
        calls = 1.0 if harness == "chat" else float(min(ASSUMED_TURNS, cfg.limits.max_turns))
        per_call = fixed + skill.tokens() + task_tokens
        prompt = round(calls * per_call + ASSUMED_TURN_TOKENS * calls * (calls - 1) / 2)
        completion = round(calls * min(ASSUMED_COMPLETION, cfg.limits.max_tokens))
        source = ("estimated: one call of the skill and the task" if harness == "chat" else
                  f"estimated: {calls:g} calls, each re-sending the fixed prompt (perf/results/agent_prompts.json), "
                  f"the skill, the task and the conversation so far")
        seconds = None
    price = 0.0 if target.provider in FREE_PROVIDERS else cost_usd(target, prompt, completion, cfg.models.prices)
    return RolloutEstimate(harness=harness, target=str(target), calls=calls, prompt_tokens=prompt,
                           completion_tokens=completion, fixed_prompt_tokens=fixed, skill_tokens=skill.tokens(),
                           cost_usd=price, seconds=seconds, source=source)


def describe(est: RolloutEstimate, plan: RolloutPlan, concurrency: int = 1) -> list[str]:
    """The lines `skillopt run --dry-run` prints."""
    cost = "unknown (no price for this model: give one in models.prices)" if est.cost_usd is None else \
        f"${est.cost_usd:.4f}"
    lines = [f"one rollout ({est.harness}, {est.target}): ~{est.prompt_tokens:,} prompt + ~{est.completion_tokens:,} "
             f"generated tokens over ~{est.calls:g} model call{'s' if est.calls != 1 else ''} "
             f"(fixed prompt {est.fixed_prompt_tokens:,} + skill {est.skill_tokens:,} tokens a call); cost {cost}",
             f"  {est.source}"]
    if est.cost_usd == 0.0:
        lines.append("  a local model: no cost; " + (
            f"about {est.seconds:.0f} s a rollout (measured), at most ~{est.seconds * plan.at_most / concurrency / 3600:.1f} h "
            f"of rollouts at concurrency {concurrency}" if est.seconds
            else "the time of a rollout is not measured for this harness and model (perf/agents.py measures it)"))
    total = "unknown" if est.cost_usd is None else f"at most ${est.cost_usd * plan.at_most:.2f}"
    lines += [f"planned rollouts: {plan.steps} step{'s' if plan.steps != 1 else ''}; baseline val {plan.baseline}, "
              f"train {plan.train}, screen <= {plan.screen}, gate <= {plan.gate}, consolidation <= {plan.consolidation}, "
              f"test {plan.test}: at most {plan.at_most} rollouts",
              f"target cost of the run: {total} (optimizer calls not counted; a prompt cache makes it less)"]
    return lines
