"""Demonstrations: a worked example in the skill, taken from a train task that was solved.

The idea behind DSPy's bootstrapped few-shot demonstrations, for one document: a train rollout
that the benchmark scored correct becomes a "## Worked example" section (the task and the reply
that solved it). The replies to choose from are the target's own successful rollouts of this
step and, when the tasks are questions, the optimizer model's replies to a few failed train tasks
under the current skill (a teacher, as DSPy's teacher programs), of which only those the benchmark
scores correct count. The example is the shortest of them that shows its work, since the target
copies the example's length and every later rollout pays for it (the target's own successes are
often its longest replies, the teacher is asked for one step per line), and a reply is shown
whole or not at all: one cut short ends without the answer line it is there to teach. A
demonstration is a candidate like any other: screened, then gated. Only train tasks are ever used.
"""

from __future__ import annotations

import asyncio
import tempfile
from dataclasses import dataclass
from pathlib import Path

from skillopt.benchmarks.base import Benchmark, RolloutOutput, Task
from skillopt.edits import Edit
from skillopt.models.router import Models
from skillopt.models.spec import ModelSpec
from skillopt.models.types import ChatRequest, Message
from skillopt.optimizer.propose import Proposal, SearchState
from skillopt.optimizer.reflect import WORKED_EXAMPLE, section_edit
from skillopt.optimizer.reply_shape import Shapes
from skillopt.optimizer.template import LEARNED, WORKING_FIRST, Template
from skillopt.prompts import chat_system
from skillopt.record import Candidate, Reflection
from skillopt.skill import Skill

SECTION = WORKED_EXAMPLE
MAX_TASK_CHARS = 700
MAX_REPLY_CHARS = 1200  # a longer reply is not made an example (it is never cut)
# failed train tasks the teacher solves per step, at once: the target copies the example's length,
# and every later rollout pays for it. On the 1.5B's own step-1 batches of gsm8k split seeds 0-4,
# the shortest correct reply among 5 tasks was at most as long as among 3, and much shorter on
# two (272 characters against 730; 254 against 367); 7 found none shorter than 5
ATTEMPTS = 5


def example_section(task: Task, reply: str, follow: str = WORKING_FIRST.follow) -> str:
    """The example's section: `follow` opens it (a small model copies an example's shape only
    when told to; what it says is the template's, `train.template`)."""
    prompt = task.prompt.strip()
    if len(prompt) > MAX_TASK_CHARS:
        prompt = prompt[:MAX_TASK_CHARS].rstrip() + " ..."
    return (f"## {SECTION}\n\n{follow}\n\nTask:\n{prompt}\n\nA reply that solved it:\n"
            f"{reply.strip()}\n")


def demonstration_edit(skill: Skill, task: Task, reply: str, follow: str = WORKING_FIRST.follow) -> Edit:
    """Replace the skill's worked example when it has one (examples rotate), else add one before
    the first protected section (or at the end)."""
    return section_edit(skill, SECTION, example_section(task, reply, follow),
                        f"a worked example from train task {task.id}, solved", [task.id])


@dataclass(frozen=True)
class Solutions:
    """What the teacher did for one step and instruction: the tasks it tried, and (task, reply) for
    those whose reply the scorer marks correct."""

    tried: list[Task]
    solved: list[tuple[Task, str]]


