"""Lessons from a contrast: what a reply that solved a task did that the target's failed reply missed.

The reflections and the rules show a small optimizer model several failures at once and ask for an
instruction that covers them; the 1.5B answers with the instructions it was given, restated ("reason
briefly, then give the final answer in the requested format"), or with one task's own details. ACE's
reflector instead reads one trajectory against the ground truth and names what went wrong. Here the
ground truth is a whole reply that solved the task: the teacher's (the optimizer model asked the same
failed train task, `demonstrate.Teacher`, whose solutions of a step the worked example shares), checked
by the scorer. Shown the task, the target's failed reply, the scorer's feedback and the solving reply,
the optimizer writes one lesson: the method, rule or fact the solving reply applied that the failed one
missed, for other tasks of this kind (a method, a convention of the answers, a check before answering).

A lesson is one bullet of the skill's rules section, origin `lesson`, one candidate each (screened,
then gated); `train.lessons_per_step` sets how many a step (0: none). It is a reflection on traces:
what it says comes from the optimizer reading them, not from this code. A lesson that restates its
prompt, speaks of the scorer or is already in the skill is not proposed; the leakage check then
refuses one that copies a shown task.
"""

from __future__ import annotations

import asyncio
import re
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from skillopt.benchmarks.base import Task
from skillopt.models.router import Models, StructuredFailure
from skillopt.models.spec import ModelSpec
from skillopt.models.types import Message
from skillopt.optimizer.demonstrate import Teacher, teacher_instruction
from skillopt.optimizer.propose import Proposal, SearchState
from skillopt.optimizer.reply_shape import whole_sentences
from skillopt.optimizer.rules import prompt_grams, reply_tail, rule_edit, rules_in, speaks_of_the_scorer, word_grams
from skillopt.optimizer.types import ScoredRollout, bounded_schema
from skillopt.prompts import render
from skillopt.record import Candidate, Reflection

if TYPE_CHECKING:
    from skillopt.optimizer.reply_shape import Shapes
    from skillopt.optimizer.template import Template

ORIGIN = "lesson"
MAX_LESSON_CHARS = 300
MAX_SOLVED_CHARS = 1200  # the solving reply, shown whole up to this
SCREENED = 4  # train tasks a lesson is screened on: its own, then other failed ones


class LessonReply(BaseModel):
    missed: str = Field("", description="what the failed reply did wrong or left out")
    lesson: str = Field("", description="one general lesson for other tasks of this kind")


# words that open a sentence of a task or a lesson alike: never taken for a task's own name
_FUNCTION_WORDS = {"the", "when", "what", "how", "which", "who", "why", "where", "if", "in", "for", "each", "every",
                   "to", "after", "before", "then", "this", "that", "there", "these", "those", "answer", "end",
                   "always", "never", "write", "give", "find", "use", "check", "first", "one", "she", "her",
                   "his", "they", "their", "its", "and", "but", "some", "all", "any", "let", "suppose"}


# a sentence about the task at hand or the two replies, not about tasks of its kind (seen: "In this case,
# the problem states that ...", "the failed reply should have calculated ...")
_ABOUT_THE_TASK = re.compile(r"^(in this (case|problem|task|example)|here\b|therefore|thus|so\b)|\b(failed|accepted) "
                             r"(reply|answer)|\bthe problem states\b|\bthis (problem|task)\b", re.I)


_TASK_OPENER = re.compile(r"(to solve|to answer|for|in) this (problem|task|question),? ", re.I)


def general_sentences(lesson: str, task_prompt: str) -> str:
    """The lesson's sentences that hold for other tasks: a sentence that repeats the prompt's own
    instructions, or names a number or a capitalized name of its task, is dropped. Seen (GSM8K, the
    1.5B): "Always convert all quantities to the same unit before combining them. In this case,
    convert 12 miles/day to miles/hour ..." (the first an echo of the prompt as it then was, the
    second about one task). A lesson cut by its length keeps its whole sentences."""
    numbers = set(re.findall(r"[0-9]+(?:\.[0-9]+)?", task_prompt)) - {"0", "1", "2"}  # "b - a + 1" is general
    lower = set(re.findall(r"\b[a-z]+\b", task_prompt))
    names = {w for w in re.findall(r"\b[A-Z][a-z]{2,}\b", task_prompt) if w.lower() not in lower | _FUNCTION_WORDS}
    kept = []
    for sentence in re.split(r"(?<=(?<![0-9])[.!?]) +", whole_sentences(lesson)):
        opener = _TASK_OPENER.match(sentence)  # "To solve this problem, divide ..." says something general
        if opener and sentence[opener.end():]:
            sentence = sentence[opener.end()].upper() + sentence[opener.end() + 1:]
        if restates_prompt(sentence) or set(re.findall(r"[0-9]+(?:\.[0-9]+)?", sentence)) & numbers:
            continue
        if _ABOUT_THE_TASK.search(sentence):
            continue
        if set(re.findall(r"\b[A-Z][a-z]{2,}\b", sentence)) & names:
            continue
        kept.append(sentence)
    return " ".join(kept)


