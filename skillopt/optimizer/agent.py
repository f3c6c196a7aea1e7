"""Agent-aware proposers: candidates read from what coding agents did (their trajectories), for the
claude-code, codex and mini-swe-agent harnesses (`harness.base.discovers_skill`); the chat harness
keeps the proposers of `propose`, `demonstrate` and `rules`.

- `TrajectoryReflectionProposer` ("trajectory-reflection"): the optimizer is shown, per failed
  rollout, its tool calls with exit codes, the tail of its last test run, its diff, where it stopped,
  and the failure kinds counted over the batch, and asked for ONE edit that addresses a recurring
  kind (tool misuse, a test command the repository needs, a convention broken). Each reflection of a
  step takes the next most frequent kind.
- `ProcedureProposer` ("procedure"): a short numbered "## Procedure" section written from what the
  passing trajectories did that the failing ones did not; the habits that differ are counted here
  (ran the tests, ran them after the last edit...) and shown to the optimizer.
- `TrajectoryDemonstrationProposer` ("trajectory-demonstration"): a solved trajectory condensed to
  the commands that mattered, in order, as an "## Example run" section (no model call); a file the
  agent wrote in one shell command is shown whole, in the agent's action form, and the example ends
  with its submit command. When the step's failed tasks include functions to write (`code`), the
  teacher (the optimizer model, `demonstrate.Teacher`) also writes the function for failed train
  tasks; one that passes its task's hidden checks becomes a second example run ("teacher-example"):
  the file written in one command, then the agent's submit command, each as the agent's reply holds
  it (`ActionForm`, from the harness). What is learned is the function; the two steps around it
  are fixed wording, so its lift is attributed to its own kind.

Each makes candidates like any proposer: leakage-checked, screened, then gated.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from pydantic import BaseModel, Field

from skillopt.benchmarks.code import extract_code, language_of
from skillopt.edits import Edit
from skillopt.models.router import Models, StructuredFailure
from skillopt.models.spec import ModelSpec
from skillopt.models.types import Message
from skillopt.optimizer.aggregate import aggregate, select
from skillopt.optimizer.demonstrate import Teacher
from skillopt.optimizer.facts import shell_complaint, shown_subjects
from skillopt.optimizer.propose import Proposal, SearchState
from skillopt.optimizer.reflect import anchor_before_protected, anchor_choices, reply_schema
from skillopt.optimizer.rules import rule_edit, rules_in
from skillopt.optimizer.types import ReflectionReply, ScoredRollout
from skillopt.prompts import render
from skillopt.record import Candidate, Reflection
from skillopt.skill import Skill
from skillopt.traces.trajectory import PYTHON_TO_SHELL, Trajectory, TrajectoryStep

SHOWN_FAILURES = 4  # failed trajectories per reflection
SHOWN_SUCCESSES = 2
PROCEDURE = "Procedure"
EXAMPLE = "Example run"
EXAMPLE_OPENING = (f"## {EXAMPLE}\n\nA solved task, condensed to the steps that mattered; work through yours in the "
                   "same order.\n\n")  # a condensed trajectory's and the teacher's example run alike
MIN_STEPS, MAX_STEPS = 3, 7
MAX_STEP_CHARS = 200
EXAMPLE_STEPS = 8  # commands kept in a condensed example
SAID_FACTS = 4  # complaints of failed commands counted for the optimizer
MAX_FILE_SHOWN = 1500  # characters of each supporting file shown to the optimizer
_HARNESS_NOISE = ("SKILL.md", "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")


def traced(scored: list[ScoredRollout], failed: bool) -> list[ScoredRollout]:
    """The rollouts with a trajectory that failed (or passed). An agent that stopped on its own limit
    (max turns, time-out, no valid action) failed, and is shown: that stop is what the skill must
    change. An infrastructure error never reaches the optimizer at all."""
    return [r for r in scored if r.failed == failed and r.trajectory is not None]


def kinds_over(rollouts: list[ScoredRollout]) -> list[tuple[str, int]]:
    """Failure kinds counted over the rollouts, most frequent first (ties: in FAILURE_KINDS order)."""
    counts = Counter(k for r in rollouts if r.trajectory is not None for k in r.trajectory.failure_kinds)
    return counts.most_common()


def said_facts(fails: list[ScoredRollout]) -> list[str]:
    """What failed commands printed, counted over the failed rollouts: each complaint once per rollout,
    by its message (a shell's place and subject set apart, `facts.shell_complaint`), with up to two of
    its subjects or, where it names none, the command it refused. One rollout's complaint is that
    rollout's; what recurs across rollouts ('Syntax error: "(" unexpected' from the Python source
    sent as a command, in 7 of 12) is what a skill can name."""
    said: dict[str, list[str]] = {}
    for r in fails:
        mine: dict[str, str] = {}
        for s in r.trajectory.steps if r.trajectory is not None else []:
            for part in s.said.split(" | ") if s.said else []:
                message, about = shell_complaint(part)
                mine.setdefault(message[:80], about[:40] or s.command[:40])
        for message, about in mine.items():
            said.setdefault(message, []).append(about)
    common = sorted(((m, on) for m, on in said.items() if len(on) >= 2), key=lambda kv: -len(kv[1]))
    return [f"'{m}' in {len(on)} of {len(fails)}{shown_subjects(on)}" for m, on in common[:SAID_FACTS]]


def edit_schema(skill: Skill) -> dict:
    """One edit, as `reflect.reply_schema` narrows it for the SKILL.md body, plus (a skill that is a
    folder, or may become one) an edit of a whole supporting file: add a new one, replace or delete one
    it has."""
    schema = reply_schema(skill, 1)
    edit = ReflectionReply.model_json_schema()["$defs"]["ProposedEdit"]
    props = {k: edit["properties"][k] for k in ("text", "rationale", "evidence")}
    existing = sorted(skill.files)
    ops = ["add", "replace", "delete"] if existing else ["add"]
    path = {"type": "string", "pattern": r"^[A-Za-z0-9_][A-Za-z0-9_.-]*(/[A-Za-z0-9_][A-Za-z0-9_.-]*)*$",
            "maxLength": 120}
    schema["$defs"]["ProposedEdit"]["anyOf"].append(
        {"type": "object", "properties": {**props, "op": {"type": "string", "enum": ops}, "file": path,
                                          "text": {**props["text"], "maxLength": 4000}},
         "required": ["op", "file", "text"]})
    return schema


def _section_edit(skill: Skill, title: str, text: str, why: str, evidence: list[str]) -> Edit:
    """Replace the section `title` when the skill has one, else add it before the first protected region."""
    if any(s.title == title for s in skill.sections()):
        return Edit(op="replace", anchor=title, text=text, rationale=why, evidence=evidence)
    return Edit(op="add", anchor=anchor_before_protected(skill), text=text, rationale=why, evidence=evidence)


class TrajectoryReflectionProposer:
    name = "trajectory-reflection"

    def __init__(self, models: Models, spec: ModelSpec, count: int = 2, max_tokens: int | None = None,
                 temperature: float | None = None, retries: int = 2):
        self.models, self.spec, self.count, self.retries = models, spec, count, retries
        self.max_tokens, self.temperature = max_tokens, temperature

    async def propose(self, state: SearchState) -> Proposal:
        fails = traced(state.scored, failed=True)
        if not fails or self.count <= 0:
            return Proposal()
        kinds = kinds_over(fails)
        foci = [k for k, _ in kinds][: self.count] or [""]
        self.models.meter.check()
        reflections = list(await asyncio.gather(*[self._one(state, fails, kinds, focus, i)
                                                  for i, focus in enumerate(foci)]))
        out = []
        for focus, r in zip(foci, reflections):
            edits = select(aggregate(r.edits, state.rejected), 1)
            if edits:
                out.append(Candidate(id="", step=state.step, origin="trajectory-reflection", parent=state.version,
                                     edits=edits, rationale=(f"[{focus}] " if focus else "") + r.analysis,
                                     sources=list(r.minibatch)))
        return Proposal(out, reflections)

    async def _one(self, state: SearchState, fails: list[ScoredRollout], kinds: list[tuple[str, int]],
                   focus: str, sample: int) -> Reflection:
        shown = sorted(fails, key=lambda r: r.trajectory is None or focus not in r.trajectory.failure_kinds)
        shown = shown[:SHOWN_FAILURES]
        wins = traced(state.scored, failed=False)[:SHOWN_SUCCESSES]
        prompt = render("reflect_trajectory.md.j2", skill_text=state.skill.render(), failures=shown, successes=wins,
                        files={k: v[:MAX_FILE_SHOWN] for k, v in state.skill.files.items()},
                        kinds=kinds, failed_total=len(fails), focus=focus, rejected=list(state.rejected)[-10:],
                        said=said_facts(fails),
                        anchors=anchor_choices(state.skill), editable=anchor_choices(state.skill, editable=True))
        ids = [r.task_id for r in shown]
        temperature = max(self.temperature or 0.0, 0.8) if sample else self.temperature
        for _ in range(self.retries + 1):
            reply = await self.models.chat_json(self.spec, [Message(role="user", content=prompt)], ReflectionReply,
                                                role="optimizer", max_tokens=self.max_tokens, temperature=temperature,
                                                json_schema=edit_schema(state.skill), seed=sample or None)
            if not (isinstance(reply, StructuredFailure) and reply.transient):
                break
        if isinstance(reply, StructuredFailure):
            return Reflection(minibatch=ids, error=reply.error, transient=reply.transient)
        edits = [e.to_edit() for e in reply.edits if e.op == "delete" or e.text.strip()][:1]
        return Reflection(minibatch=ids, edits=edits, analysis=reply.analysis)


SHELL_ORIGIN = "shell-rule"
# the fixed wording of the `shell-rule` candidate: what is learned is that this agent and model send Python to
# the shell (counted in the step's failed trajectories); the instruction that undoes it is written here
SHELL_RULE = ("Every command you send runs in a shell (/bin/sh), not in Python: Python source sent as a command fails "
              "('import: not found', 'Syntax error: \"(\" unexpected'). Write the code into the file the task names "
              "(else a new .py file) with one command, `cat > FILE <<'EOF'`, the code, then a line `EOF`; then run it "
              "with `python3 FILE`.")


class ShellRuleProposer:
    """At most one `shell-rule` candidate a step, with no optimizer call: when at least `min_count` of the
    step's failed rollouts sent Python source to the shell as a command (`TrajectoryStep.python`), a rule
    in fixed wording saying where commands run and how code reaches a file. The 1.5B optimizer, shown
    those trajectories and the shell's complaints counted, proposes code or rules that miss the file
    (perf/results/agents.json); a bash-only agent driven by a small model meets this failure first. Its
    lift is its own kind's, `shell-rule` (`train.shell_rule=false` turns it off)."""

    name = "shell-rule"

    def __init__(self, min_count: int = 2):
        self.min_count = min_count

    async def propose(self, state: SearchState) -> Proposal:
        fails = traced(state.scored, failed=True)
        sent = [r for r in fails if any(s.python for s in r.trajectory.steps)]
        held = [e.text for e in state.rejected] + rules_in(state.skill)
        if len(sent) < self.min_count or any(SHELL_RULE in t for t in held):
            return Proposal()
        # its screen: the tasks where the agent did it, then other failed ones (a rule of where commands run
        # and how code reaches a file serves those too): 2 screen tasks turn a rule worth 3 tasks in 12 away
        # about half the time (report split seed 102: 0 vs 0 on 2), 4 a third of the time (seed 103: 0 vs 0
        # on 4, where Python went to the shell in 1 of the 4 rollouts, not 4), so a tie passes when the
        # rollouts stopped doing what the rule is about (its aim, counted on both sides of the screen)
        others = [r for r in fails if r not in sent]
        ids = [r.task_id for r in sent + others][:SHOWN_FAILURES]
        why = (f"python-to-shell: {len(sent)} of {len(fails)} failed rollouts sent Python source to the shell "
               "as a command")
        edit = rule_edit(state.skill, SHELL_RULE, why, ids)
        return Proposal([Candidate(id="", step=state.step, origin=SHELL_ORIGIN, parent=state.version, edits=[edit],
                                   rationale=why, sources=ids, aim=PYTHON_TO_SHELL)],
                        [Reflection(minibatch=ids, edits=[edit], analysis=why)])


