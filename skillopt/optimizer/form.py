"""Rules of answer form read off the scorer's feedback by code, with no optimizer call.

The expected answers of the failed train rollouts are evidence of a convention the prompt never
states: a bare name where the agent wrote a sentence ("Jane Austen", not "Emma is a novel by Jane
Austen."), a number where it wrote words, the whole name where it wrote a part. When at least
`min_count` of a step's failures differ from their expected answer in the same way, this proposer
adds one rule for that difference to the skill's rules section, quoting up to `examples` of those
failures (expected beside written) as its evidence.

What is learned here is which convention the data holds, and its examples; the wording of each
rule is fixed below (`FORMS`). So a lift from this proposer is attributed to its own candidate
kind, `form-rule`, never to reflection, and `train.form_rules=false` turns it off (the suite's
`no-form-rules` arm). It costs no optimizer call: only the screen and the gate's rollouts.

With `label_rule` (`train.label_rule`, the suite's `label-rule` arm) it also proposes, when the train
tasks' expected answers are a closed label set (`facts.closed_labels`) and at least `min_count` failed answers
were none of the labels, one rule naming the labels as the data writes them: its own candidate kind,
`label-rule` (the labels are learned from the data; the sentence around them is fixed here).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from skillopt.optimizer.propose import Proposal, SearchState
from skillopt.optimizer.facts import closed_labels, is_numeric, normalize_answer, outside_labels, stated_answer
from skillopt.optimizer.rules import rule_edit, rules_in, with_examples
from skillopt.optimizer.types import ScoredRollout
from skillopt.record import Candidate, Reflection

ORIGIN = "form-rule"
LABEL_ORIGIN = "label-rule"
LABEL_RULE = "Answer with exactly one of these labels, written exactly as shown: {labels}."

# how a failed answer differs from its expected one -> the instruction that undoes the difference
FORMS: dict[str, str] = {
    "adds-words": "Write only the answer itself, the shortest name, number or phrase that answers the question: "
                  "never a full sentence, a title or an explanation.",
    "partial": "Write the answer in full, the whole name or phrase as it is usually written, not a part of it.",
    "number-expected": "Answer with a number, written in digits, not with words.",
    "words-expected": "Answer with the name or phrase asked for, not with a number.",
}


def form_difference(r: ScoredRollout, labels: Sequence[str] = ()) -> str | None:
    """How the failed rollout's final answer differs in form from an expected answer (any of the
    alternatives a reference lists with " | "), or None when it is another answer altogether, or
    when the reply stated none (`facts.stated_answer`). `labels`: the data's closed answer set, if it
    has one; a reply that wrote one label for another gave another answer, not another form (on MRPC
    'equivalent' for 'not_equivalent' read as a part of the whole label, and in epoch 1 of a 3-epoch
    run the rule "Write the answer in full ... For example: 'not_equivalent', not 'equivalent'" was
    gated: a decision spent on telling the target to prefer one label)."""
    got = normalize_answer(stated_answer(r.output))
    if not got or got in {normalize_answer(label) for label in labels}:
        return None
    for alternative in r.reference.split(" | "):
        exp = normalize_answer(alternative)
        if not exp or exp == got:
            continue
        if is_numeric(exp) and not re.search(r"[0-9]", got):  # "12" for "twelve"; "By 1965" for "2008" is
            return "number-expected"                           # another answer, not another form
        if is_numeric(got) and not re.search(r"[0-9]", exp):
            return "words-expected"
        if f" {exp} " in f" {got} ":
            return "adds-words"
        if len(got) >= 2 and f" {got} " in f" {exp} ":
            return "partial"
    return None


def dominant_form(failures: Sequence[ScoredRollout], min_count: int,
                  labels: Sequence[str] = ()) -> tuple[str, list[ScoredRollout]] | None:
    """The difference of form most failures share, with those failures, if at least `min_count` do."""
    groups: dict[str, list[ScoredRollout]] = {}
    for r in failures:
        kind = form_difference(r, labels)
        if kind:
            groups.setdefault(kind, []).append(r)
    if not groups:
        return None
    kind, members = max(groups.items(), key=lambda kv: (len(kv[1]), -list(FORMS).index(kv[0])))
    return (kind, members) if len(members) >= min_count else None


class FormRuleProposer:
    """At most one `form-rule` candidate a step: the rule of the form most failures break."""

    name = "form-rules"

    def __init__(self, min_count: int = 2, examples: int = 2, forms: bool = True, label_rule: bool = False):
        self.min_count, self.examples, self.forms, self.label_rule = min_count, examples, forms, label_rule

    async def propose(self, state: SearchState) -> Proposal:
        failures = [r for r in state.scored if r.failed and not r.error]
        out = Proposal()
        labels = closed_labels(state.references())
        found = dominant_form(failures, self.min_count, [label for label, _ in labels]) if self.forms else None
        if found is not None:
            kind, members = found
            why = f"{kind}: {len(members)} of {len(failures)} failed answers differ from the expected ones this way"
            self._add(out, state, ORIGIN, FORMS[kind], with_examples(FORMS[kind], members, self.examples), why, members)
        outside = outside_labels(failures, labels) if labels and self.label_rule else []
        if len(outside) >= self.min_count:
            rule = LABEL_RULE.format(labels=", ".join(f"'{label}'" for label, _ in labels))
            why = (f"labels: the train tasks' expected answers are {len(labels)} labels, and {len(outside)} of "
                   f"{len(failures)} failed answers were none of them")
            self._add(out, state, LABEL_ORIGIN, rule, rule, why, outside)
        return out

    @staticmethod
    def _add(out: Proposal, state: SearchState, origin: str, rule: str, text: str, why: str,
             members: Sequence[ScoredRollout]) -> None:
        """One candidate adding `text` to the rules section, unless the skill holds `rule` already or the
        gate or the screen turned it down."""
        if any(rule in t for t in [e.text for e in state.rejected] + rules_in(state.skill)):
            return
        ids = [r.task_id for r in members]
        edit = rule_edit(state.skill, text, why, ids)
        out.candidates.append(Candidate(id="", step=state.step, origin=origin, parent=state.version, edits=[edit],
                                        rationale=why, sources=ids))
        out.reflections.append(Reflection(minibatch=ids, edits=[edit], analysis=why))
