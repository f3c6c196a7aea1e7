"""The `chat` harness: the skill is the system prompt, the task the user message, one call."""

from __future__ import annotations

import time
from pathlib import Path

from skillopt.benchmarks.base import RolloutOutput, Task
from skillopt.errors import ModelCallError
from skillopt.harness.base import Limits, Rollout, Usage
from skillopt.harness.registry import HarnessContext, harness
from skillopt.models.prices import cost_usd
from skillopt.models.spec import ModelSpec
from skillopt.models.types import ChatRequest, Message
from skillopt.prompts import chat_system
from skillopt.skill import Skill
from skillopt.traces.events import ErrorEvent, MessageEvent, SkillUsedEvent, UsageEvent


class ChatHarness:
    name = "chat"
    apis: frozenset[str] = frozenset()
    skill_dir: str | None = None  # the skill goes in the system prompt, not on disk
    prompt_only = True  # no workspace folder (harness.base.PromptOnly)
    sets_temperature = True  # Limits.temperature and seed reach the model (deterministic rollouts)

    def __init__(self, ctx: HarnessContext):
        self.models = ctx.models
        self._systems: dict[str, str] = {}  # skill sha -> its system prompt, rendered once

    def system_prompt(self, skill: Skill) -> str:
        if skill.sha not in self._systems:
            if len(self._systems) >= 32:
                self._systems.pop(next(iter(self._systems)))
            self._systems[skill.sha] = chat_system(skill)
        return self._systems[skill.sha]

    async def run(self, task: Task, skill: Skill, ws: Path, target: ModelSpec, limits: Limits) -> Rollout:
        system = self.system_prompt(skill)
        user = task.prompt if not task.context else f"{task.context}\n\n{task.prompt}"
        req = ChatRequest(
            messages=(Message(role="system", content=system), Message(role="user", content=user)),
            max_tokens=limits.max_tokens, temperature=limits.temperature, stop=limits.stop, seed=limits.seed,
        )
        trace = [  # the skill is stored once per version (skills/), not again in every rollout's trace
            MessageEvent(role="system", text=f"(system prompt: skill {skill.name} sha {skill.short_sha}, "
                                             f"{len(system)} characters; the document is in the run's skills/)"),
            SkillUsedEvent(name=skill.name, how="system prompt"),
            MessageEvent(role="user", text=user),
        ]
        t0 = time.monotonic()
        try:
            resp = await self.models.chat(target, req, role="target", cache=False)
        except ModelCallError as e:
            trace.append(ErrorEvent(t=time.monotonic() - t0, message=str(e)))
            return Rollout(task_id=task.id, trace=trace, duration_s=time.monotonic() - t0, error=str(e),
                           error_kind="infra" if e.transient else "agent")
        dt = time.monotonic() - t0
        cost = cost_usd(target, resp.input_tokens, resp.output_tokens, self.models.prices)
        trace.append(MessageEvent(t=dt, role="assistant", text=resp.text))
        trace.append(UsageEvent(t=dt, input_tokens=resp.input_tokens, output_tokens=resp.output_tokens,
                                cost_usd=cost, turns=1))
        usage = Usage(input_tokens=resp.input_tokens, output_tokens=resp.output_tokens, cost_usd=cost, calls=1)
        error = None if resp.text.strip() else f"empty answer (finish_reason={resp.finish_reason})"
        return Rollout(task_id=task.id, output=RolloutOutput(text=resp.text), trace=trace, usage=usage,
                       duration_s=dt, error=error, error_kind="agent" if error else None)


@harness("chat", description="one chat-completion call per task; the skill is the system prompt")
def _make_chat(ctx: HarnessContext) -> ChatHarness:
    return ChatHarness(ctx)