@dataclass(frozen=True)
class Habit:
    name: str
    passing: int
    failing: int


HABITS = {
    "ran the tests": lambda t: t.tests_run > 0,
    "ran the tests after its last edit": lambda t: t.tested_after_last_edit,
    "the last test run passed": lambda t: t.test_exit == 0,
    "made an edit": lambda t: any(s.edit for s in t.steps) or bool(t.diff),
    "every edit applied": lambda t: not any(s.edit and s.failed for s in t.steps),
    "looked at the code before its first edit": lambda t: _looked_first(t),
    "left a diff": lambda t: bool(t.diff),
    "no command failed": lambda t: not any(s.failed for s in t.steps),
}


def _looked_first(t: Trajectory) -> bool:
    edits = [s.index for s in t.steps if s.edit]
    first = min(edits) if edits else None
    return any(not s.edit and not s.test and (first is None or s.index < first) and not _noise(s) for s in t.steps)


def _noise(s: TrajectoryStep) -> bool:
    return any(n in s.command for n in _HARNESS_NOISE) or s.command.lower().startswith("skill")


def habits(passing: list[ScoredRollout], failing: list[ScoredRollout]) -> list[Habit]:
    """The habits whose share differs between passing and failing trajectories, largest gap first."""
    rows = []
    for name, has in HABITS.items():
        p = sum(1 for r in passing if has(r.trajectory))
        f = sum(1 for r in failing if has(r.trajectory))
        if abs(p / len(passing) - f / len(failing)) > 1e-9:
            rows.append(Habit(name, p, f))
    return sorted(rows, key=lambda h: -abs(h.passing / len(passing) - h.failing / len(failing)))


