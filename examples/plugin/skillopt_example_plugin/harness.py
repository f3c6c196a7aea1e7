"""The `user-prompt` harness: like `chat`, but the skill goes into the user message, before the task
(for models that follow user text better than a system prompt)."""

from __future__ import annotations

from pathlib import Path

from skillopt.benchmarks.base import Task
from skillopt.harness.base import Limits, Rollout
from skillopt.harness.chat import ChatHarness
from skillopt.harness.registry import HarnessContext, harness
from skillopt.models.spec import ModelSpec
from skillopt.skill import Skill


class UserPromptHarness(ChatHarness):
    name = "user-prompt"

    async def run(self, task: Task, skill: Skill, ws: Path, target: ModelSpec, limits: Limits) -> Rollout:
        framed = task.model_copy(update={"prompt": f"Instructions:\n{skill.strip_markers().body}\n\nTask:\n{task.prompt}"})
        rollout = await super().run(framed, skill.model_copy(update={"body": ""}), ws, target, limits)
        return rollout.model_copy(update={"task_id": task.id})


@harness("user-prompt", description="one chat call per task; the skill leads the user message (example plugin)")
def _make(ctx: HarnessContext) -> UserPromptHarness:
    return UserPromptHarness(ctx)
