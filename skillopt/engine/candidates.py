"""From proposals to candidates ready for the screen: which proposers run, and the checks a
candidate passes before any rollout (the leakage check, applying its edits, the token cap, not
already tried)."""

from __future__ import annotations

import ast
import asyncio
import re
from typing import TYPE_CHECKING

from skillopt.benchmarks.base import Task
from skillopt.edits import Edit, apply_edits
from skillopt.engine.events import Emitter, Note
from skillopt.harness.base import discovers_skill
from skillopt.optimizer.agent import (
    ActionForm,
    ProcedureProposer,
    ShellRuleProposer,
    TrajectoryDemonstrationProposer,
    TrajectoryReflectionProposer,
)
from skillopt.optimizer.answers import AnswerExamplesProposer
from skillopt.optimizer.credit import AblationProposer
from skillopt.optimizer.demonstrate import DemonstrationProposer, Teacher
from skillopt.optimizer.describe import DescriptionProposer
from skillopt.optimizer.form import FormRuleProposer
from skillopt.optimizer.lessons import LessonProposer
from skillopt.optimizer.leakage import LeakageCheck, LeakFinding
from skillopt.optimizer.pool import MergeProposer
from skillopt.optimizer.propose import Proposal, Proposer, ReflectionProposer, SearchState, dedupe
from skillopt.optimizer.rules import RuleProposer, adds_no_word, repeats, said_already, split_quotes
from skillopt.optimizer.reply_shape import ShapeProposer, Shapes
from skillopt.optimizer.template import LEARNED, template
from skillopt.record import Candidate
from skillopt.skill import Skill

if TYPE_CHECKING:
    from skillopt.engine.loop import Context

# a rewrite of the skill itself (gated for non-inferiority), and a rule whose wording is a constant here (it
# holds no task text by construction; a word of it that one shown task also has is no copy)
EXEMPT = ("consolidation", "shell-rule")
RULES = ("rules", "form-rule")  # a rule, then the answers it quotes from its own train failures
# quote their own train tasks by design
WORKED = ("demonstration", "trajectory-demonstration", "teacher-example", "answer-examples")
# an edit of these must say something in words: the optimizer is asked for an instruction, and a small one
# often replies with the code or command it saw fail (`import cmath`, `export PATH=...`, a fenced `pytest`)
INSTRUCTED = ("reflection", "trajectory-reflection", "revision")
_FENCED = re.compile(r"```.*?(?:```|\Z)", re.S)
_INLINE = re.compile(r"`[^`\n]*`")
_CALL = re.compile(r"^[\w.]+\(.*\)\s*:?$")  # `encode_list(data):`, a def header without its `def`
_SHELL_FIRST = frozenset("export cd pip pip3 python python3 pytest cat echo sed ls grep git chmod mkdir rm cp mv sh "
                         "bash sudo apt apt-get npm make".split())