class ProcedureReply(BaseModel):
    analysis: str = ""
    steps: list[str] = Field(default_factory=list)


def procedure_section(steps: list[str]) -> str:
    lines = [" ".join(s.split()).lstrip("0123456789.) ").strip()[:MAX_STEP_CHARS] for s in steps]
    lines = [ln for ln in lines if ln][:MAX_STEPS]
    return f"## {PROCEDURE}\n\n" + "\n".join(f"{i}. {ln}" for i, ln in enumerate(lines, 1)) + "\n"


class ProcedureProposer:
    name = "procedure"

    def __init__(self, models: Models, spec: ModelSpec, max_tokens: int | None = None,
                 temperature: float | None = None):
        self.models, self.spec, self.max_tokens, self.temperature = models, spec, max_tokens, temperature

    async def propose(self, state: SearchState) -> Proposal:
        passing, failing = traced(state.scored, failed=False), traced(state.scored, failed=True)
        if not passing or not failing:
            return Proposal()
        found = habits(passing, failing)
        shown_p, shown_f = passing[:SHOWN_SUCCESSES + 1], failing[:SHOWN_FAILURES]
        prompt = render("procedure.md.j2", skill_text=state.skill.render(), habits=found, n_pass=len(passing),
                        n_fail=len(failing), passing=shown_p, failing=shown_f, min_steps=MIN_STEPS, max_steps=MAX_STEPS)
        schema = ProcedureReply.model_json_schema()
        schema["properties"]["steps"].update(minItems=MIN_STEPS, maxItems=MAX_STEPS,
                                             items={"type": "string", "maxLength": MAX_STEP_CHARS})
        schema["properties"]["analysis"]["maxLength"] = 400
        self.models.meter.check()
        reply = await self.models.chat_json(self.spec, [Message(role="user", content=prompt)], ProcedureReply,
                                            role="optimizer", max_tokens=self.max_tokens,
                                            temperature=self.temperature, json_schema=schema)
        ids = [r.task_id for r in shown_f + shown_p]
        if isinstance(reply, StructuredFailure):
            return Proposal(reflections=[Reflection(minibatch=ids, error=f"procedure: {reply.error}",
                                                    transient=reply.transient)])
        text = procedure_section(reply.steps)
        if text.count("\n") < MIN_STEPS + 2:  # fewer than MIN_STEPS steps survived
            return Proposal()
        why = "a procedure from what passing trajectories did: " + "; ".join(
            f"{h.name} ({h.passing}/{len(passing)} passing, {h.failing}/{len(failing)} failing)" for h in found[:3])
        edit = _section_edit(state.skill, PROCEDURE, text, why[:300], [r.task_id for r in shown_f])
        return Proposal([Candidate(id="", step=state.step, origin="procedure", parent=state.version, edits=[edit],
                                   rationale=reply.analysis or why, sources=[r.task_id for r in shown_f])])


