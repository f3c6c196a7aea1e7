"""The model-graded scorer: a rubric and a judge model grade each answer.

    skillopt.judge("The answer names the capital and nothing else.", model="openai:gpt-5-mini")
    --set benchmark_options.scorer=judge --set benchmark_options.rubric="..." \\
    --set benchmark_options.judge_model=openai:gpt-5-mini          (a .jsonl benchmark)

Every call goes through the run's `Models` under the role `judge`: metered apart from the target
and the optimizer (usage tables, `calls.jsonl`, budgets), priced, cached by request. The judge's
model and rubric are part of the settings that matter: change either and no rollout is reused.
A judge reply that cannot be read (after one repair) scores zero with feedback saying so; a judge
call that fails after its retries stops the run (a broken scorer is never a zero score).
"""

from __future__ import annotations

import hashlib

from pydantic import BaseModel, Field

from skillopt.benchmarks.base import Score, Task
from skillopt.errors import BadInput, ModelCallError
from skillopt.models.types import Message
from skillopt.prompts import render

DEFAULT_THRESHOLD = 0.5


class JudgeReply(BaseModel):
    score: float = Field(ge=0, le=1)
    passed: bool | None = None
    feedback: str = ""


class JudgeScorer:
    """`(task, output) -> Score` by asking `model` to grade `output` against `rubric`."""

    def __init__(self, rubric: str = "", model: str | None = None, judge_model: str | None = None,
                 threshold: float = DEFAULT_THRESHOLD, max_tokens: int = 400):
        model = model or judge_model
        if not rubric or not str(rubric).strip():
            raise BadInput("the judge scorer needs a rubric: say what a good answer does "
                           "(--set benchmark_options.rubric=\"...\")")
        if not model:
            raise BadInput("the judge scorer needs a model: --set benchmark_options.judge_model=PROVIDER:MODEL "
                           "(or skillopt.judge(rubric, model=...))")
        from skillopt.models.spec import parse_model_spec

        self.spec = parse_model_spec(model)
        self.rubric, self.threshold, self.max_tokens = str(rubric).strip(), float(threshold), max_tokens
        self.models = None  # the run's Models, bound before any rollout (engine.setup)
        self.__name__ = "judge"

    @property
    def version(self) -> str:
        """What the rollout cache keys on: the judge model, the rubric and the pass threshold."""
        raw = f"{self.spec}\x1f{self.rubric}\x1f{self.threshold}"
        return "judge-" + hashlib.sha256(raw.encode()).hexdigest()[:12]

    def model_specs(self) -> dict[str, str]:
        return {"judge": str(self.spec)}

    def bind_models(self, models) -> None:
        self.models = models

    async def __call__(self, task: Task, output: str) -> Score:
        if self.models is None:
            raise RuntimeError("the judge scorer was not given the run's models (engine.setup binds them)")
        if not output.strip():
            return Score(hard=0, soft=0, feedback="empty answer")
        prompt = render("judge.md.j2", task=task.prompt, reference=task.reference, rubric=self.rubric,
                        output=output[-6000:])
        reply = await self.models.chat_json(self.spec, [Message(role="user", content=prompt)], JudgeReply,
                                            role="judge", max_tokens=self.max_tokens, temperature=0.0)
        if not isinstance(reply, JudgeReply):
            if reply.transient:
                raise ModelCallError(f"the judge {self.spec} could not be reached: {reply.error}", transient=True)
            return Score(hard=0, soft=0, feedback=f"the judge's reply could not be read: {reply.error}")
        passed = reply.passed if reply.passed is not None else reply.score >= self.threshold
        return Score(hard=float(passed), soft=reply.score,
                     feedback=reply.feedback.strip() or ("meets the rubric" if passed else "does not meet the rubric"))
