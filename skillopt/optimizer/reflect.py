"""Reflect: one optimizer call over a minibatch of scored rollouts -> proposed edits."""

from __future__ import annotations

from collections.abc import Sequence

from skillopt.edits import Edit
from skillopt.models.router import Models, StructuredFailure
from skillopt.models.spec import ModelSpec
from skillopt.models.types import Message
from skillopt.optimizer.facts import checked_facts
from skillopt.optimizer.template import Template
from skillopt.optimizer.types import ReflectionReply, ScoredRollout
from skillopt.prompts import render
from skillopt.record import Reflection
from skillopt.skill import Skill


def make_minibatches(scored: Sequence[ScoredRollout], size: int, successes_per_batch: int,
                     max_batches: int) -> list[tuple[list[ScoredRollout], list[ScoredRollout]]]:
    """Group failures into minibatches of `size`, each with a few successes for contrast."""
    failures = [r for r in scored if r.failed]
    wins = [r for r in scored if not r.failed]
    batches = []
    for i in range(0, len(failures), max(1, size)):
        chunk = failures[i : i + size]
        j = len(batches) * successes_per_batch
        batches.append((chunk, wins[j : j + successes_per_batch]))
        if len(batches) >= max_batches:
            break
    return batches


# The sections two proposers write out of train tasks (demonstrate.py, answers.py): they quote tasks
WORKED_EXAMPLE = "Worked example"
EXPECTED_ANSWERS = "Examples of expected answers"

MAX_EDIT_CHARS = 800  # one edit's text: a bounded edit, a rule or two, not a rewrite

# Each reflection of a step looks at its failures from another angle (the way PromptBreeder varies
# its mutation prompts): one proposal per angle makes the candidates of a step differ in kind, not
# only in wording. None of them names a task family. The first angle, the reply's shape, is the
# template's (`optimizer.template`, `train.template`): `foci(template)`.
FOCI = (
    "the procedure: the steps the agent should work through, in order, for every task of this kind.",
    "the mistakes in the failed outputs, and one check the agent should run before it answers.",
    "what the skill already says but the agent ignores or misreads: say it more directly, or remove what misleads.",
)


def foci(template: Template) -> tuple[str, ...]:
    """The angles of a step's reflections, in turn: the template's angle on the reply's shape first."""
    return (template.shape_focus, *FOCI)


def anchor_choices(skill: Skill, editable: bool = False) -> list[str]:
    """What an edit can anchor on: "" (the end), section titles, and every line of the skill outside
    protected regions (markers and headings aside). `editable`: only what a replace or delete may
    touch, i.e. no section that holds a protected region."""
    spans = skill.protected_spans()

    def overlaps(start: int, end: int) -> bool:
        return any(a < end and start < b for a, b in spans)

    titles = [s.title for s in skill.sections() if not (editable and overlaps(s.start, s.end))]
    choices = ["", *titles] if not editable else titles
    pos = 0
    for line in skill.body.splitlines(keepends=True):
        text = line.strip()
        if text and not text.startswith(("#", "<!--")) and not overlaps(pos, pos + len(line)):
            choices.append(text)
        pos += len(line)
    return list(dict.fromkeys(choices))


def section_edit(skill: Skill, title: str, text: str, why: str, evidence: list[str]) -> Edit:
    """`text` (a whole "## `title`" section) replacing the skill's section of that title when it has
    one, else added before the first protected section (or at the end)."""
    if any(s.title == title for s in skill.sections()):
        return Edit(op="replace", anchor=title, text=text, rationale=why, evidence=evidence)
    return Edit(op="add", anchor=anchor_before_protected(skill), text=text, rationale=why, evidence=evidence)


def anchor_before_protected(skill: Skill) -> str | None:
    """The last section title that holds no protected region and comes before one; else the end."""
    editable = set(anchor_choices(skill, editable=True))
    spans = skill.protected_spans()
    first_protected = min((a for a, _ in spans), default=None)
    best = None
    for s in skill.sections():
        if s.title in editable and (first_protected is None or s.end <= first_protected):
            best = s.title
    return best