def restates_prompt(lesson: str, n: int = 5) -> bool:
    """The lesson repeats a run of `n` words of the prompt's own instructions (a small model echoes them)."""
    return bool(word_grams(lesson, n) & _prompt_grams(n))


def _prompt_grams(n: int) -> frozenset[tuple[str, ...]]:
    return prompt_grams("lesson.md.j2", n, skill_text="", task="", failed="", feedback="", solved="")


async def lesson_of(models: Models, spec: ModelSpec, skill_text: str, task: Task, failed: ScoredRollout,
                    solved: str, max_tokens: int | None = None,
                    temperature: float | None = None) -> tuple[str | None, str]:
    """(the lesson, or None; what happened) from one failed rollout and a reply that solved its task."""
    prompt = render("lesson.md.j2", skill_text=skill_text, task=task.prompt.strip(), failed=reply_tail(failed.output),
                    feedback=failed.feedback, solved=solved.strip()[:MAX_SOLVED_CHARS])
    schema = bounded_schema(LessonReply, missed=(0, 300), lesson=(20, MAX_LESSON_CHARS))
    reply = await models.chat_json(spec, [Message(role="user", content=prompt)], LessonReply, role="optimizer",
                                   max_tokens=max_tokens, temperature=temperature, json_schema=schema)
    if isinstance(reply, StructuredFailure):
        return None, f"the optimizer wrote no lesson: {reply.error}"
    written = " ".join(reply.lesson.split())[:MAX_LESSON_CHARS]
    lesson = general_sentences(written, task.prompt)
    if len(lesson.split()) < 5:
        if restates_prompt(written):
            return None, f"the lesson restates the prompt's own instructions: {written[:120]}"
        return None, f"no general lesson: {written[:120]!r}"
    if speaks_of_the_scorer(lesson):
        return None, f"the lesson speaks of the expected answers, which the agent never sees: {lesson[:120]}"
    return lesson, f"{reply.missed.strip()[:200]} -> {lesson}"


class LessonProposer:
    """Up to `count` lessons a step, each from one failed train task the teacher solved."""

    name = "lessons"

    def __init__(self, models: Models, spec: ModelSpec, teacher: Teacher, template: Template,
                 shapes: Shapes | None = None, count: int = 2, max_tokens: int | None = None,
                 temperature: float | None = None):
        self.models, self.spec, self.teacher, self.template, self.shapes = models, spec, teacher, template, shapes
        self.count, self.max_tokens, self.temperature = count, max_tokens, temperature

    async def propose(self, state: SearchState) -> Proposal:
        show_work, _, _ = await teacher_instruction(self.template, self.shapes, state)
        failed = {r.task_id: r for r in state.scored if r.failed and not r.error}
        solved = [(t, reply) for t, reply in (await self.teacher.solve(state, show_work)).solved if t.id in failed]
        if not solved:
            return Proposal()
        pairs = solved[: self.count]
        found = await asyncio.gather(*[
            lesson_of(self.models, self.spec, state.skill.render(), t, failed[t.id], reply, self.max_tokens,
                      self.temperature) for t, reply in pairs])
        candidates, notes, have = [], [], {" ".join(r.split()).lower() for r in rules_in(state.skill)}
        for (task, _), (lesson, what) in zip(pairs, found):
            if lesson is not None and lesson.lower() in have:
                lesson, what = None, f"the skill has this lesson already: {lesson}"
            if lesson is None:
                notes.append(Reflection(minibatch=[task.id], analysis=what, error=f"no lesson: {what}"))
                continue
            have.add(lesson.lower())
            why = f"lesson from train task {task.id}, failed, against a reply that solved it: {what}"[:400]
            edit = rule_edit(state.skill, lesson, why, [task.id])
            others = [i for i in failed if i != task.id][:SCREENED - 1]  # the screen: its own task, then others
            candidates.append(Candidate(id="", step=state.step, origin=ORIGIN, parent=state.version, edits=[edit],
                                        rationale=why, sources=[task.id, *others]))
            notes.append(Reflection(minibatch=[task.id], edits=[edit], analysis=why))
        return Proposal(candidates, notes)
