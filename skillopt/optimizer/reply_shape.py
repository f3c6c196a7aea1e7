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

The same instruction is also a candidate on its own (`ShapeProposer`, origin `shape`,
`train.shape_edit`): a reflection on the reply's form, written by the optimizer from the failed
traces and verified before it is proposed. It becomes a candidate only when the teacher, asked it,
solved at least one of the step's failed train tasks (the self-verification on its evidence); then
the screen runs the target with it in the skill on those tasks, then the gate. So a lift from the
instruction alone is measured apart from the worked example that shows it.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from skillopt.benchmarks.base import Task
from skillopt.edits import Edit
from skillopt.models.router import Models, StructuredFailure
from skillopt.models.spec import ModelSpec
from skillopt.models.types import Message
from skillopt.optimizer.leakage import LeakageCheck
from skillopt.optimizer.propose import Proposal, SearchState
from skillopt.optimizer.reflect import section_edit
from skillopt.optimizer.rules import prompt_grams, reply_tail, speaks_of_the_scorer, word_grams
from skillopt.optimizer.types import ScoredRollout, bounded_schema
from skillopt.prompts import render
from skillopt.record import Candidate, Reflection
from skillopt.skill import Skill

if TYPE_CHECKING:
    from skillopt.optimizer.demonstrate import Teacher

SHOWN_FAILURES = 4
MAX_SHAPE_CHARS = 300
SECTION = "How to reply"  # where a shape candidate puts the instruction


class ShapeReply(BaseModel):
    shape: str = Field("", description="how a reply to tasks of this kind should be written")


def whole_sentences(text: str) -> str:
    """The text up to its last full stop when a reply cap cut it mid-sentence (a skill a user keeps
    does not end in half a word); as it is when no sentence ends in it."""
    if text.endswith((".", "!", "?")):
        return text
    ends = [m.start() for m in re.finditer(r"(?<![0-9])[.!?](?= )", text)]  # "2. " numbers a step, ends nothing
    return text[:ends[-1] + 1] if ends and ends[-1] >= 15 else text


def own_sentences(shape: str, n: int = 5) -> str:
    """The shape's sentences that repeat no run of `n` words of the prompt's own instructions. Seen
    (GSM8K, split seed 1): the 1.5B closed its instruction with the prompt's "never copy names,
    numbers or phrases", which is said to the optimizer, not to the agent."""
    sentences = re.split(r"(?<=(?<![0-9])[.!?]) +", shape)
    return " ".join(s for s in sentences if not word_grams(s, n) & _prompt_grams(n))


def _prompt_grams(n: int) -> frozenset[tuple[str, ...]]:
    """The shape prompt's own instructions, as runs of `n` words."""
    return prompt_grams("reply_shape.md.j2", n, failures=[], passes=[], tail=reply_tail, reply_cap=1)


async def learned_shape(models: Models, spec: ModelSpec, scored: Sequence[ScoredRollout], tasks: dict[str, Task],
                        skill: Skill, max_tokens: int | None = None) -> tuple[str | None, str]:
    """(the instruction, or None; what happened), from this step's failed train rollouts. `max_tokens`
    caps the target's replies (`limits.max_tokens`): the optimizer is told it, since an instruction
    whose replies run past it is cut before its answer (seen: "include the following steps: 1.
    Analyze ..." made the 1.5B write 320-token replies that never reached their answer line)."""
    failures = [r for r in scored if r.failed and not r.error][:SHOWN_FAILURES]
    if not failures:
        return None, "no failed train rollout to read"
    passes = [r for r in scored if not r.failed and not r.error][:1]
    prompt = render("reply_shape.md.j2", failures=failures, passes=passes, tail=reply_tail, reply_cap=max_tokens)
    schema = bounded_schema(ShapeReply, shape=(15, MAX_SHAPE_CHARS))
    reply = await models.chat_json(spec, [Message(role="user", content=prompt)], ShapeReply, role="optimizer",
                                   max_tokens=max_tokens, temperature=0.0, json_schema=schema)
    if isinstance(reply, StructuredFailure):
        return None, f"the optimizer wrote no shape: {reply.error}"
    written = whole_sentences(" ".join(reply.shape.split())[:MAX_SHAPE_CHARS])
    shape = own_sentences(written)
    if len(shape) < 15:
        return None, ("the optimizer wrote no shape" if len(written) < 15 else
                      f"the shape restates the prompt's own instructions: {written[:120]}")
    if speaks_of_the_scorer(shape):
        return None, f"the shape speaks of the expected answers, which the agent never sees: {shape[:120]}"
    shown = [tasks[r.task_id] for r in scored if r.task_id in tasks]
    leaks = LeakageCheck(shown, skill.render()).check([Edit(op="add", text=shape)])
    if leaks:
        return None, f"the shape {leaks[0]}"
    return shape, f"reply shape written by the optimizer: {shape}"


class Shapes:
    """The step's learned shape: one optimizer call a step, shared by the worked example and the
    shape candidate (both ask for it in the same step, concurrently)."""

    def __init__(self, models: Models, spec: ModelSpec, max_tokens: int | None = None):
        self.models, self.spec, self.max_tokens = models, spec, max_tokens
        self._step: int | None = None
        self._shape: asyncio.Future[tuple[str | None, str]] | None = None

    async def of(self, state: SearchState) -> tuple[str | None, Reflection]:
        """(the shape, or None; the note that says what happened, for the step's reflections)."""
        if self._shape is None or self._step != state.step:
            self._step = state.step
            self._shape = asyncio.ensure_future(learned_shape(self.models, self.spec, state.scored, state.tasks,
                                                              state.skill, self.max_tokens))
        shape, note = await self._shape
        failed = [r.task_id for r in state.scored if r.failed][:SHOWN_FAILURES]
        return shape, Reflection(minibatch=failed, analysis=note, error=None if shape else note)


class ShapeProposer:
    """The learned shape as an instruction in the skill, once the teacher following it solved failed
    train tasks (module docstring)."""

    name = "shape"

    def __init__(self, shapes: Shapes, teacher: Teacher):
        self.shapes, self.teacher = shapes, teacher

    async def propose(self, state: SearchState) -> Proposal:
        shape, _ = await self.shapes.of(state)  # the worked example records the shape's own note
        if shape is None:
            return Proposal()
        done = await self.teacher.solve(state, shape)
        tried, solved = done.tried, [t.id for t, _ in done.solved]
        check = f"the teacher asked it solved {len(solved)} of {len(tried)} failed train tasks"
        if not solved:
            return Proposal(reflections=[Reflection(minibatch=[t.id for t in tried], analysis=f"{check}: {shape}",
                                                    error=f"shape not proposed: {check}")])
        why = f"reply shape written by the optimizer from the failed train replies; {check} ({', '.join(solved)})"
        others = [t.id for t in tried if t.id not in solved]
        edit = section_edit(state.skill, SECTION, f"## {SECTION}\n\n{shape}\n", why, solved)
        return Proposal([Candidate(id="", step=state.step, origin="shape", parent=state.version, edits=[edit],
                                   rationale=why, sources=(solved + others)[:SHOWN_FAILURES])],
                        [Reflection(minibatch=solved, analysis=why)])
