"""The reply's shape, written by the optimizer model: `train.template=learned`.

The `working-first` template tells the teacher, and every worked example, to write numbered steps
before the answer: fixed wording in the code, and on GSM8K all of the measured lift (with the
template off, no worked example was proposed at all: the teacher and the target both answered with
the bare number, and an example must show more than its answer). `learned` asks the optimizer
instead: shown a step's failed train replies beside the answers expected, it writes one instruction
for how a reply to tasks of this kind should be written. That instruction is what the teacher is
asked on top of each failed task and the line that opens the worked example, so the example's shape
comes from the traces, not from this code. An instruction that speaks of the scorer, or copies a
shown task (its words, answer, quantities or names), is not used; the demonstration then falls back
to the neutral wording of `none`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from pydantic import BaseModel, Field

from skillopt.benchmarks.base import Task
from skillopt.edits import Edit
from skillopt.models.router import Models, StructuredFailure
from skillopt.models.spec import ModelSpec
from skillopt.models.types import Message
from skillopt.optimizer.leakage import LeakageCheck
from skillopt.optimizer.rules import reply_tail, speaks_of_the_scorer
from skillopt.optimizer.types import ScoredRollout
from skillopt.prompts import render
from skillopt.skill import Skill

SHOWN_FAILURES = 4
MAX_SHAPE_CHARS = 300


class ShapeReply(BaseModel):
    shape: str = Field("", description="how a reply to tasks of this kind should be written")


def whole_sentences(text: str) -> str:
    """The text up to its last full stop when a reply cap cut it mid-sentence (a skill a user keeps
    does not end in half a word); as it is when no sentence ends in it."""
    if text.endswith((".", "!", "?")):
        return text
    ends = [m.start() for m in re.finditer(r"(?<![0-9])[.!?](?= )", text)]  # "2. " numbers a step, ends nothing
    return text[:ends[-1] + 1] if ends and ends[-1] >= 15 else text


async def learned_shape(models: Models, spec: ModelSpec, scored: Sequence[ScoredRollout], tasks: dict[str, Task],
                        skill: Skill, max_tokens: int | None = None) -> tuple[str | None, str]:
    """(the instruction, or None; what happened), from this step's failed train rollouts."""
    failures = [r for r in scored if r.failed and not r.error][:SHOWN_FAILURES]
    if not failures:
        return None, "no failed train rollout to read"
    passes = [r for r in scored if not r.failed and not r.error][:1]
    prompt = render("reply_shape.md.j2", failures=failures, passes=passes, tail=reply_tail)
    schema = ShapeReply.model_json_schema()
    schema["properties"]["shape"].update(minLength=15, maxLength=MAX_SHAPE_CHARS)
    schema["required"] = ["shape"]
    reply = await models.chat_json(spec, [Message(role="user", content=prompt)], ShapeReply, role="optimizer",
                                   max_tokens=max_tokens, temperature=0.0, json_schema=schema)
    if isinstance(reply, StructuredFailure):
        return None, f"the optimizer wrote no shape: {reply.error}"
    shape = whole_sentences(" ".join(reply.shape.split())[:MAX_SHAPE_CHARS])
    if len(shape) < 15:
        return None, "the optimizer wrote no shape"
    if speaks_of_the_scorer(shape):
        return None, f"the shape speaks of the expected answers, which the agent never sees: {shape[:120]}"
    shown = [tasks[r.task_id] for r in scored if r.task_id in tasks]
    leaks = LeakageCheck(shown, skill.render()).check([Edit(op="add", text=shape)])
    if leaks:
        return None, f"the shape {leaks[0]}"
    return shape, f"reply shape written by the optimizer: {shape}"