def condense(t: Trajectory, limit: int = EXAMPLE_STEPS) -> list[TrajectoryStep]:
    """The steps of a solved trajectory that mattered, in order: its edits, its test runs, and the
    successful look-ups just before its first edit; failed detours, repeats and the harness's own
    commands (reading the skill, submitting) dropped."""
    kept: list[TrajectoryStep] = []
    first_edit = min((s.index for s in t.steps if s.edit), default=None)
    looks = [s for s in t.steps if not s.edit and not s.test and not s.failed and not _noise(s)
             and (first_edit is None or s.index < first_edit)][-2:]
    for s in t.steps:
        if _noise(s) or (s.failed and not s.test):
            continue
        if (s.edit or s.test or s in looks) and not (kept and kept[-1].command == s.command):
            kept.append(s)
    if len(kept) > limit:  # keep the last test run, which shows the fix holding
        kept = kept[: limit - 1] + kept[-1:]
    return kept


@dataclass(frozen=True)
class ActionForm:
    """How the run's agent acts: one shell command as its reply holds it, and the command that
    submits (None: the agent stops by itself). The harness says both (`AgentHarness.action`)."""

    action: Callable[[str], str]
    submit: str | None = None


def example_section(t: Trajectory, steps: list[TrajectoryStep], form: ActionForm | None = None) -> str:
    """The steps alone: the task's own text is left out (tasks of one benchmark share their wording, which
    the leakage check would rightly refuse, and the order of the commands is what the example teaches).
    With the agent's action form, an edit made in one shell command (a file written with `cat > f <<'EOF'`)
    is shown whole, as the agent's reply holds it, and the example ends with the agent's submit command:
    a command squeezed onto one line is no example of how to write a file."""
    lines = []
    for i, s in enumerate(steps, 1):
        label = "run the tests" if s.test else ("edit" if s.edit else "")
        code = "" if s.exit is None else f" (exit {s.exit})"
        if form is not None and s.source:
            lines.append(_fenced_step(i, f"{label}{code}", s.source, form))
        else:
            lines.append(f"{i}. {label + ': ' if label else ''}`{s.command}`{code}")
    result = f"\n\nResult: {t.diff}" if t.diff else ""
    return EXAMPLE_OPENING + _then_submit(lines, form) + result + "\n"