def bare_code(text: str) -> bool:
    """Whether an edit's text is code or a command alone, with no instruction in words: outside its fenced
    blocks, headings and comments, what is left parses as Python, or no line of it is a sentence (each is
    Python alone such as `from math import gcd`, a call or a def header without its `def`, or a shell
    command that is no sentence such as `export PATH=$PATH:/usr/bin`)."""
    lines = [ln for ln in _FENCED.sub("", text).splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    if _parses("\n".join(lines)):
        return True
    return not any(_worded(ln) for ln in lines)


def _parses(code: str) -> bool:
    try:
        ast.parse(code)
    except (SyntaxError, ValueError):
        return False
    return True


def _worded(line: str) -> bool:
    """A line that says something in words: not code on its own, not a shell command."""
    words = _INLINE.sub("", line).strip()
    if not re.search(r"[A-Za-z]{2,}", words) or _parses(line.strip()) or _CALL.match(line.strip()):
        return False
    return not (words.split()[0] in _SHELL_FIRST and not words.endswith((".", "!", "?", ":")))


def build_proposers(ctx: Context) -> list[Proposer]:
    cfg, m = ctx.cfg.train, ctx.cfg.models
    kinds = {t.kind for t in ctx.benchmark.tasks("train")}
    tpl = template(cfg.template, next(iter(kinds)) if len(kinds) == 1 else "qa")
    out: list[Proposer] = []
    if cfg.max_reflections_per_step > 0:
        out.append(ReflectionProposer(
            ctx.models, ctx.optimizer, count=cfg.max_reflections_per_step, minibatch_size=cfg.minibatch_size,
            successes=cfg.include_successes, max_tokens=m.optimizer_max_tokens,
            temperature=m.optimizer_temperature, template=tpl, labels=cfg.label_facts))
    if cfg.rules_per_step > 0:
        out.append(RuleProposer(ctx.models, ctx.optimizer, count=cfg.rules_per_step, max_tokens=m.optimizer_max_tokens,
                                temperature=m.optimizer_temperature, examples=cfg.rule_examples,
                                labels=cfg.label_facts))
    if cfg.form_rules or cfg.label_rule:
        out.append(FormRuleProposer(examples=cfg.rule_examples, forms=cfg.form_rules, label_rule=cfg.label_rule))
    if cfg.answer_examples > 0:
        out.append(AnswerExamplesProposer(cfg.answer_examples))
    agent = discovers_skill(ctx.runner.harness)
    # the teacher (the optimizer model solving failed train tasks by a reply) serves the chat harness,
    # and agents writing functions (`code` tasks), whose example run it can write
    teacher = (Teacher(ctx.models, ctx.optimizer, ctx.benchmark, max_tokens=ctx.runner.limits.max_tokens)
               if ctx.cfg.harness == "chat" or (agent and "code" in kinds) else None)
    if agent:
        out += agent_proposers(ctx, teacher)
        teacher = None  # an agent's demonstrations are example runs, not chat replies
    shapes = (Shapes(ctx.models, ctx.optimizer, ctx.runner.limits.max_tokens)
              if teacher is not None and cfg.template == LEARNED.name else None)
    if cfg.demonstrations and not (agent and cfg.trajectory_demonstration):
        out.append(DemonstrationProposer(teacher, template=tpl, shapes=shapes))
    if shapes is not None and teacher is not None and cfg.shape_edit:
        out.append(ShapeProposer(shapes, teacher))
    if teacher is not None and cfg.lessons_per_step > 0:
        out.append(LessonProposer(ctx.models, ctx.optimizer, teacher, tpl, shapes, count=cfg.lessons_per_step,
                                  max_tokens=m.optimizer_max_tokens, temperature=m.optimizer_temperature))
    if cfg.merge:
        out.append(MergeProposer())
    if cfg.ablations_per_step > 0:
        out.append(AblationProposer(cfg.ablations_per_step))
    if cfg.description:  # train.description: a new description when the agent did not load the skill
        out.append(DescriptionProposer(ctx.models, ctx.optimizer, max_tokens=ctx.cfg.models.optimizer_max_tokens,
                                       temperature=ctx.cfg.models.optimizer_temperature))
    return out


def agent_proposers(ctx: Context, teacher: Teacher | None = None) -> list[Proposer]:
    """The agent-aware proposers (optimizer/agent.py), each with its setting to turn it off.
    `teacher`: for an example run written from its verified function when no rollout solved a task."""
    cfg, m = ctx.cfg.train, ctx.cfg.models
    out: list[Proposer] = []
    if cfg.trajectory_reflections > 0:
        out.append(TrajectoryReflectionProposer(ctx.models, ctx.optimizer, count=cfg.trajectory_reflections,
                                                max_tokens=m.optimizer_max_tokens, temperature=m.optimizer_temperature))
    if cfg.procedure:
        out.append(ProcedureProposer(ctx.models, ctx.optimizer, max_tokens=m.optimizer_max_tokens,
                                     temperature=m.optimizer_temperature))
    if cfg.trajectory_demonstration:
        harness = ctx.runner.harness
        form = ActionForm(harness.action, harness.submit_command) if hasattr(harness, "action") else None
        out.append(TrajectoryDemonstrationProposer(teacher, form))
    if cfg.shell_rule:
        out.append(ShellRuleProposer())
    return out


async def propose_all(proposers: list[Proposer], state: SearchState, emit: Emitter) -> Proposal:
    """Every proposer's candidates (concurrently), duplicates dropped, numbered s<step>-c<k>, and
    their reflections in the order of the proposers."""
    results = await asyncio.gather(*[p.propose(state) for p in proposers])
    reflections = [r for got in results for r in got.reflections]
    for r in reflections:
        if r.error:
            emit(Note(f"reflection failed (recorded): {r.error}"))
    candidates = dedupe([c for got in results for c in got.candidates])
    for k, c in enumerate(candidates, 1):
        c.id = f"s{state.step:03d}-c{k}"
    return Proposal(candidates, reflections)


def leaks(c: Candidate, edits: list[Edit], shown: list[Task], skill: Skill,
          labels: Sequence[str] = ()) -> list[LeakFinding]:
    """What the candidate's edits copy from the train tasks the optimizer was shown. A worked
    example quotes its own train task by design (its evidence), and nothing else: never another
    task's text, and never a task that is not a train task of this step. `labels`: the train split's
    closed answer set, which any edit may name."""
    if c.origin in RULES:  # the rule itself is checked in full; the answers it quotes are its own evidence
        ruled = [e.model_copy(update={"text": split_quotes(e.text)[0]}) for e in edits]
        quoted = [e.model_copy(update={"text": split_quotes(e.text)[1]}) for e in edits]
        return (LeakageCheck(shown, skill.render(), labels=labels).check(ruled)
                or _own_evidence_only(quoted, shown, skill))
    if c.origin not in WORKED:
        return LeakageCheck(shown, skill.render(), labels=labels).check(edits)
    return _own_evidence_only(edits, shown, skill)


def _own_evidence_only(edits: list[Edit], shown: list[Task], skill: Skill) -> list[LeakFinding]:
    """Edits that quote their own train tasks (their evidence) by design: never another task's text,
    and never a task that is not a train task of this step."""
    ids = {t.id for t in shown}
    own = {t for e in edits for t in e.evidence}
    foreign = sorted(own - ids)
    if foreign:
        return [LeakFinding(i, foreign[0], "a task that is not a train task of this step") for i in range(len(edits))]
    return LeakageCheck([t for t in shown if t.id not in own], skill.render(), runs_only=True,
                        own=[t for t in shown if t.id in own]).check(edits)


def something_new(c: Candidate, edits: list[Edit], skill: Skill, shown: list[Task],
                  rejected: Sequence[str]) -> list[Edit]:
    """A reflection's edits that say something new; when none does, none, and the candidate's status
    says why. Not new: an added passage whose word triples are nearly all in the skill, or in the
    skill and one train task as the agent reads them together (the 1.5B added the seed's own
    sentence, the protected code format, the task's own "Write the complete code in `solution.sh`");
    so a passage put in place of another, against the skill without the passage it replaces (on
    HumanEval the 1.5B replaced the seed's one instruction with the protected code format in a
    fence, and with the task's own instruction: both reached the screen); a passage with no word of
    its own, the skill's words rearranged (`rules.adds_no_word`); an edit nearly all in one
    edit tried and rejected, under any anchor (a reflection screened out the step before, a rejected
    rule given as a reflection)."""
    new = [e for e in edits if not says_again(e, skill, shown)]
    if not new:
        c.status = "duplicate"
        c.note = f"the edit says what the skill or the task already says: {edits[0].text.strip()[:80]!r}"
        return []
    fresh = [e for e in new if e.op == "delete" or not repeats(e.text, rejected)]
    if not fresh:
        c.status = "duplicate"
        c.note = f"the edit repeats one tried and rejected: {new[0].text.strip()[:80]!r}"
    return fresh


def says_again(e: Edit, skill: Skill, shown: list[Task]) -> bool:
    """The edit's new body text is nearly all in the skill, or in the skill and one of the `shown`
    tasks; for a replace, the skill without the passage it replaces (a rewording of that passage is
    new). A replace whose anchor is not found is left to `apply_edits` to report."""
    if e.part != "body" or e.op == "delete":
        return False
    own = skill.render()
    if e.op == "replace":
        without = apply_edits(skill, [Edit(op="delete", anchor=e.anchor)])
        if not without.applied:
            return False
        own = without.skill.render()
    return said_already(e.text, [own, *(f"{own}\n{t.prompt}" for t in shown)]) or adds_no_word(e.text, [own])


class Preparer:
    """Turns a proposed candidate into a stored skill version, or says why it will not be tried."""

    def __init__(self, ctx: Context):
        self.ctx = ctx

    def prepare(self, c: Candidate, skill: Skill, shown: list[Task], labels: Sequence[str] = (),
                rejected: Sequence[str] = ()) -> None:
        """`rejected`: the texts of edits tried alone and turned down (the ledger's)."""
        cfg, store = self.ctx.cfg, self.ctx.store
        edits = list(c.edits)
        if c.origin in INSTRUCTED:
            worded = [e for e in edits if e.op == "delete" or e.part != "body" or not bare_code(e.text)]
            if not worded:
                c.status = "no-instruction"
                c.note = f"the edit was code or a command alone: {edits[0].text.strip()[:80]!r}"
                return
            edits = worded
        if cfg.train.leakage_check and c.origin not in EXEMPT:
            findings = leaks(c, edits, shown, skill, labels)
            c.leakage = [str(f) for f in findings]
            leaked = {f.edit for f in findings}
            edits = [e for i, e in enumerate(edits) if i not in leaked]
            if findings:
                self.ctx.emit(Note(f"{c.id}: leakage check dropped {len(findings)} edit(s): {c.leakage[0]}"))
            if not edits:
                c.status, c.note = "leaked", "every edit copied task text"
                return
        if c.origin in INSTRUCTED:
            edits = something_new(c, edits, skill, shown, rejected)
            if not edits:
                return
        result = apply_edits(skill, edits, token_cap=cfg.train.skill_token_cap)
        c.applied = [f"{r.status}: {r.detail}" if r.status != "applied" else "applied" for r in result.reports]
        c.edits = edits
        if not result.applied:
            c.status, c.note = "not-applied", "no edit applied"
            return
        c.edits = result.applied
        if result.over_cap:
            c.status, c.note = "over-cap", f"{result.tokens} tokens, over the cap of {cfg.train.skill_token_cap}"
            return
        if result.skill.sha == skill.sha or any(v.sha == result.skill.sha and v.parent == c.parent and
                                                v.status != "candidate" for v in store.versions()):
            c.status, c.note = "duplicate", "the same skill was already tried from this incumbent"
            return
        v = store.add_version(result.skill, parent=c.parent, origin=f"step {c.step}", step=c.step)
        c.version = v.version
