"""Answers shown: train questions beside the answers the data expects (`train.answer_examples`).

Where an answer is a short text (the `exact` and `f1` scorers: a name, a phrase, a date), the scorer's
feedback on a failed train rollout says what answer was expected, and so what the data holds: its
form (the bare noun phrase Jeopardy wants, not a sentence) and often the fact itself. A rule can
state the form; a small target follows examples better. Measured by `perf/knowledge_headroom.py`
(split seed 0, val and test, n=100, the embedded 1.5B as target): four Jeopardy train questions
shown with their expected answers lifted it +0.11 [+0.03, +0.18], where one hand-written rule
stating the convention gave +0.02 [-0.03, +0.07]; on SQuAD and Natural Questions neither moved it.

This proposer makes at most one `answer-examples` candidate a step: a section of up to `count` of
the step's train tasks, each its question (without the passage before it or the benchmark's
answer-format line after it) and `Answer: <the first expected answer>`, the failed ones first
(their answers are what the feedback taught). It costs no optimizer call. The examples quote their
own train tasks by design, as a worked example does (the leakage check holds them to that); the
gate decides whether showing them helps. Tasks with a numeric or lettered answer are left out: an
answer alone would teach a reasoning task to answer at once.

The candidate is screened on the step's other train tasks, the failed ones first, not on those it
quotes: a target that sees a question with its answer copies it, so a screen there passed in every
Jeopardy run of the suite's arms (0 -> 4) and said nothing about the questions the skill will meet.
With no other task to screen on, no candidate is made.
"""

from __future__ import annotations

from skillopt.benchmarks.base import Task
from skillopt.benchmarks.qa import ANSWER_FORMAT
from skillopt.edits import Edit
from skillopt.optimizer.propose import Proposal, SearchState
from skillopt.optimizer.reflect import EXPECTED_ANSWERS, anchor_before_protected
from skillopt.record import Candidate, Reflection

ORIGIN = "answer-examples"
SECTION = EXPECTED_ANSWERS
SCORERS = ("exact", "f1")  # the scorers of short text answers
MAX_ANSWER_WORDS = 12  # a longer expected answer is a passage, not a convention to show


def question_of(task: Task) -> str | None:
    """The task's question as the agent saw it, less the passage before it and the answer-format line
    after it; None when its answer is not a short text."""
    scorer = task.metadata.get("scorer")
    if task.kind != "qa" or scorer not in SCORERS or task.choices or not task.answers:
        return None
    if len(task.answers[0].split()) > MAX_ANSWER_WORDS:
        return None
    text = task.prompt.strip().removesuffix(ANSWER_FORMAT[scorer]).strip()
    if text.startswith("Context:\n"):  # build_prompt: the passage, then the question
        text = text.rpartition("\n\n")[2].strip()
    return text or None


class AnswerExamplesProposer:
    """One candidate a step: the step's train questions with their expected answers, failed ones first."""

    name = "answer-examples"

    def __init__(self, count: int = 4):
        self.count = count

    async def propose(self, state: SearchState) -> Proposal:
        if any(s.title == SECTION for s in state.skill.sections()):
            return Proposal()  # the skill shows answers already
        seen, failed, passed = set(), [], []  # (task, its question)
        for r in state.scored:
            task = state.tasks.get(r.task_id)
            if r.error or task is None or task.id in seen or (question := question_of(task)) is None:
                continue
            seen.add(task.id)
            (failed if r.failed else passed).append((task, question))
        if not failed:  # the feedback taught nothing the target does not already do
            return Proposal()
        ranked = failed + passed
        shown, others = ranked[: self.count], ranked[self.count:]
        if not others:  # nothing left to screen it on but the answers it shows
            return Proposal()
        text = f"## {SECTION}\n\n" + "\n\n".join(f"{q}\nAnswer: {t.answers[0].strip()}" for t, q in shown)
        if any(e.text == text for e in state.rejected):
            return Proposal()
        ids = [t.id for t, _ in shown]
        why = (f"{len(failed)} of {len(seen)} train answers were not the expected ones: "
               f"{len(shown)} questions shown with the answers the data expects")
        edit = Edit(op="add", anchor=anchor_before_protected(state.skill), text=text, rationale=why, evidence=ids)
        screen_on = [t.id for t, _ in others[: self.count]]  # evidence: the quoted ones; screened on the rest
        candidate = Candidate(id="", step=state.step, origin=ORIGIN, parent=state.version, edits=[edit],
                              rationale=why, sources=screen_on)
        return Proposal([candidate], [Reflection(minibatch=ids, edits=[edit], analysis=why)])