def written_file_section(path: str, code: str, form: ActionForm) -> str:
    """A solved task as the steps an agent takes to land it: the whole file written in one command,
    then the submit command. The task's own text is left out, as in `example_section`."""
    end = "EOF" if "EOF" not in code.splitlines() else "END_OF_FILE"
    heredoc = f"cat > {path} <<'{end}'\n{code.strip()}\n{end}"
    lines = [_fenced_step(1, f"Write the whole of `{path}` in one command", heredoc, form)]
    return EXAMPLE_OPENING + _then_submit(lines, form) + "\n"


def _fenced_step(n: int, label: str, command: str, form: ActionForm) -> str:
    """Step `n` of an example run, its command as the agent's reply holds it."""
    return f"{n}. {label}:\n\n{form.action(command)}\n"


def _then_submit(lines: list[str], form: ActionForm | None) -> str:
    """The steps, then the agent's submit command as one more step (where the agent has one)."""
    if form is not None and form.submit:
        lines = [*lines, _fenced_step(len(lines) + 1, "Submit", form.submit, form)]
    return "\n".join(lines).rstrip("\n")


class TrajectoryDemonstrationProposer:
    name = "trajectory-demonstration"

    def __init__(self, teacher: Teacher | None = None, form: ActionForm | None = None) -> None:
        """`teacher` and `form`: when no rollout solved its task, a function the teacher wrote for a
        failed `code` train task, verified by its checks, is the example run."""
        self.teacher, self.form = teacher, form
        self.used: set[str] = teacher.used if teacher else set()  # task ids already made into an example

    async def propose(self, state: SearchState) -> Proposal:
        """The shortest solved trajectory, condensed; and, for functions to write, the teacher's function as
        an example run too: an agent's one lucky solve may be a poor example (a run that never submitted,
        a file written with the test pasted in), so both are candidates and the screen says which helps."""
        found = [(r, t, condense(t)) for r in traced(state.scored, failed=False)
                 if (t := r.trajectory) is not None and r.task_id in state.tasks and r.task_id not in self.used]
        found = [(r, t, steps) for r, t, steps in found if steps]
        out = Proposal()
        if found:
            r, t, steps = min(found, key=lambda f: (len(f[2]), f[1].calls))
            self.used.add(r.task_id)
            text = example_section(t, steps, self.form)
            why = f"a solved trajectory of train task {r.task_id}, condensed to {len(steps)} steps"
            edit = _section_edit(state.skill, EXAMPLE, text, why, [r.task_id])
            failed = [x.task_id for x in state.scored if x.failed and x.task_id != r.task_id]
            out.candidates.append(Candidate(id="", step=state.step, origin="trajectory-demonstration",
                                            parent=state.version, edits=[edit], rationale=why,
                                            sources=failed[:4] or [r.task_id]))
        taught = await self._from_teacher(state)
        out.candidates.extend(taught.candidates)
        out.reflections.extend(taught.reflections)
        return out

    async def _from_teacher(self, state: SearchState) -> Proposal:
        failed = [r.task_id for r in state.scored if r.failed and r.task_id in state.tasks]
        if (self.teacher is None or self.form is None
                or not any(state.tasks[t].kind == "code" for t in failed)):
            return Proposal()
        solutions = await self.teacher.solve(state, "")
        code = [(task, extract_code(reply, language_of(task))) for task, reply in solutions.solved
                if task.kind == "code"]
        if not code:
            why = (f"teacher example not proposed: the teacher solved 0 of "
                   f"{len(solutions.tried)} failed train tasks")
            return Proposal(reflections=[Reflection(minibatch=[t.id for t in solutions.tried], analysis=why)])
        task, source = min(code, key=lambda c: len(c[1]))
        self.used.add(task.id)
        why = f"the teacher's function for train task {task.id}, which passed its checks, as an agent's steps"
        edit = _section_edit(state.skill, EXAMPLE,
                             written_file_section(language_of(task).solution_file, source, self.form), why, [task.id])
        return Proposal([Candidate(id="", step=state.step, origin="teacher-example", parent=state.version,
                                   edits=[edit], rationale=why, sources=[t for t in failed if t != task.id][:4]
                                   or [task.id])])
