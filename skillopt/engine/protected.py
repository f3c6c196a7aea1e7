"""Whether a protected section of the skill itself makes the target fail: told to the user, never edited.

A protected region is the user's: no candidate may change it. So when its own wording is what makes
the target fail, the optimizer cannot find the fix, and the run says nothing. That happened: the
mbpp-bash seed skill's protected code format ("Reply with the complete code in one ```bash block")
echoed the task's own file instruction, and the 1.5B replied with the file name alone on a third of
the test tasks (perf/results/skill_variants-mbpp-bash.json: without that line, +0.15 to +0.17 on two
development seeds of three).

At the first step whose train batch has a failure, each protected region is left out of the
incumbent in turn and that skill is tried on the batch's tasks, paired with the incumbent's rollouts
there: the tasks it solves that the incumbent failed, and those it fails that the incumbent solved.
A region whose removal solves at least two more than it loses is reported as a likely cause
(`RunSummary.protected`, the final table, a note while the run goes on). Eight tasks cannot
prove it; they are enough to say where to look, at the cost of one batch of rollouts per region.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from skillopt.benchmarks.base import Task
from skillopt.engine.gating import Side, screen
from skillopt.engine.rollouts import RolloutRunner
from skillopt.skill import Skill, strip_marker_comments
from skillopt.stats import EPS
from skillopt.store.schema import ProtectedCheck, RolloutRecord

MIN_NET = 2  # solved minus lost without the region, on the batch, for it to be named a likely cause
SHOWN_CHARS = 100  # the region as named in the summary


def without_region(skill: Skill, span: tuple[int, int]) -> Skill:
    """`skill` with the protected region at `span` (markers included) left out."""
    body = skill.body[: span[0]] + skill.body[span[1]:]
    return skill.with_body(re.sub(r"\n{3,}", "\n\n", body).strip() + "\n")


def region_text(skill: Skill, span: tuple[int, int]) -> str:
    """The region's own words, as the agent reads them, cut for a one-line report."""
    text = " ".join(strip_marker_comments(skill.body[span[0]: span[1]]).split())
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."


async def check_regions(runner: RolloutRunner, skill: Skill, add_version, tasks: Sequence[Task],
                        incumbent: dict[str, RolloutRecord], metric: str, step: int) -> list[ProtectedCheck]:
    """Each protected region of `skill` left out in turn, on `tasks` against the `incumbent` rollouts there.
    `add_version(skill) -> int` stores a tried skill (the rollouts name their version)."""
    out = []
    for span in skill.protected_spans():
        variant = without_region(skill, span)
        tried = await screen(runner, Side(add_version(variant), variant), tasks, incumbent, metric)
        res = tried.result
        pairs = list(zip(res.incumbent, res.candidate))
        solved = sum(b > a + EPS for a, b in pairs if a < 1.0)
        out.append(ProtectedCheck(step=step, text=region_text(skill, span), tasks=len(pairs),
                                  failed=sum(a < 1.0 for a, _ in pairs), solved_without=solved, lost_without=res.losses,
                                  likely_cause=solved - res.losses >= MIN_NET, rollouts=res.rollouts))
    return out