class Teacher:
    """The optimizer model solving up to `attempts` of a step's failed train tasks under the skill and
    one instruction (DSPy's teacher), and the replies the scorer accepts. The worked example and the
    shape candidate (optimizer/reply_shape.py) ask for the same solutions: each step and instruction
    is solved once and shared."""

    def __init__(self, models: Models, spec: ModelSpec, benchmark: Benchmark, max_tokens: int | None = None,
                 attempts: int = ATTEMPTS):
        self.models, self.spec, self.benchmark = models, spec, benchmark
        self.max_tokens, self.attempts = max_tokens, attempts
        self.used: set[str] = set()  # task ids already made into an example: not attempted again
        self._solved: dict[tuple[int, str], asyncio.Future[Solutions]] = {}

    def _tried(self, state: SearchState) -> list[Task]:
        """The failed train tasks a reply alone can solve: questions, and functions to write (scored in a
        fresh workspace, prepared as a rollout's); a repository to patch (`swe`) is the agents' work."""
        return [state.tasks[r.task_id] for r in state.scored
                if r.failed and r.task_id in state.tasks and state.tasks[r.task_id].kind in ("qa", "code")
                and r.task_id not in self.used][: self.attempts]

    async def solve(self, state: SearchState, show_work: str) -> Solutions:
        key = (state.step, show_work)
        if key not in self._solved:
            self._solved = {k: f for k, f in self._solved.items() if k[0] == state.step}
            self._solved[key] = asyncio.ensure_future(self._solve_all(state, show_work))
        return await self._solved[key]

    async def _solve_all(self, state: SearchState, show_work: str) -> Solutions:
        tasks = self._tried(state)
        replies = await asyncio.gather(*[self._solve(state.skill, t, show_work) for t in tasks])
        return Solutions(tasks, [(t, r) for t, r in zip(tasks, replies) if r and await self._correct(t, r)])

    async def _solve(self, skill: Skill, task: Task, show_work: str) -> str | None:
        from skillopt.errors import ModelCallError

        system = chat_system(skill)
        user = f"{task.prompt}\n\n{show_work}".strip()
        req = ChatRequest(messages=(Message(role="system", content=system), Message(role="user", content=user)),
                          max_tokens=self.max_tokens, temperature=0.0)
        try:
            resp = await self.models.chat(self.spec, req, role="optimizer")
        except ModelCallError:
            return None
        return resp.text if resp.text.strip() else None

    async def _correct(self, task: Task, reply: str) -> bool:
        with tempfile.TemporaryDirectory(prefix="demo-") as ws:
            await asyncio.to_thread(self.benchmark.prepare, task, Path(ws))
            score = await self.benchmark.score(task, RolloutOutput(text=reply), Path(ws))
        return score.hard >= 1.0


class DemonstrationProposer:
    name = "demonstration"

    def __init__(self, teacher: Teacher | None, template: Template = WORKING_FIRST, shapes: Shapes | None = None):
        """`teacher` None: only the target's own successes can be examples (agent harnesses, or no
        teacher); `shapes`: the step's learned reply shape, under `train.template=learned`."""
        self.teacher, self.template, self.shapes = teacher, template, shapes
        self.used: set[str] = teacher.used if teacher else set()  # task ids already made into an example

    async def propose(self, state: SearchState) -> Proposal:
        show_work, follow, notes = await teacher_instruction(self.template, self.shapes, state)
        found = self._own_successes(state) + await self._teacher(state, show_work)
        if not found:
            return Proposal(reflections=notes)
        task, reply, how = min(found, key=lambda f: len(f[1].strip()))
        self.used.add(task.id)
        edit = demonstration_edit(state.skill, task, reply, follow)
        failed = [r.task_id for r in state.scored if r.failed and r.task_id != task.id]
        why = f"worked example ({how}) from train task {task.id}" + "".join(f"; {n.analysis}" for n in notes)
        return Proposal([Candidate(id="", step=state.step, origin="demonstration", parent=state.version, edits=[edit],
                                   rationale=why, sources=failed[:4] or [r.task_id for r in state.scored][:4])],
                        notes)

    def _own_successes(self, state: SearchState) -> list[tuple[Task, str, str]]:
        return [(state.tasks[r.task_id], r.output, "the target's own rollout") for r in state.scored
                if not r.failed and not r.error and _usable(r.output)
                and r.task_id in state.tasks and r.task_id not in self.used]

    async def _teacher(self, state: SearchState, show_work: str) -> list[tuple[Task, str, str]]:
        """The teacher's correct replies that an example can show."""
        if self.teacher is None:
            return []
        return [(t, r, "solved by the optimizer model and checked by the scorer")
                for t, r in (await self.teacher.solve(state, show_work)).solved if _usable(r)]


async def teacher_instruction(template: Template, shapes: Shapes | None,
                              state: SearchState) -> tuple[str, str, list[Reflection]]:
    """(what the teacher is asked on top of a task, the line that opens a worked example, the notes):
    the template's wording, or under `learned` the step's shape when the optimizer wrote one. Every
    proposer that reads the teacher's solutions asks with this, so a step's are computed once."""
    if template.name == LEARNED.name and shapes is not None:
        shape, note = await shapes.of(state)
        if shape:
            return shape, f"Reply the way this example does: {shape}", [note]
        return template.show_work, template.follow, [note]
    return template.show_work, template.follow, []


def _usable(reply: str) -> bool:
    """A reply an example can show: more to it than the answer (an example teaches the shape of a
    reply only then), and short enough to show whole."""
    return sum(1 for ln in reply.splitlines() if ln.strip()) >= 2 and len(reply.strip()) <= MAX_REPLY_CHARS