def quotes_tasks(text: str) -> bool:
    """An edit that is a section of train tasks (a worked example, examples of expected answers), not a
    rule: never listed to the rules or the reflection call as an edit tried and rejected. Cut to its first
    200 characters there, a rejected worked example on MRPC ended in "Jer", the start of its task's
    "Jeremy", and the 1.5B wrote five rules about "the word 'Jer'" (report split seed 110)."""
    return text.lstrip().startswith((f"## {WORKED_EXAMPLE}", f"## {EXPECTED_ANSWERS}"))


def reply_schema(skill: Skill, max_edits: int) -> dict:
    """The reply's JSON schema narrowed to this skill: an `add` anchors on anything that exists, a
    `replace` / `delete` only on what holds no protected region; 1..`max_edits` edits. Servers that
    constrain decoding (llama.cpp, vLLM, OpenAI) then cannot return an edit that cannot apply,
    which small optimizer models otherwise often do. Strings are bounded too."""
    schema = ReflectionReply.model_json_schema()
    edit = schema["$defs"]["ProposedEdit"]
    branches = []
    for ops, anchors in ((["add"], anchor_choices(skill)), (["replace", "delete"], anchor_choices(skill, True))):
        if not anchors:
            continue
        props = {**{k: v for k, v in edit["properties"].items() if k != "file"},  # files: optimizer/agent.py
                 "op": {"type": "string", "enum": ops},
                 "anchor": {**edit["properties"]["anchor"], "enum": anchors},
                 "text": {**edit["properties"]["text"], "maxLength": MAX_EDIT_CHARS},
                 "rationale": {**edit["properties"]["rationale"], "maxLength": 200},
                 "evidence": {**edit["properties"]["evidence"], "maxItems": 8}}
        branches.append({**edit, "properties": props, "required": ["op", "anchor", "text"]})
    schema["$defs"]["ProposedEdit"] = {"anyOf": branches}
    # reflection only runs on failures: at least one edit (the gate rejects it if it does not help)
    schema["properties"]["edits"].update(minItems=1, maxItems=max(1, max_edits))
    # bounded strings keep the whole reply inside the optimizer's token cap (a cut reply is not JSON)
    schema["properties"]["analysis"]["maxLength"] = 400
    return schema


async def reflect(models: Models, spec: ModelSpec, skill: Skill, failures: list[ScoredRollout],
                  successes: list[ScoredRollout], rejected: Sequence[Edit], max_edits: int,
                  max_tokens: int | None = None, temperature: float | None = None,
                  sample: int = 0, focus: str | None = None, labels: Sequence[str] = ()) -> Reflection:
    """One optimizer call. `sample` > 0 asks for another draw of the same prompt (a sampling seed,
    and a temperature of at least 0.8), so several reflections on one minibatch differ; `focus`
    (one of `foci(template)`) is the angle this reflection takes. Failures of code checked by running
    it come with what their checks said, counted (`facts.checked_facts`): the output of a failed test
    is long and each failure's alone says little; counted over the minibatch, a pattern is plain.
    `labels`: the step's closed answer set, when it has one (`facts.label_facts`)."""
    tried = [e for e in rejected if not quotes_tasks(e.text)][-10:]
    prompt = render("reflect.md.j2", skill_text=skill.render(), failures=failures, successes=successes,
                    rejected=tried, max_edits=max_edits, anchors=anchor_choices(skill),
                    editable=anchor_choices(skill, editable=True), focus=focus, facts=checked_facts(failures),
                    labels=list(labels))
    if sample:
        temperature = max(temperature or 0.0, 0.8)
    reply = await models.chat_json(spec, [Message(role="user", content=prompt)], ReflectionReply,
                                   role="optimizer", max_tokens=max_tokens, temperature=temperature,
                                   json_schema=reply_schema(skill, max_edits), seed=sample or None)
    ids = [r.task_id for r in failures + successes]
    if isinstance(reply, StructuredFailure):
        return Reflection(minibatch=ids, error=reply.error, transient=reply.transient)
    edits = [e.to_edit() for e in reply.edits if e.op == "delete" or e.text.strip()]
    return Reflection(minibatch=ids, edits=edits[: max(1, max_edits)], analysis=reply.analysis)
